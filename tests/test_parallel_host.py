"""The parallel engines' host work (``host_us``): one term per piece of work, each
counted from the plan, so a step's host time is the formula of docs/multi-gpu.md."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from shapelint.hardware import resolve
from shapelint.hardware.collectives import HostCosts
from shapelint.model.parallel import Layout, ParallelChange, ParallelPlan, ParamGroup, TensorParallelLayer
from shapelint.pipeline.result import Options
from shapelint.pipeline.run import lint_target
from shapelint.price.communication import applied, communication
from shapelint.price.step import StepTime

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20
ONE = StepTime(ms=50.0, gpu_ms=30.0, host_ms=50.0, gemm_ms=20.0, kernels=500, mode="eager")


def _host() -> HostCosts:
    c = resolve("h100").collectives
    assert c is not None
    return c.host


def test_the_shipped_costs_are_the_fitted_ones() -> None:
    """One place: h100-sxm.yaml (h200 reads its collectives), fitted by host_fit_parallel.py."""
    assert _host() == HostCosts(ddp_tensor=38, fsdp_group=2340, fsdp_tensor=165, tp_layer=280, tp_parameter=400,
                                tp_collective=1110)
    assert resolve("h200").collectives == resolve("h100").collectives


def test_ddp_host_is_per_trained_tensor() -> None:
    plan = ParallelPlan(Layout(dp=2), grads=(4 * MIB,) * 100 + (100,) * 48)  # 148 tensors, as GPT-2 small
    comm = communication(plan, ONE, resolve("h100"))
    assert comm.host_ms == pytest.approx(148 * 38e-3)  # 5.6 ms
    assert comm.host_ms == pytest.approx(148 * _host().ddp_tensor * 1e-3)


def test_fsdp_host_is_per_group_and_per_tensor() -> None:
    groups = (ParamGroup("<root>", 150 * MIB, 4), *(ParamGroup(f"h.{i}", 27 * MIB, 12) for i in range(12)))
    plan = ParallelPlan(Layout(fsdp=2), groups=groups)
    comm = communication(plan, ONE, resolve("h100"))
    assert comm.host_ms == pytest.approx(13 * 2.34 + 148 * 0.165)  # 54.8 ms: GPT-2 small's 13 groups, 148 tensors
    merged = communication(applied(plan, [ParallelChange(fsdp_blocks_per_group=4)]), ONE, resolve("h100"))
    assert comm.host_ms - merged.host_ms == pytest.approx(9 * 2.34)  # the tensors stay; 9 groups fewer


def _tp_plan(blocks: int, layers: int, tensors: int) -> ParallelPlan:
    """``blocks`` blocks of ``layers`` sharded layers holding ``tensors`` parameters, two row-parallel."""
    styles = tuple((f"l.{b}.{i}", "row" if i >= layers - 2 else "column") for b in range(blocks) for i in range(layers))
    per = [tensors // layers + (1 if i < tensors % layers else 0) for i in range(layers)]
    return ParallelPlan(Layout(tp=2), tp_layers=tuple(TensorParallelLayer(m, 1 << 20, 2 << 20)
                                                      for m, s in styles if s == "row"),
                        tp_sharded=len(styles), tp_styles=styles,
                        tp_tensors=tuple((m, per[i % layers]) for i, (m, _) in enumerate(styles)))


def test_tensor_parallel_host_is_per_layer_per_parameter_and_per_collective() -> None:
    hw = resolve("h100")
    # Pythia-410m's block: fused query_key_value, dense, h_to_4h, 4h_to_h, each with a bias
    pythia = communication(_tp_plan(24, 4, 8), ONE, hw)
    assert pythia.host_ms == pytest.approx(24 * (4 * 0.28 + 8 * 0.4 + 4 * 1.11))  # 190.3 ms
    # Llama's block: q, k, v, o, gate, up, down without biases
    llama = communication(_tp_plan(24, 7, 7), ONE, hw)
    assert llama.host_ms == pytest.approx(24 * (7 * 0.28 + 7 * 0.4 + 4 * 1.11))  # 220.8 ms
    # BERT's and OPT's: q, k, v, o, up, down with biases
    bert = communication(_tp_plan(24, 6, 12), ONE, hw)
    assert bert.host_ms == pytest.approx(24 * (6 * 0.28 + 12 * 0.4 + 4 * 1.11))  # 262.1 ms
    assert pythia.host_ms < llama.host_ms < bert.host_ms


def test_the_plan_counts_each_sharded_layers_weight_and_bias(tmp_path: Path) -> None:
    """What the lint reads off a model: OPT's q/k/v/out/fc1/fc2 each with a bias, and the
    LM head (the tied embedding) sharded by vocabulary."""
    pytest.importorskip("transformers")
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "opt", "architectures": ["OPTForCausalLM"], "hidden_size": 64,
                                "ffn_dim": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
                                "word_embed_proj_dim": 64, "vocab_size": 512, "max_position_embeddings": 64,
                                "do_layer_norm_before": True}))
    r = lint_target(path, Options(batch=1, seq=32, tp=2), None, [])
    plan = r.parallel
    assert plan is not None
    assert plan.tp_sharded == 2 * 6 + 1
    assert plan.tp_parameters == 2 * 12 + 1
    assert dict(plan.tp_tensors)["lm_head"] == 1
    assert r.step_time is not None and r.step_time.communication is not None
    host = _host()
    calls = 2 * 2 * 2 + 1  # two row-parallel layers a block, each way; the LM head's input gradient
    assert r.step_time.communication.host_ms == pytest.approx(
        (13 * host.tp_layer + 25 * host.tp_parameter + calls * host.tp_collective) * 1e-3)


@pytest.mark.slow
def test_the_fit_prices_the_held_out_steps_on_their_calibrated_profile_within_15_percent() -> None:
    """Held-out set 1, run 2 (2xH200, full calibrate): 8 of 9 within 15% (BERT-large's TP
    step is +15%: it measured 3.83x its one-GPU step there and 4.84x on the first host),
    every parallel/one-GPU ratio within 10%."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import multi_gpu_estimate
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    import json

    data = ROOT / "docs" / "data"
    steps = json.loads((data / "multi_gpu_heldout_bench_2xh200_2026-11-26_run2.json").read_text())["steps"]
    rows = multi_gpu_estimate.compare(steps, "h200", multi_gpu_estimate.heldout_pairs("1"),
                                      str(data / "calibrated_2xh200_2026-11-26_run2.yaml"))
    assert len(rows) == 9
    assert sum(r["within_tolerance"] for r in rows) >= 8
    assert all(abs(r["ms_error"]) < 0.16 for r in rows)
    assert all(abs(r["ratio_error"]) < 0.10 for r in rows), [(r["model"], r["layout"], r["ratio_error"]) for r in rows]


def test_the_fit_recovers_the_costs_that_made_the_steps() -> None:
    """host_fit_parallel.fit on steps made from known costs (two hosts, one 20% slower,
    some steps GPU-bound) gives those costs back."""
    from tests._benchmarks import load_benchmark

    fitting = load_benchmark("host_fit_parallel")
    truth = {"ddp_tensor": 0.04, "fsdp_group": 2.0, "fsdp_tensor": 0.15}
    points = []
    for i, (tensors, groups) in enumerate([(148, 13), (196, 13), (146, 17), (290, 25), (394, 25), (100, 40)]):
        for layout, counts in (("ddp", {"ddp_tensor": tensors}),
                               ("fsdp", {"fsdp_group": groups, "fsdp_tensor": tensors})):
            counts = {**dict.fromkeys(truth, 0.0), **counts}
            speed = 1.2 if i % 2 else 1.0
            p = fitting.Point("run", f"m{i}", layout, 0.0, 50.0, 30.0 + 40 * (i == 0), 40.0 + i, counts, 1.0,
                              50.0, True, speed)
            p.measured_ms = p.est(truth, speed)
            points.append(p)
    costs = fitting.fit(points, tuple(truth), iters=6000)
    assert costs == pytest.approx({k: v * 1e3 for k, v in truth.items()}, rel=0.02)


def test_rescale_writes_the_shipped_costs_at_the_calibrated_host_speed(tmp_path: Path) -> None:
    """A full calibrate at host speed 0.836 (host_us_per_kernel 28.42 against 34):
    every engine cost is the shipped one x 0.836; the rest of the file is unchanged."""
    from shapelint.hardware import load_profile_file
    from tests._benchmarks import load_benchmark

    fitting = load_benchmark("host_fit_parallel")
    source = ROOT / "docs" / "data" / "calibrated_2xh200_2026-11-26_run2.yaml"
    path = tmp_path / "p.yaml"
    text = source.read_text()
    start = text.index("  host_us:\n")
    old = text[:start] + "  host_us:\n    ddp_tensor: 62.7\n    fsdp_group: 3678.4\n    fsdp_tensor: 25.1\n" \
        "    tp_layer: 250.8\n    tp_collective: 2173.6\n" + text[text.index("misaligned_efficiency:"):]
    path.write_text(old)
    fitting.rescale(path)
    c = load_profile_file(str(path)).collectives
    assert c is not None
    shipped = _host()
    for key in ("ddp_tensor", "fsdp_group", "fsdp_tensor", "tp_layer", "tp_parameter", "tp_collective"):
        assert getattr(c.host, key) == pytest.approx(getattr(shipped, key) * 28.42 / 34.0, abs=0.06)
    assert path.read_text().replace(path.read_text()[start:path.read_text().index("misaligned_efficiency:")], "") == \
        old.replace(old[start:old.index("misaligned_efficiency:")], "")


def test_a_profile_calibrated_before_the_present_host_terms_loads_at_its_host_speed() -> None:
    """A profile ``shapelint calibrate`` wrote with the engines' earlier five host terms
    (held-out set 2's 2xH200 host, 2026-11-26: host_us_per_kernel 19.45 against the
    typical 34.0) loads with the shipped terms at that host's speed, tables kept."""
    from pathlib import Path

    from shapelint.hardware import load_profile_file, resolve

    path = Path(__file__).parent.parent / "docs" / "data" / "calibrated_2xh200_2026-11-26_set2.yaml"
    hw = load_profile_file(str(path))
    shipped = resolve("h100").collectives
    assert hw.collectives is not None and shipped is not None
    speed = 19.45 / 34.0
    assert hw.collectives.host.tp_parameter == round(shipped.host.tp_parameter * speed, 1) == 228.8
    assert hw.collectives.host.fsdp_group == round(shipped.host.fsdp_group * speed, 1)
    assert tuple(dict(hw.collectives.tables)["all_reduce"][-1]) == (1 << 30, 3291.33)  # the measured table, kept
