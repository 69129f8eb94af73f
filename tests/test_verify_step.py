"""--verify --step on the CPU: the real step runner (build, copy with the fixes,
train, alternate, compare) on tiny models, with the device set to the CPU and, where
the numbers must be exact, a scripted timer. The CUDA run is marked and skipped here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _benchmarks import load_benchmark

from shapelint.check.run import builtin_rules
from shapelint.hardware import resolve
from shapelint.load import compile_probe
from shapelint.measure import step as vs
from shapelint.measure import step_blocks as blocks
from shapelint.measure import step_report as compare
from shapelint.measure import step_variants as variants
from shapelint.model.records import GraphBreaks
from shapelint.model.step_verification import StepComparison, StepVerification, VariantRun
from shapelint.pipeline.result import Options, Result
from shapelint.pipeline.run import lint_target
from shapelint.price import Policy
from shapelint.report.verification import report_lines

# A GPT-2 with a vocabulary of 5001 (SL501: pad to 5004 in tf32), small enough to train
# on a CPU in milliseconds; multi-line, as config.json files are written (findings point
# at a key's line)
GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 128, "n_head": 2, "n_layer": 1,
        "n_positions": 128, "vocab_size": 5001}

# Three findings, each applicable: the LM head (SL501, 5001 → 5004, the embedding
# grows with it) and the 2047-wide hidden layer (SL101 on up's out_features and on
# down's in_features: the same edit, 2047 → 2048, of both literals)
MODEL = '''\
import torch
import torch.nn as nn


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(5001, 256)
        self.up = nn.Linear(256, 2047)
        self.down = nn.Linear(2047, 256)
        self.head = nn.Linear(256, 5001, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.down(torch.relu(self.up(self.emb(idx)))))


def shapelint_model(batch: int = 4, seq: int = 128):
    return Tiny(), torch.randint(0, 5001, (batch, seq))
'''

#: the vocabulary computed, not a literal: --fix cannot apply it
COMPUTED = MODEL.replace("nn.Linear(256, 5001, bias=False)", "nn.Linear(256, 5000 + 1, bias=False)")

SMALL = blocks.Schedule(rounds=2, steps=2, warmup=1)

#: one pytest-xdist worker runs this module: the module-scoped lints below, and the
#: first real GPT-2 and torch.compile in a process, are paid once
pytestmark = [pytest.mark.xdist_group("verify_step"), pytest.mark.slow]


def lint(path: Path, *, batch: int | None = None, seq: int | None = None, compile: bool = False) -> Result:
    opts = Options(dtype="tf32", batch=batch, seq=seq, compile=compile, policy=Policy(min_step_share=0.0))
    return lint_target(path, opts, resolve("h100"), builtin_rules())


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("vstep")
    (root / "gpt2").mkdir()
    (root / "gpt2" / "config.json").write_text(json.dumps(GPT2, indent=2) + "\n")
    (root / "py").mkdir()
    (root / "py" / "model.py").write_text(MODEL)
    (root / "computed").mkdir()
    (root / "computed" / "model.py").write_text(COMPUTED)
    return {k: root / k for k in ("gpt2", "py", "computed")}


@pytest.fixture(scope="module")
def gpt2(folders: dict[str, Path]) -> Result:
    return lint(folders["gpt2"] / "config.json", batch=2, seq=128)


@pytest.fixture(scope="module")
def py(folders: dict[str, Path]) -> Result:
    return lint(folders["py"] / "model.py")


class Scripted:
    """A block timer that returns the given ms for every step of a label (the step is
    not run: the numbers are exact) and remembers the blocks it was asked for."""

    def __init__(self, ms: dict[str, float | list[float]]) -> None:
        self.ms, self.calls = ms, []

    def __call__(self, label, step, n):  # type: ignore[no-untyped-def]
        self.calls.append((label, n))
        value = self.ms.get(label, self.ms.get("*", 1.0))
        if isinstance(value, list):  # one value per block of this label
            value = value[sum(1 for c in self.calls if c[0] == label) - 1]
        return [float(value)] * n


def snapshot(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.stat().st_mode, p.read_bytes())
            for p in sorted(folder.rglob("*"))}


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary folder the copies go to (checked empty afterwards)."""
    folder = tmp_path / "scratch"
    folder.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(folder))
    return folder


# -- statistics ------------------------------------------------------------------


def test_alternate_runs_the_variants_block_by_block_in_turn() -> None:
    timer = Scripted({"before": 10.0, "after": 8.0, "f1": 9.0})
    samples, order = blocks.alternate([("before", lambda: None), ("after", lambda: None), ("f1", lambda: None)],
                                      timer, rounds=3, n=4)
    assert order == ["before", "after", "f1"] * 3
    assert timer.calls == [("before", 4), ("after", 4), ("f1", 4)] * 3
    assert samples["before"].steps == (10.0,) * 12 and samples["after"].blocks == (8.0, 8.0, 8.0)


def test_medians_block_means_and_the_noise_threshold() -> None:
    before = blocks.Samples((10.0, 12.0, 11.0, 30.0), (11.0, 20.5))  # a slow outlier: the median ignores it
    after = blocks.Samples((8.0, 9.0, 10.0, 9.5), (8.5, 9.75))
    c = compare.Comparison(before, after)
    assert before.median == 11.5 and after.median == 9.25
    assert c.speedup == pytest.approx(11.5 / 9.25)
    assert c.round_speedups == pytest.approx((11.0 / 8.5, 20.5 / 9.75))
    assert c.noise == pytest.approx((20.5 / 9.75 - 11.0 / 8.5) / 2)
    assert c.threshold == pytest.approx(1 + c.noise)
    assert not c.confirmed  # 1.24x, inside blocks that scatter by ±0.40


def test_the_noise_has_a_floor_and_a_speedup_above_it_is_confirmed() -> None:
    same = blocks.Samples((10.0,) * 4, (10.0, 10.0))
    faster = compare.Comparison(same, blocks.Samples((9.0,) * 4, (9.0, 9.0)))
    assert faster.noise == compare.NOISE_FLOOR and faster.confirmed
    barely = compare.Comparison(same, blocks.Samples((9.96,) * 4, (9.96, 9.96)))  # 1.004x: under 1 + 0.5%
    assert barely.speedup > 1 and not barely.confirmed


# -- a Hugging Face config ---------------------------------------------------------


def test_the_after_copy_is_the_config_as_fix_edits_it_outside_the_users_folder(
        gpt2: Result, folders: dict[str, Path], scratch: Path) -> None:
    (f, texts), = variants.plan(gpt2)[0]
    assert f.code == "SL501" and str(f.suggestion) == "vocab_size: 5001 → 5004"
    root = variants.scratch_root(Path(gpt2.target))
    copy = variants.write_copy(gpt2, variants.merged_texts(gpt2, [f]), root)
    assert not copy.resolve().is_relative_to(folders["gpt2"].resolve()) and copy.is_relative_to(scratch)
    edited = json.loads(copy.read_text())
    assert edited == {**GPT2, "vocab_size": 5004}
    built = variants.build_copy(gpt2, copy, "cpu")
    assert built.model.lm_head.out_features == 5004 and built.model.transformer.wte.num_embeddings == 5004
    assert variants.slice_padded_logits(built, [f]) == ("lm_head",)
    assert built.model.config.vocab_size == 5001  # the loss reads the tokenizer's vocabulary
    ids = torch.randint(0, 5001, (2, 16))
    out = built.model(input_ids=ids, labels=ids)
    assert out.logits.shape[-1] == 5001 and torch.isfinite(out.loss)


#: a two-layer Marian at opus-mt-en-de's vocabulary (58101: pad to 58104 in tf32)
MARIAN = {"architectures": ["MarianMTModel"], "model_type": "marian", "vocab_size": 58101,
          "decoder_vocab_size": 58101, "d_model": 64,
          "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
          "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "max_position_embeddings": 64, "pad_token_id": 58100,
          "decoder_start_token_id": 58100, "eos_token_id": 0}


def test_a_bias_added_to_the_logits_is_sliced_with_them(tmp_path: Path, scratch: Path) -> None:
    """The BART family adds ``final_logits_bias`` (1, vocab_size) to the output layer's
    logits: sliced back to the tokenizer's size, the logits meet a bias of that size."""
    (tmp_path / "marian").mkdir()
    (tmp_path / "marian" / "config.json").write_text(json.dumps(MARIAN, indent=2) + "\n")
    r = lint(tmp_path / "marian" / "config.json", batch=2, seq=32)
    (f, _), = variants.plan(r)[0]
    assert f.code == "SL501" and str(f.suggestion) == "vocab_size: 58101 → 58104"
    copy = variants.write_copy(r, variants.merged_texts(r, [f]), variants.scratch_root(Path(r.target)))
    assert json.loads(copy.read_text()) == {**MARIAN, "vocab_size": 58104, "decoder_vocab_size": 58104}
    built = variants.build_copy(r, copy, "cpu")
    assert built.model.final_logits_bias.shape == (1, 58104) and built.model.lm_head.out_features == 58104
    assert variants.slice_padded_logits(built, [f]) == ("lm_head",)
    assert built.model.final_logits_bias.shape == (1, 58101)
    assert (built.model.config.vocab_size, built.model.config.decoder_vocab_size) == (58101, 58101)
    assert "final_logits_bias" in dict(built.model.named_buffers())
    args, kwargs = built.inputs if isinstance(built.inputs, tuple) and len(built.inputs) == 2 else ((), built.inputs)
    out = built.model(*args, **kwargs)
    assert out.logits.shape[-1] == 58101 and torch.isfinite(out.loss)


def test_each_compiled_variant_warns_as_in_a_fresh_process() -> None:
    """transformers' once-per-process warnings are forgotten before a variant compiles:
    dynamo breaks the graph at a warning, and each variant must meet it."""
    from transformers.utils import logging as hf_logging

    logger = hf_logging.get_logger("shapelint.test")
    logger.warning_once("a warning dynamo would break the graph at")
    assert hf_logging.warning_once.cache_info().currsize >= 1
    compile_probe.forget_warnings_once()
    assert hf_logging.warning_once.cache_info().currsize == 0


def test_a_config_target_verified_with_exact_numbers(gpt2: Result, folders: dict[str, Path], scratch: Path) -> None:
    before = snapshot(folders["gpt2"])
    timer = Scripted({"before": 10.0, "after": 8.0})
    verified = vs.verify_result(gpt2, vs.RunOptions(device="cpu", schedule=SMALL, timer=timer))
    v = verified.to_json()  # the report's JSON form, a public contract
    assert timer.calls == [("before", 2), ("after", 2)] * 2
    assert v["order"] == ["before", "after", "before", "after"]
    assert (v["measured_ms"], v["measured_ms_after"], v["measured_speedup"]) == (10.0, 8.0, 1.25)
    assert v["noise"] == compare.NOISE_FLOOR and v["confirmed"] is True
    assert v["est_ms"] == round(gpt2.step_time.ms, 4)
    assert v["est_ms_after"] == round(gpt2.step_model.after(gpt2.findings).ms, 4)
    assert v["mode"] == "eager" and v["device"] == "cpu" and v["torch"] == torch.__version__
    assert v["sliced"] == ["lm_head"] and v["own_inputs"] is False and v["not_applied"] == []
    assert (v["blocks"], v["steps_per_block"], v["steps"]) == (2, 2, 4)
    (entry,) = v["findings"]
    assert entry["code"] == "SL501" and entry["measured_speedup"] == 1.25 and entry["confirmed"] is True
    assert v["per_finding"] == "the only finding: all at once"
    assert snapshot(folders["gpt2"]) == before  # nothing written in the user's folder
    assert list(scratch.iterdir()) == []  # and the copies are gone


def test_a_saved_run_is_rescored_by_the_model_as_it_is_now(gpt2: Result, folders: dict[str, Path],
                                                          scratch: Path, tmp_path: Path) -> None:
    """benchmarks/verify_step.py --rescore: a saved record's config linted again gives the
    same estimate, priced against what was measured then."""
    bench = load_benchmark("verify_step", "verify_step_bench")
    verified = vs.verify_result(gpt2, vs.RunOptions(device="cpu", schedule=SMALL, timer=Scripted({"before": 10.0,
                                                                                          "after": 8.0})))
    v = verified.to_json()  # the report's JSON form, a public contract
    record = {"model": "gpt2", "mode": "eager", "batch": 2, "seq": 128, "profile": "h100", "precision": "tf32",
              "config": GPT2, "step_verification": {**v, "est_ms": 99.0}}
    saved = tmp_path / "verify_step_cpu_run.json"
    saved.write_text(json.dumps({"records": [record]}))
    text, (row,) = bench.rescore([str(saved)], None)
    after = gpt2.step_model.after(gpt2.findings).ms
    assert row["est_ms_then"] == 99.0 and row["est_ms_now"] == round(gpt2.step_time.ms, 3)
    assert row["measured_ms"] == 10.0 and row["measured_speedup"] == 1.25
    assert row["est_speedup_now"] == pytest.approx(gpt2.step_time.ms / after)
    assert row["speedup_error_now"] == pytest.approx(gpt2.step_time.ms / after / 1.25 - 1)
    assert row["applied"] == "SL501 5001→5004"
    assert text.endswith(f"steps within 25%: {int(abs(row['error_now']) <= 0.25)} of 1; "
                         f"speedups within 10%: {int(abs(row['speedup_error_now']) <= 0.10)} of 1")


def test_a_suggestion_set_that_does_not_measure_faster_is_not_confirmed(gpt2: Result, scratch: Path) -> None:
    timer = Scripted({"before": [10.0, 10.2], "after": [10.1, 9.9]})
    verified = vs.verify_result(gpt2, vs.RunOptions(device="cpu", schedule=SMALL, timer=timer))
    v = verified.to_json()  # the report's JSON form, a public contract
    assert v["measured_speedup"] == round(10.1 / 10.0, 4)
    assert v["noise"] == pytest.approx((10.2 / 9.9 - 10.0 / 10.1) / 2, abs=1e-4)
    assert v["confirmed"] is False and v["findings"][0]["confirmed"] is False
    assert "not confirmed (below 1.02" in report_lines(verified)[0]


def test_the_step_really_trains_with_the_wall_clock(gpt2: Result, scratch: Path) -> None:
    verified = vs.verify_result(gpt2, vs.RunOptions(device="cpu", schedule=SMALL))
    v = verified.to_json()  # the report's JSON form, a public contract
    assert v["measured_ms"] > 0 and v["measured_ms_after"] > 0 and len(v["block_ms"]["after"]) == 2
    assert v["fused_optimizer"] is not None and v["optimizer"] == "adamw"


def test_compiled_mode_excludes_the_compilation_from_the_timing(folders: dict[str, Path], scratch: Path) -> None:
    r = lint(folders["gpt2"] / "config.json", batch=2, seq=128, compile=True)
    timer = Scripted({"*": 5.0})
    verified = vs.verify_result(r, vs.RunOptions(device="cpu", schedule=SMALL, timer=timer, backend="eager"))
    v = verified.to_json()  # the report's JSON form, a public contract
    assert v["mode"] == "compile" and v["est_ms"] == round(r.step_time.ms, 4)
    assert v["compile_s"]["before"] > 0 and v["compile_s"]["after"] > 0
    # the loss_type warning breaks GPT-2's forward in both variants (the model, then its loss)
    assert v["graphs"]["before"] == v["graphs"]["after"] == 2
    assert len(timer.calls) == 4 and v["measured_ms"] == 5.0  # only timed blocks reach the timer


# -- a model.py ---------------------------------------------------------------------


def test_a_model_py_copy_carries_the_fixed_literals(py: Result, folders: dict[str, Path], scratch: Path) -> None:
    applied, not_applied = variants.plan(py)
    assert [str(f.suggestion) for f, _ in applied] == [
        "out_features: 5001 → 5004", "out_features: 2047 → 2048", "in_features: 2047 → 2048"]
    copy = variants.write_copy(py, variants.merged_texts(py, [f for f, _ in applied]),
                               variants.scratch_root(Path(py.target)))
    text = copy.read_text()
    assert "nn.Embedding(5004, 256)" in text and "nn.Linear(256, 2048)" in text and "nn.Linear(2048, 256)" in text
    assert (folders["py"] / "model.py").read_text() == MODEL
    built = variants.build_copy(py, copy, "cpu")
    assert (built.model.head.out_features, built.model.up.out_features) == (5004, 2048)


def test_a_model_py_verified_all_at_once_and_finding_by_finding(py: Result, folders: dict[str, Path],
                                                                 scratch: Path) -> None:
    before = snapshot(folders["py"])
    timer = Scripted({"before": 10.0, "after": 7.0, "finding 1": 8.0, "finding 2": 9.0, "finding 3": 10.0})
    verified = vs.verify_result(py, vs.RunOptions(device="cpu", schedule=SMALL, timer=timer))
    v = verified.to_json()  # the report's JSON form, a public contract
    # one comparison after another, each alternating with before
    assert [c[0] for c in timer.calls] == (["before", "after"] * 2 + ["before", "finding 1"] * 2
                                           + ["before", "finding 2"] * 2 + ["before", "finding 3"] * 2)
    assert v["measured_speedup"] == round(10 / 7, 4) and v["confirmed"] is True
    assert [e["measured_speedup"] for e in v["findings"]] == [1.25, round(10 / 9, 4), 1.0]
    assert [e["confirmed"] for e in v["findings"]] == [True, True, False]
    assert v["per_finding"] == "measured" and v["sliced"] == ["head"]
    lines = report_lines(verified)
    assert lines[0].startswith("step verified on cpu (eager): est. ") and "(1.43×): confirmed" in lines[0]
    assert any("SL101 in_features: 2047 → 2048" in line and "not confirmed" in line for line in lines)
    assert snapshot(folders["py"]) == before and list(scratch.iterdir()) == []


def test_a_finding_that_cannot_be_applied_is_listed_with_the_reason(folders: dict[str, Path], scratch: Path) -> None:
    r = lint(folders["computed"] / "model.py")
    timer = Scripted({"before": 10.0, "after": 9.0})
    verified = vs.verify_result(r, vs.RunOptions(device="cpu", schedule=SMALL, timer=timer))
    v = verified.to_json()  # the report's JSON form, a public contract
    (reason,) = [n for n in v["not_applied"] if n["code"] == "SL501"]
    assert "computed, not a literal" in reason["reason"]
    assert [e["code"] for e in v["findings"]] == ["SL101", "SL101"]  # the others still apply
    assert v["est_ms_after"] == round(r.step_model.after([f for f in r.findings if f.code == "SL101"]).ms, 4)
    assert any(line.startswith("  not applied: SL501 out_features: 5001 → 5004: ") for line in report_lines(verified))


def test_without_an_applicable_suggestion_the_step_is_timed_alone(folders: dict[str, Path], tmp_path: Path,
                                                                 scratch: Path) -> None:
    clean = tmp_path / "clean.py"
    clean.write_text(MODEL.replace("5001", "5008").replace("2047", "2048"))
    r = lint(clean)
    assert r.findings == []
    timer = Scripted({"before": [4.0, 6.0]})
    verified = vs.verify_result(r, vs.RunOptions(device="cpu", schedule=SMALL, timer=timer))
    v = verified.to_json()  # the report's JSON form, a public contract
    assert timer.calls == [("before", 2)] * 2
    assert (v["measured_ms"], v["measured_ms_after"], v["confirmed"]) == (5.0, None, None)
    assert "no suggestion applied" in report_lines(verified)[0]


# -- the command line ------------------------------------------------------------------


def test_step_without_verify_is_a_one_line_error(folders: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    from shapelint.app import cli

    assert cli.main([str(folders["py"] / "model.py"), "--step", "--no-isolate"]) == 2
    err = capsys.readouterr().err
    assert err == "shapelint: error: --step needs --verify (--verify --step times whole training steps on a CUDA GPU)\n"


def test_verify_step_without_cuda_is_the_verify_error(folders: dict[str, Path], capsys: pytest.CaptureFixture,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from shapelint.app import cli

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main([str(folders["py"] / "model.py"), "--verify", "--step", "--no-isolate", "--dtype", "tf32"]) == 2
    out, err = capsys.readouterr()
    assert err == "shapelint: error: --verify needs a CUDA GPU (torch.cuda.is_available() is False)\n"


def test_a_target_that_cannot_be_verified_is_one_error_line_and_the_others_go_on(py: Result, gpt2: Result,
                                                                                 scratch: Path) -> None:
    from dataclasses import replace

    sharded = replace(py, tp=2)
    out, failed = vs.verify_results([sharded, gpt2], vs.RunOptions(device="cpu", schedule=SMALL,
                                                                timer=Scripted({"*": 1.0})))
    assert failed == [(py.target, f"{py.target}: --verify --step trains the whole model on one GPU; the lint's "
                                  "shapes are one of 2 tensor-parallel shards")]
    assert out[0].step_verification is None and out[1].step_verification.status == "measured"


def measured_step(mode: str, est: tuple[float, float, float], ms: tuple[float, float], speedup: float,
                  threshold: float, confirmed: bool, est_error: float | None = None,
                  graphs: tuple[int | None, int | None] = (None, None)) -> StepVerification:
    """A step verification as a GPU run reports one: *before* against *after*, ``est``
    the estimated ms before and after and the speedup, ``ms`` the measured medians."""
    return StepVerification(
        device="NVIDIA H100 80GB HBM3", torch="2.11.0+cu130", mode=mode, profile="h100", precision="bf16",
        training=True, optimizer="adamw", fused_optimizer=True, est_ms=est[0], est_ms_after=est[1],
        est_speedup=est[2], blocks=5, steps_per_block=10, warmup=3, probed_graphs=None,
        before=VariantRun((ms[0],) * 5, graphs=graphs[0]), steps=50, order=("before", "after") * 5,
        est_error=est_error, findings=(), per_finding="the only finding: all at once", not_applied=(),
        after=VariantRun((ms[1],) * 5, graphs=graphs[1]),
        comparison=StepComparison(ms[0], ms[1], round(ms[0] - ms[1], 4), speedup, threshold - 1, threshold, confirmed))


def test_the_reports_carry_the_step_verification(gpt2: Result) -> None:
    import io
    from dataclasses import replace

    from shapelint.report import json_report, text

    measured = measured_step("eager", (63.4, 51.9, 1.2216), (67.7, 56.6), 1.1961, 1.01, True, est_error=-0.0635)
    v = measured.to_json()
    r = replace(gpt2, step_verification=measured)
    assert json_report.document([r])["targets"][0]["step_verification"] == v
    assert json_report.document([r])["summary"]["step_verification"] == v
    assert "step_verification" not in json_report.document([gpt2])["summary"]
    out = io.StringIO()
    text.render([r], out, color=False)
    assert ("  step verified on NVIDIA H100 80GB HBM3 (eager): est. 63.4 → 51.9 ms (1.22×), measured 67.7 → 56.6 ms "
            "(1.20×): confirmed\n") in out.getvalue()


def test_the_text_says_how_many_graphs_the_first_model_compiled_to() -> None:
    from dataclasses import replace

    # measured: Marian compiled to 8 graphs; the padded copy reused 7 of them (H100, torch 2.11)
    v = measured_step("compile", (44.1, 44.1, 1.0), (62.6, 62.6), 1.0, 1.105, False, graphs=(8, 1))
    lines = report_lines(v)
    assert lines[1:] == ["  torch.compile broke the forward into 8 graphs (shapelint did not probe this model's "
                         "graphs: priced as one graph)"]
    # with the probe's counts (transformers 5.17: 18 + 13 graph calls a step, 63 ops between them)
    probed = GraphBreaks(forward_graphs=18, backward_graphs=13, eager_ops=63, backward_eager_ops=20,
                         reasons=("Data-dependent branching",))
    assert report_lines(replace(v, probed_graphs=probed))[1:] == [
        "  torch.compile broke the forward into 8 graphs (the estimate prices the 18 + 13 graph calls a step "
        "makes and 63 eager ops, as shapelint's probe found them)"]
    assert report_lines(replace(v, before=replace(v.before, graphs=1), after=replace(v.after, graphs=1)))[1:] == []


# -- on a GPU -------------------------------------------------------------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.cuda
@cuda
def test_verify_step_on_a_gpu(gpt2: Result, scratch: Path) -> None:
    verified = vs.verify_result(gpt2, vs.RunOptions(device="cuda", schedule=SMALL))
    v = verified.to_json()  # the report's JSON form, a public contract
    assert v["device"] == torch.cuda.get_device_name() and v["fused_optimizer"] is True
    assert v["measured_ms"] > 0 and v["measured_ms_after"] > 0
