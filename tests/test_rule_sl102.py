"""SL102 no-tensor-cores: fp32 (TF32 off) and tf32-on-Volta GEMMs, one finding per module."""

from __future__ import annotations

import torch
from _rules import run_rule
from shapelint.rules import sl102_no_tensor_cores as sl102
from torch import nn

from shapelint.check.rule_api import RuleContext
from shapelint.hardware import resolve
from shapelint.pipeline.run import trace


def findings(build, gpu: str, dtype: str):
    cap, _ = trace(build, precision=dtype)
    return cap, list(run_rule(sl102, cap.gemms, resolve(gpu), RuleContext(precision=dtype)))


def test_fp32_on_h200_suggests_bf16_and_tf32_with_measured_rates() -> None:
    cap, fs = findings(lambda: (nn.Linear(4096, 4096), torch.randn(8192, 4096)), "h200", "fp32")
    assert len(fs) == 1
    f = fs[0]
    assert (f.code, f.name, f.module) == ("SL102", "no-tensor-cores", "<root>")
    assert f.suggestion.to_json() == {"parameter": "dtype", "from": "fp32", "to": "bf16"}
    assert f.gemms == tuple(g.index for g in cap.gemms)  # forward and grad_weight
    # H200 measured: fp32 51.4 TFLOP/s, bf16 786.7 (x0.95 on model GEMMs), tf32 340
    assert 12.0 < f.est_speedup < 16.0
    (tf32,) = f.alternatives  # the other way: keep fp32 tensors, turn TF32 on
    assert tf32.suggestion.to_json() == {"parameter": "dtype", "from": "fp32", "to": "tf32"}
    assert 5.5 < tf32.est_speedup < 7.5
    assert "allow_tf32 = True" in tf32.note and "bf16" in f.message


def test_fp32_runs_at_the_cuda_core_rate() -> None:
    cap, fs = findings(lambda: (nn.Linear(4096, 4096), torch.randn(8192, 4096)), "h200", "fp32")
    hw = resolve("h200")
    fwd = next(g for g in cap.gemms if g.phase == "forward")
    assert not hw.uses_tensor_cores("fp32")
    # 2·8192·4096² FLOP at 51.4 TFLOP/s
    assert abs(fs[0].est_ms - 2 * 1e3 * fwd.flops / 51.4e12) / fs[0].est_ms < 0.02


def test_volta_tf32_has_no_tensor_cores_suggests_fp16() -> None:
    _, fs = findings(lambda: (nn.Linear(2048, 2048), torch.randn(8192, 2048)), "v100", "tf32")
    assert [f.suggestion.to_json() for f in fs] == [{"parameter": "dtype", "from": "tf32", "to": "fp16"}]
    assert fs[0].alternatives == ()  # no TF32 alternative on a V100
    assert "allow_tf32" not in fs[0].message
    # 125 TF fp16 tensor cores vs 15.7 fp32 (x0.85 achievable each, x0.87 on model GEMMs)
    assert 5.5 < fs[0].est_speedup < 8.0


def test_one_finding_per_module() -> None:
    model = lambda: (nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)),
                     torch.randn(4096, 1024))
    cap, fs = findings(model, "h100", "fp32")
    assert sorted(f.module for f in fs) == ["0", "2"]  # ranked by what they save
    for f in fs:
        assert sorted(f.gemms) == sorted(g.index for g in cap.gemms if g.module == f.module)


def test_tensor_core_dtypes_pass() -> None:
    assert findings(lambda: (nn.Linear(4096, 4096), torch.randn(8192, 4096)), "h100", "tf32")[1] == []
    assert findings(lambda: (nn.Linear(4096, 4096), torch.randn(8192, 4096)), "h100", "bf16")[1] == []
    assert findings(lambda: (nn.Linear(1024, 4096), torch.randn(4096, 1024)), "t4", "fp16")[1] == []


def test_low_precision_per_gpu() -> None:
    assert sl102.low_precision(resolve("h100")) == "bf16"
    assert sl102.low_precision(resolve("a100")) == "bf16"
    assert sl102.low_precision(resolve("v100")) == "fp16"
    assert sl102.low_precision(resolve("t4")) == "fp16"
