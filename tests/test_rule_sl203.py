"""SL203 wave-quantization: a partial last wave of tiles over the SMs."""

from __future__ import annotations

from dataclasses import replace

import torch
from _rules import run_rule
from shapelint.rules import sl203_wave_quantization as sl203
from torch import nn

from shapelint.check.rule_api import RuleContext
from shapelint.hardware import resolve
from shapelint.physics.quantization import Quantization, quantization
from shapelint.physics.reshape import resize
from shapelint.pipeline.run import trace
from shapelint.price import Policy


def run(n_in: int, n_out: int, tokens: int, gpu: str, dtype: str = "bf16", policy: Policy = Policy()):
    cap, _ = trace(lambda: (nn.Linear(n_in, n_out), torch.randn(tokens, n_in)), precision=dtype)
    context = RuleContext(precision=dtype, tokens=cap.tokens)
    return cap, list(run_rule(sl203, cap.gemms, resolve(gpu), context, policy))


def test_v100_one_wave_with_idle_sms() -> None:
    hw = resolve("v100")
    assert (hw.sms, hw.wave_weight) == (80, 1.0)
    # 2048 x 512 in 128x128 tiles: 64 tiles on 80 SMs; at 640, 80 tiles fill the wave
    assert quantization(2048, 512, 1, hw) == Quantization(1.0, 0.8, (128, 128))
    assert quantization(2048, 640, 1, hw) == Quantization(1.0, 1.0, (128, 128))
    cap, fs = run(4096, 512, 2048, "v100", "fp16")
    (f,) = fs
    assert (f.code, f.name, f.module) == ("SL203", "wave-quantization", "<root>")
    assert f.suggestion.to_json() == {"parameter": "out_features", "from": 512, "to": 640}
    assert sorted(f.gemms) == [g.index for g in cap.gemms]
    assert 0.14 < f.fact("waste") < 0.16
    assert f.gain == "throughput"
    assert 1.15 < f.est_speedup < 1.2
    assert "80 SMs" in f.message


def test_t4() -> None:
    _, fs = run(4096, 512, 1024, "t4", "fp16")
    assert [f.suggestion.to_json() for f in fs] == [{"parameter": "out_features", "from": 512, "to": 640}]


def test_full_waves_pass() -> None:
    assert run(4096, 640, 2048, "v100", "fp16")[1] == []


def test_hopper_wave_sweep_stays_quiet() -> None:
    """shared/data/gemm_truth.json, rows tagged wave_sweep: 4096 x N x 4096 bf16 on an
    H200 runs 613-721 TFLOP/s for every N from 1024 to 4096: no wave cliff to report."""
    cap, _ = trace(lambda: (nn.Linear(4096, 1024), torch.randn(4096, 4096)))
    for gpu in ("h100", "h200"):
        hw = resolve(gpu)
        for n in range(1024, 4096 + 1, 128):
            gemms = [replace(resize(g, 1024, n), module_params=(("in_features", 4096), ("out_features", n)))
                     for g in cap.gemms]
            assert (gemms[0].m, gemms[0].n, gemms[0].k) == (4096, n, 4096)
            assert 1 - quantization(4096, n, 1, hw).wave < 0.03
            assert list(run_rule(sl203, gemms, hw, RuleContext(tokens=4096))) == [], (gpu, n)


def test_size_equal_to_token_count_is_skipped() -> None:
    # out_features = tokens = 1024: resizing one would resize the other
    _, fs = run(4096, 1024, 1024, "v100", "fp16")
    assert all(f.suggestion.from_ != 1024 for f in fs)
    # with 768 tokens, out_features = 1024 is flagged
    _, fs = run(4096, 1024, 768, "v100", "fp16")
    assert [(f.suggestion.parameter, f.suggestion.from_) for f in fs] == [("out_features", 1024)]


def test_threshold_is_the_policy_min_loss() -> None:
    assert run(4096, 512, 2048, "v100", "fp16", policy=Policy(min_loss=0.2))[1] == []


def test_reported_whatever_other_rules_are_selected() -> None:
    """Issue 8, defect 4: SL203 ran SL202 to skip its sizes, so `--select SL203` (or
    `--ignore SL202`) reported nothing on Linear(4096, 464), V100, fp16, 2048 tokens."""
    from shapelint.check.run import builtin_rules, run_rules, select_rules
    from shapelint.price import price

    cap, _ = trace(lambda: (nn.Linear(4096, 464), torch.randn(2048, 4096)), precision="fp16")
    hw, ctx = resolve("v100"), RuleContext(precision="fp16", tokens=cap.tokens)
    for select, ignore in ((["SL203"], []), ([], ["SL202"])):
        rules = select_rules(builtin_rules(), select, ignore)
        fs = [f for f in price(run_rules(rules, cap.gemms, hw, ctx), cap.gemms, hw) if f.code == "SL203"]
        assert [f.suggestion.from_ for f in fs] == [464], (select, ignore)
        assert fs[0].est_speedup > 1.1
