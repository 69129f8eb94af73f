"""--verify's logic on the CPU: layouts it rebuilds, the statistics, confirmation,
with a fake clock (the CUDA timing itself is exercised by benchmarks on a GPU)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from shapelint.check.rule_api import RuleContext
from shapelint.check.run import builtin_rules, run_rules
from shapelint.hardware import resolve
from shapelint.measure.kernels import materialize
from shapelint.measure.timer import Timing
from shapelint.measure.verify import check_finding, confirmed, verify
from shapelint.pipeline.run import trace, vocab_sizes
from shapelint.price import price


def lm_head_findings(batch: int = 8, seq: int = 1024):
    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(50257, 768)
            self.lm_head = nn.Linear(768, 50257, bias=False)

        def forward(self, idx):
            return self.lm_head(self.wte(idx))

    cap, model = trace(lambda: (LM(), torch.randint(0, 50257, (batch, seq))))
    hw = resolve("h200")
    ctx = RuleContext(vocab_sizes=vocab_sizes(model))
    return cap.gemms, [f for f in price(run_rules(builtin_rules(), cap.gemms, hw, ctx), cap.gemms, hw)
                       if f.code == "SL501"], hw


class FakeClock:
    """Each kernel 'takes' what its fake runner returns, with ±2% noise."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, fn):
        ms = fn()
        self.calls += 1
        return [ms * (1 + 0.01 * ((i % 5) - 2)) for i in range(21)]


def fake_runner(hw, slow_misaligned: float):
    from shapelint.physics.alignment import gemm_alignment
    from shapelint.price.gemm import gemm_time

    def runner(g):
        ms = gemm_time(g, hw).seconds * 1e3
        if gemm_alignment(g, hw) < hw.alignment_bytes:
            ms *= slow_misaligned
        return lambda: ms

    return runner


def test_timing_statistics() -> None:
    t = Timing((1.0, 2.0, 3.0, 4.0, 100.0))
    assert t.median == 3.0
    assert t.spread == pytest.approx((52.0 - 1.5) / 3.0)


def test_measured_speedup_and_confirmation_with_a_fake_clock() -> None:
    gemms, (f,), hw = lm_head_findings()
    clock = FakeClock()
    c = check_finding(f, gemms, hw, clock, fake_runner(hw, 1.0))
    assert c is not None and clock.calls == 6  # 3 GEMMs before, 3 after
    assert c.measured_speedup == pytest.approx(f.est_speedup, rel=1e-6)
    (checked,) = verify([f], gemms, hw, threshold=1.05, timer=FakeClock(), runner=fake_runner(hw, 1.0))
    assert checked.measured_speedup == pytest.approx(f.est_speedup, rel=1e-6)
    v = checked.verification.to_json()  # the report's JSON form, a public contract
    assert v["status"] == "confirmed" and len(v["gemms"]) == 3
    assert all(0 < g["after_peak_fraction"] <= 1.0 for g in v["gemms"])
    assert confirmed(checked)


def test_a_finding_measured_below_threshold_is_not_confirmed() -> None:
    gemms, (f,), hw = lm_head_findings()
    # a GPU where misalignment costs nothing extra: padding only adds work
    (checked,) = verify([f], gemms, hw, threshold=1.05, timer=FakeClock(),
                        runner=fake_runner(hw, 1.0 / f.est_speedup))
    assert checked.measured_speedup < 1.05
    assert checked.verification.status == "not confirmed"
    assert not confirmed(checked)


def test_materialize_reproduces_recorded_layouts() -> None:
    # 64 tokens: the layouts are those of 8192 (the token count is never a leading
    # dimension), without filling dyᵀ's 50257 x 8192 floats (1.6 GB, 6 s of randn)
    gemms, (f,), _ = lm_head_findings(batch=2, seq=32)
    dw = next(g for g in gemms if g.phase == "grad_weight")
    a = materialize(dw.a, 1, False, torch.float32, "cpu")
    assert a.shape == (50257, 64) and a.stride() == (1, 50257)  # dyᵀ: column-major, ld = vocab
    fwd = next(g for g in gemms if g.phase == "forward")
    b = materialize(fwd.b, 1, False, torch.float32, "cpu")
    assert b.shape == (768, 50257) and b.stride() == (1, 768)
    assert torch.count_nonzero(b) > 0  # random data, never zeros


def test_sdpa_kernels_are_timed_once_per_kernel() -> None:
    from shapelint.measure.kernels import kernel_key

    class Attn(nn.Module):
        def forward(self, q, k, v):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    q = lambda: torch.randn(2, 4, 64, 100, requires_grad=True)
    cap, _ = trace(lambda: (Attn(), (q(), q(), q())))
    keys = {kernel_key(g) for g in cap.gemms}
    assert len([k for k in keys if k is not None]) == 2  # the forward and the backward kernel
    assert all(dict(g.extra)["is_causal"] for g in cap.gemms)


def test_a_fusion_is_timed_as_a_whole_block() -> None:
    """Hand-written attention: the block runner's before/after replace per-GEMM timing."""
    from shapelint.rules import sl302_materialized_attention as sl302

    ex = sl302.BAD[1]
    cap, model = trace(lambda: (eval(ex.model, {"torch": torch, "nn": nn, "_rule": sl302}),
                                eval(ex.inputs, {"torch": torch})))
    hw = resolve("h200")
    (f,) = [x for x in price(run_rules(builtin_rules(), cap.gemms, hw, RuleContext()), cap.gemms, hw)
            if x.code == "SL302"]
    seen = []

    def block_runner(finding, by_index):
        seen.append(sorted(g.role for g in (by_index[i] for i in finding.gemms) if g.role))
        return (lambda: 9.0), (lambda: 3.0)

    c = check_finding(f, cap.gemms, hw, FakeClock(), fake_runner(hw, 1.0), block_runner)
    assert c.measured_speedup == pytest.approx(3.0, rel=0.05)
    assert "after_softmax" in seen[0] and c.gemms == ()


def test_calibrate_fit_makes_a_loadable_profile_from_measurements() -> None:
    from dataclasses import replace as dc_replace

    from shapelint.hardware import profile_from_dict
    from shapelint.measure.calibrate import WAVE_K, WAVE_M, WAVE_NS, closest_base, fit, row_major_gemm
    from shapelint.price.gemm import gemm_time

    base = closest_base("NVIDIA H200")
    assert base["aliases"] == ["h200"]
    truth = dc_replace(profile_from_dict(base, "h200"), wave_weight=0.7)
    rows = [{"tag": "wave", "M": WAVE_M, "N": n, "K": WAVE_K, "dtype": "bf16",
             "ms": gemm_time(row_major_gemm(WAVE_M, n, WAVE_K, "bf16"), truth).seconds * 1e3} for n in WAVE_NS]
    rows.append({"tag": "typical", "M": 8192, "N": 8192, "K": 8192, "dtype": "bf16",
                 "ms": 2 * 8192**3 / (700e12) * 1e3})
    measured = {"bf16_tflops": 800.0, "copy_tbps": 4.0, "rows": rows,
                "misaligned_efficiency": {2: {2: 0.2, 8: 0.35}},
                "misaligned_output_efficiency": {2: {2: 0.1, 8: 0.3}}}
    measured["step"] = {"elementwise_efficiency": 0.81, "host_us_per_kernel": 33.0, "kernel_gap_us": 1.1}
    doc = fit(base, measured)
    hw = profile_from_dict(doc, "calibrated")
    assert hw.peak_tflops("bf16") == 800.0 and hw.bandwidth == 4.0e12
    # the measured step numbers replace the base's; the rest of its step table stays
    assert (hw.step.elementwise_efficiency, hw.step.host_us_per_kernel, hw.step.kernel_gap_us) == (0.81, 33.0, 1.1)
    assert hw.step.reduction_efficiency == profile_from_dict(base, "h200").step.reduction_efficiency
    assert "step" not in doc["measured"]
    assert hw.misalignment_efficiency(2, 2) == 0.2 and hw.misalignment_efficiency(2, 2, output=True) == 0.1
    assert doc["gemm_efficiency"] == pytest.approx(700 / 800, rel=1e-3)
    assert doc["wave_weight"] == pytest.approx(0.7, abs=0.11)  # recovered from the sweep


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.cuda
@cuda
def test_calibrate_measures_the_step_table_on_a_gpu() -> None:
    """On a real GPU: every step key measured, each within physical bounds."""
    from shapelint.hardware import STEP_KEYS, resolve
    from shapelint.measure.calibrate import NOT_MEASURED, measure_step
    from shapelint.measure.timer import cuda_timer

    h100 = resolve("h100")
    step = measure_step(cuda_timer(), h100, compile=False, log=lambda _: None)
    assert set(step) == {k for k in STEP_KEYS if not k.startswith("compile_host") and k not in NOT_MEASURED}
    assert all(0.05 < step[k] < 1.2 for k in step if k.endswith("_efficiency"))
    assert 0.5 < step["min_kernel_us"] < 20
    # the host costs keep the shipped model's shape, at this machine's speed (0.3x to 3x)
    speed = step["host_us_per_kernel"] / h100.step.host_us_per_kernel
    assert 0.3 < speed < 3
    assert step["host_us_per_tensor"] == pytest.approx(h100.step.host_us_per_tensor * speed, rel=0.01)


@pytest.mark.cuda
@cuda
def test_verify_measures_the_lm_head_on_a_gpu() -> None:
    """On a real GPU: the padded LM head is faster, as estimated within 25%."""
    gemms, (f,), hw = lm_head_findings()
    (checked,) = verify([f], gemms, hw, threshold=1.05)
    v = checked.verification.to_json()  # the report's JSON form, a public contract
    assert v["status"] == "confirmed"
    assert checked.measured_speedup > 2.0
    assert abs(f.est_speedup / checked.measured_speedup - 1) < 0.25
    assert all(g["after_peak_fraction"] > g["before_peak_fraction"] for g in v["gemms"])


@pytest.mark.cuda
@cuda
def test_materialized_layouts_run_through_cublas_on_a_gpu() -> None:
    gemms, _, _ = lm_head_findings()
    from shapelint.measure.kernels import gpu_runner

    run = gpu_runner()
    for g in gemms:
        out = run(g)()
        assert out.shape == (g.m, g.n) and torch.isfinite(out.float()).all()
