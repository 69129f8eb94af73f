"""``--verify --step`` on a parallel layout measures SL602's and SL603's change: the
after-step shards the attention with the suggested head count, or wraps k blocks to a
``fully_shard`` group (shapelint.measure.parallel_change, parallel_wrap). The slow tests
run two gloo ranks on the CPU under torchrun."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from shapelint.measure.parallel_change import describe, layout_change, unmeasured, with_head_keys, wraps_only
from shapelint.model.locations import ConfigLocation
from shapelint.model.parallel import HeadsChange, Layout, ParallelChange, ParallelPlan
from shapelint.model.records import Finding, Suggestion

HERE = Path(__file__).resolve().parent
ATTN = (("a.q_proj", "column"), ("a.k_proj", "column"), ("a.v_proj", "column"), ("a.o_proj", "row"))


def _finding(code: str, parallel: ParallelChange, key: str | None = None) -> Finding:
    return Finding(code, code.lower(), "warning", "a", "", (), 2.0, 1.0, Suggestion("num_attention_heads", 25, 20),
                   parallel=parallel, location=ConfigLocation(key=key) if key else None)


def _heads(heads: int, kv: int, d: int, to: int, to_kv: int, to_d: int) -> ParallelChange:
    """SL602's change as the rule states it (typed: no fact is read by its key)."""
    return ParallelChange((), ATTN, heads=HeadsChange(heads, kv, d, to, to_kv, to_d))


class _R:
    """What parallel_change reads of a Result: its plan."""

    def __init__(self, **layout: int) -> None:
        self.parallel = ParallelPlan(Layout(**layout))


def test_the_changes_of_several_findings_are_one_layout_change() -> None:
    heads = _finding("SL602", ParallelChange((("a.o_proj", 1024),), ATTN))
    groups = _finding("SL603", ParallelChange(fsdp_blocks_per_group=4))
    size = _finding("SL101", ParallelChange())
    assert layout_change([size]) is None  # nothing to relayout: the after-step keeps the lint's wrapper
    both = layout_change([heads, size, groups])
    assert both is not None and both.fsdp_blocks_per_group == 4 and dict(both.tp_styles) == dict(ATTN)
    assert describe(both) == ("4 blocks per fully_shard group; 4 more layers sharded (a.q_proj column, a.k_proj "
                              "column, a.v_proj column, a.o_proj row)")


def test_only_an_fsdp_grouping_applies_without_an_edit() -> None:
    groups = _finding("SL603", ParallelChange(fsdp_blocks_per_group=4))
    heads = _finding("SL602", ParallelChange((), ATTN))
    assert wraps_only(_R(fsdp=2), groups)  # type: ignore[arg-type]
    assert not wraps_only(_R(tp=2), groups)  # type: ignore[arg-type]  # not an FSDP layout
    assert not wraps_only(_R(tp=2), heads)  # type: ignore[arg-type]  # its head count is an edit


def test_replicated_key_value_heads_are_not_measured() -> None:
    # 14 heads over 2 key/value heads at --tp 4 -> 16 over 2: each kv head on 2 GPUs, which colwise cannot shard
    gqa = _finding("SL602", _heads(14, 2, 64, 16, 2, 56))
    assert "2 key/value heads at --tp 4 are replicated" in unmeasured(_R(tp=4), gqa)  # type: ignore[arg-type]
    mha = _finding("SL602", _heads(25, 25, 64, 20, 20, 80))
    assert unmeasured(_R(tp=2), mha) == ""  # type: ignore[arg-type]


def test_a_config_stating_head_dim_and_kv_heads_is_edited_with_the_head_count(tmp_path: Path) -> None:
    # --fix edits num_attention_heads only; the after model must be built with the head the finding prices
    config = tmp_path / "config.json"
    edited = {"hidden_size": 1600, "num_attention_heads": 20, "num_key_value_heads": 25, "head_dim": 64,
              "text_config": {"num_attention_heads": 20, "head_dim": 64}, "other": {"head_dim": 64}}
    f = _finding("SL602", _heads(25, 25, 64, 20, 20, 80), key="num_attention_heads")
    out = json.loads(with_head_keys([f], {config: json.dumps(edited)})[config])
    assert (out["num_attention_heads"], out["num_key_value_heads"], out["head_dim"]) == (20, 20, 80)
    assert out["text_config"]["head_dim"] == 80  # a sub-config setting the same heads
    assert out["other"] == {"head_dim": 64}  # a section without the heads is not touched
    gqa = _finding("SL602", _heads(28, 4, 64, 32, 4, 56), key="num_attention_heads")
    kept = json.loads(with_head_keys([gqa], {config: json.dumps({"num_attention_heads": 32,
                                                                   "num_key_value_heads": 4})})[config])
    assert kept == {"num_attention_heads": 32, "num_key_value_heads": 4}  # nothing states head_dim: as --fix left it
    plain = {config: '{"num_attention_heads": 20}'}
    assert with_head_keys([f], plain) == plain  # untouched text, byte for byte


# -- under torchrun, two gloo ranks --------------------------------------------------------


def _lint(target: Path, **options: int):  # type: ignore[no-untyped-def]
    from shapelint import hardware
    from shapelint.check.run import load_rules
    from shapelint.pipeline import run as pipeline
    from shapelint.pipeline.result import Options
    from shapelint.price import Policy

    opts = Options(policy=Policy(min_speedup=1.0, min_loss=0.0, min_step_share=0.0), **options)
    return pipeline.lint_target(target, opts, hardware.resolve("h100"), load_rules(()))


@pytest.fixture(scope="module")
def fsdp_small_groups(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """GPT-2 of 4 blocks of 128 under FSDP 2: SL603 groups all 4 blocks (blocks of 0.8 MiB
    against a 4 MiB root group)."""
    import transformers

    folder = tmp_path_factory.mktemp("gpt2")
    transformers.GPT2Config(n_layer=4, n_embd=128, n_head=4, vocab_size=8192, n_positions=256,
                            bos_token_id=0, eos_token_id=0).save_pretrained(folder)
    r = _lint(folder / "config.json", fsdp=2, batch=1, seq=128)
    assert [(f.code, f.suggestion and f.suggestion.to) for f in r.findings] == [("SL603", 4)]
    return r


@pytest.fixture(scope="module")
def heads_not_divisible(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """OPT with GPT-2 XL's width (1600 = 25 heads of 64), one layer, at TP 2: linted at
    64 × 1024 tokens, where sharding 20 heads of 80 pays, and measured at 1 × 16 (the CPU)."""
    import transformers

    folder = tmp_path_factory.mktemp("opt")
    transformers.OPTConfig(hidden_size=1600, ffn_dim=64, num_hidden_layers=1, num_attention_heads=25,
                           word_embed_proj_dim=1600, vocab_size=512, max_position_embeddings=2048).save_pretrained(folder)
    r = _lint(folder / "config.json", tp=2, batch=64, seq=1024)
    assert [(f.code, str(f.suggestion)) for f in r.findings] == [("SL602", "num_attention_heads: 25 → 20")]
    assert r.options is not None
    return replace(r, options=replace(r.options, batch=1, seq=16))


@pytest.fixture(scope="module")
def grouped_and_padded(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """GPT-2 small's case at FSDP 2, 4 blocks of 128: SL603 (a layout change, no edit) and
    SL501 (its vocabulary, 50257: a size edit) both apply."""
    import transformers

    folder = tmp_path_factory.mktemp("gpt2-vocab")
    transformers.GPT2Config(n_layer=4, n_embd=128, n_head=4, vocab_size=50257, n_positions=256, bos_token_id=0,
                            eos_token_id=0).save_pretrained(folder)
    r = _lint(folder / "config.json", fsdp=2, batch=1, seq=128)
    assert sorted((f.code, str(f.suggestion)) for f in r.findings) == [
        ("SL501", "vocab_size: 50257 → 50264"), ("SL603", "blocks per fully_shard group: 1 → 4")]
    return r


class _Built(Exception):
    """The variant passed the check that its edit reached the model: its trainer is being made."""


def _after_variant(r, codes: set[str], root: Path, monkeypatch: pytest.MonkeyPatch, lose_edits: bool) -> str:  # type: ignore[no-untyped-def]
    """What building the *after* variant of ``r``'s findings ``codes`` under a layout's
    wrapper comes to: 'built', or the error; ``lose_edits``: the edits never reach the copy."""
    from types import SimpleNamespace

    from shapelint.errors import ShapelintError
    from shapelint.measure import step
    from shapelint.measure.step_variants import build_original

    if lose_edits:
        monkeypatch.setattr(step, "merged_texts", lambda _r, _findings: {})

    def make(*_args: object, **_kw: object) -> None:
        raise _Built

    findings = tuple(f for f in r.findings if f.code in codes)
    built = build_original(r, "cpu")
    before = SimpleNamespace(built=built, inputs=built.inputs)
    opts = step.RunOptions(device="cpu", wrap=lambda m: m, wrap_for=lambda _findings: lambda m: m)
    try:
        step._measure_change(r, "after", findings, before, root, opts, make, False, step.block_timer("cpu"))
    except _Built:
        return "built"
    except ShapelintError as exc:
        return str(exc)
    raise AssertionError("the variant was neither built nor refused")


def test_a_size_edit_beside_a_layout_change_must_reach_the_model(grouped_and_padded, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The edited copy of a layout change is told apart by its layout, not its shapes; the
    size edit beside it (SL501's vocabulary) must still change the shapes, as on one GPU."""
    r = grouped_and_padded
    assert _after_variant(r, {"SL603", "SL501"}, tmp_path, monkeypatch, lose_edits=False) == "built"
    assert _after_variant(r, {"SL603"}, tmp_path, monkeypatch, lose_edits=True) == "built"  # nothing to edit
    lost = _after_variant(r, {"SL603", "SL501"}, tmp_path, monkeypatch, lose_edits=True)
    assert lost.endswith("cannot apply the suggestions: the edited copy builds the same parameter and input "
                         "shapes: the size edit did not reach the model")


def _probe(r, tmp_path: Path) -> dict:  # type: ignore[no-untyped-def]
    from shapelint.pipeline.result import result_to_data

    given, got = tmp_path / "result.json", tmp_path / "probe.json"
    given.write_text(json.dumps(result_to_data(r)))
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                    str(HERE / "_parallel_after_probe.py"), str(given), str(got)], check=True, timeout=600)
    data: dict = json.loads(got.read_text())
    return data


@pytest.mark.slow
def test_the_after_step_wraps_four_blocks_in_one_fully_shard_group(fsdp_small_groups, tmp_path: Path) -> None:
    got = _probe(fsdp_small_groups, tmp_path)
    assert got["applied"] == ["SL603"]
    blocks = [f"transformer.h.{i}" for i in range(4)]
    assert got["before"]["fsdp_groups"] == [[""], *([b] for b in blocks)]  # the root and one group per block
    assert got["after"]["fsdp_groups"] == [[""], blocks]  # fully_shard(blocks[0:4]): one group of 4, and the root
    assert got["before"]["weights"] == {} == got["after"]["weights"]  # GPT-2's attention is one Conv1D: no q_proj


@pytest.mark.slow
def test_the_after_step_shards_the_attention_with_20_heads(heads_not_divisible, tmp_path: Path) -> None:
    got = _probe(heads_not_divisible, tmp_path)
    q, o = "model.decoder.layers.0.self_attn.q_proj", "model.decoder.layers.0.self_attn.out_proj"
    before, after = got["before"]["weights"], got["after"]["weights"]
    assert not before[q]["dtensor"] and before[q]["local"] == [1600, 1600]  # whole on every rank
    assert after[q] == {"dtensor": True, "shape": [1600, 1600], "local": [800, 1600], "placements": ["S(0)"]}
    assert after[o]["local"] == [1600, 800] and after[o]["placements"] == ["S(1)"]
    assert got["before"]["heads"]["model.decoder.layers.0.self_attn"] == 25
    assert got["after"]["heads"]["model.decoder.layers.0.self_attn"] == 20
    # before: fc2's forward all-reduce, fc1's and the LM head's input gradients in the backward, the head's
    # logits gathered; after: one more all-reduce each way for the block, as the estimate prices the change
    # (the attention's input replicated once, Megatron's f: q, k and v apart would all-reduce 3 in the backward)
    assert got["before"]["collectives"] == {"all_reduce": 3, "all_gather_into_tensor": 1}
    assert got["after"]["collectives"] == {"all_reduce": 5, "all_gather_into_tensor": 1}


@pytest.mark.slow
@pytest.mark.parametrize("case", ["fsdp_small_groups", "heads_not_divisible"])
def test_verify_step_measures_the_finding_on_its_changed_layout(case: str, request: pytest.FixtureRequest) -> None:
    from shapelint.measure.parallel_step import verify_parallel
    from shapelint.measure.step_blocks import Schedule

    r = request.getfixturevalue(case)
    v = verify_parallel(r, Schedule(2, 2, 1), device="cpu")
    data = v.to_json()
    assert data["status"] == "measured" and data["order"] == ["before", "after"] * 2
    assert data["not_applied"] == []
    (f,) = data["findings"]
    assert f["code"] == r.findings[0].code and f["measured"] is True
    assert f["measured_speedup"] == pytest.approx(f["measured_ms"] / f["measured_ms_after"], rel=1e-3)
    assert f["est_step_ms_saved"] == pytest.approx(r.findings[0].step_ms_saved, abs=1e-3)


@pytest.mark.slow
def test_each_finding_of_a_parallel_layout_is_measured_alone(grouped_and_padded) -> None:  # type: ignore[no-untyped-def]
    """GPT-2 small's case at FSDP 2: SL603 and SL501 (its vocabulary, 50257) both apply; the
    after-step has both, and each is measured alone on the same ranks, SL603's variant
    grouped, SL501's padded and wrapped as the lint found it."""
    from shapelint.measure.parallel_step import verify_parallel
    from shapelint.measure.step_blocks import Schedule

    data = verify_parallel(grouped_and_padded, Schedule(2, 2, 1), device="cpu").to_json()
    assert data["per_finding"] == "measured"
    assert sorted(f["code"] for f in data["findings"] if f["measured"]) == ["SL501", "SL603"]
    assert data["est_ms_after"] < min(data["est_ms"] - f["est_step_ms_saved"] for f in data["findings"]) + 1e-3


@pytest.mark.slow
def test_fsdp_wraps_the_blocks_the_estimate_priced_in_every_stack(tmp_path: Path) -> None:
    """T5's encoder and decoder blocks are each a group of the lint's plan; the measured
    layout wrapped only the longest stack (the decoder's went into the root group). Before:
    one group per block of both stacks; after SL603's 7 blocks a group: one group of all 7,
    counted across the stacks as the pricer merges them."""
    import transformers

    transformers.T5Config(num_layers=4, num_decoder_layers=3, d_model=64, d_ff=128, num_heads=4, d_kv=16,
                          vocab_size=8192).save_pretrained(tmp_path)
    r = _lint(tmp_path / "config.json", fsdp=2, batch=1, seq=64)
    assert [(f.code, f.suggestion and f.suggestion.to) for f in r.findings] == [("SL603", 7)]
    got = _probe(r, tmp_path)
    encoder, decoder = [f"encoder.block.{i}" for i in range(4)], [f"decoder.block.{i}" for i in range(3)]
    assert got["before"]["fsdp_groups"] == sorted([[""], *([b] for b in encoder + decoder)])
    assert got["after"]["fsdp_groups"] == [[""], encoder + decoder]
