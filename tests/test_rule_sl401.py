"""SL401 conv-channels: convolution channel counts that are not 16-byte multiples."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import torch
from _rules import run_rule
from shapelint.rules import sl401_conv_channels as sl401
from torch import nn

from shapelint.check.rule_api import Rule, RuleContext
from shapelint.hardware import resolve
from shapelint.pipeline.examples import run_example
from shapelint.pipeline.run import trace
from shapelint.price import Policy

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

H100 = resolve("h100")
#: a policy that reports every proposal
EVERYTHING = Policy(min_loss=0.0, min_speedup=1.0, min_step_share=0.0)
NHWC = dict(memory_format=torch.channels_last)


def run(build, dtype: str = "bf16", policy: Policy = Policy()):
    cap, _ = trace(build, precision=dtype)
    return cap, list(run_rule(sl401, cap.gemms, H100, RuleContext(precision=dtype), policy))


def conv(module: str, shape: tuple[int, ...], channels_last: bool = True):
    def build():
        x = torch.randn(*shape)
        return eval(module, {"nn": nn}), (x.to(**NHWC) if channels_last else x).requires_grad_()

    return build


def shape_of(g):
    return (g.op, g.phase, g.m, g.n, g.k, g.batch, g.a, g.b, g.out, g.extra)


def test_convnet_example_pads_conv1_and_conv2() -> None:
    sys.path.insert(0, str(EXAMPLES))
    import convnet

    cap, fs = run(lambda: convnet.shapelint_model(64, 64))
    f1, f2 = sorted(fs, key=lambda f: f.module)  # the stem's 3 input channels are the exception
    # each saves about a tenth of the step (convolution kernels at their measured rate)
    assert [(f.code, f.module, f.severity) for f in (f1, f2)] == [("SL401", "conv1", "error"),
                                                                   ("SL401", "conv2", "error")]
    assert f1.suggestion.to_json() == {"parameter": "out_channels", "from": 60, "to": 64}
    assert f1.fact("padded") == {"in_channels": [30, 32], "out_channels": [60, 64]}
    assert "pad in_channels 30 → 32 too" in f1.message
    assert f2.suggestion.to_json() == {"parameter": "out_channels", "from": 100, "to": 104}
    assert f2.fact("padded") == {"in_channels": [60, 64], "out_channels": [100, 104]}
    assert [cap.gemms[i].module for i in f1.gemms] == ["conv1"] * 3
    assert [cap.gemms[i].module for i in f2.gemms] == ["conv2"] * 3
    fwd, dgrad, wgrad = f1.after
    assert (fwd.m, fwd.n, fwd.k, fwd.a.ld, fwd.b.ld, fwd.out.ld) == (65536, 64, 32 * 9, 32, 288, 64)
    assert (dgrad.n, dgrad.k, dgrad.a.ld, dgrad.out.ld) == (288, 64, 64, 32)
    assert (wgrad.m, wgrad.n, wgrad.a.ld, wgrad.b.ld) == (64, 288, 64, 32)
    assert dict(fwd.extra)["weight"] == (64, 32, 3, 3) and dict(fwd.extra)["input"] == (64, 32, 32, 32)
    # conv2 has stride 2: its operands are the tensors as they lie in memory (x 32x32, y 16x16),
    # NCHW, so every one of them is transposed (a copy) before and after the fix
    fwd, dgrad, wgrad = f2.after
    assert (fwd.m, fwd.n, fwd.k, fwd.a.rows, fwd.out.rows) == (64 * 16 * 16, 104, 64 * 9, 64 * 32 * 32, 64 * 16 * 16)
    assert (dgrad.a.rows, dgrad.a.cols, dgrad.out.rows, dgrad.out.cols) == (64 * 16 * 16, 104, 64 * 32 * 32, 64)
    assert (wgrad.a.rows, wgrad.a.cols, wgrad.b.rows, wgrad.b.cols) == (104, 64 * 16 * 16, 64 * 32 * 32, 64)
    assert all(op.copied for op in (fwd.a, fwd.out, dgrad.a, dgrad.out, wgrad.a, wgrad.b))
    # padding measured 1.28x (conv1) and 1.29x (conv2) on an H200, NCHW, forward + backward
    assert 1.15 < f1.est_speedup < 1.45 and 1.15 < f2.est_speedup < 1.45
    # with every gain reported: the same two; the stem's 3 input channels never
    _, every = run(lambda: convnet.shapelint_model(64, 64), policy=EVERYTHING)
    assert {x.module for x in every} == {"conv1", "conv2"}
    assert all(x.suggestion.from_ != 3 for x in every)


def test_rebuilt_gemms_equal_a_traced_padded_conv() -> None:
    for before, after, shape in [("nn.Conv2d(30, 60, 3, padding=1)", "nn.Conv2d(32, 64, 3, padding=1)", 30),
                                 ("nn.ConvTranspose2d(60, 30, 4, stride=2, padding=1)",
                                  "nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1)", 60),
                                 ("nn.Conv2d(100, 60, 3, padding=1, groups=4)",
                                  "nn.Conv2d(128, 64, 3, padding=1, groups=4)", 100)]:
        cap, _ = run(conv(before, (8, shape, 16, 16)))
        padded_in = 64 if shape == 60 else (128 if shape == 100 else 32)
        ref, _ = run(conv(after, (8, padded_in, 16, 16)))
        ((call, members),) = sl401.conv_calls(cap.gemms)
        c_in, c_out = {30: (32, 64), 60: (64, 32), 100: (128, 64)}[shape]
        rebuilt = [sl401.rebuild(g, call, c_in, c_out) for g in members]
        assert [shape_of(g) for g in rebuilt] == [shape_of(g) for g in ref.gemms], before
        # the operands are the tensors as they lie in memory, each group's share of them:
        # over the groups (the batch) x counts once, in the forward and the weight gradient
        fwd, _, wgrad = members
        x_in_wgrad = wgrad.a if call.transposed else wgrad.b
        for op in (fwd.a, x_in_wgrad):
            assert op.rows * op.cols * fwd.batch == 8 * shape * 16 * 16, before


def test_input_channels_of_an_inner_layer() -> None:
    _, fs = run(conv("nn.Conv2d(30, 64, 3, padding=1)", (64, 30, 56, 56)))
    (f,) = fs
    assert f.suggestion.to_json() == {"parameter": "in_channels", "from": 30, "to": 32}
    assert len(f.gemms) == 3 and f.fact("kernel_elems") == 9 and f.fact("extra_channels") == 2
    assert 1.1 < f.est_speedup < 1.8  # measured 1.43x (channels_last, H200) and 1.77x


def test_transposed_convolution_pads_its_output_channels() -> None:
    _, fs = run(conv("nn.ConvTranspose2d(64, 30, 4, stride=2, padding=1)", (32, 64, 32, 32)))
    (f,) = fs
    assert f.suggestion.to_json() == {"parameter": "out_channels", "from": 30, "to": 32}
    fwd, dgrad, wgrad = f.after
    # its forward is the input-gradient GEMM of a convolution: x (32x32) in, y (64x64) written
    assert (fwd.m, fwd.n, fwd.k) == (32 * 32 * 32, 32 * 16, 64)  # output channels x kernel 4x4
    assert (fwd.a.rows, fwd.a.cols, fwd.out.rows, fwd.out.cols) == (32 * 32 * 32, 64, 32 * 64 * 64, 32)
    assert dict(fwd.extra)["weight"] == (64, 32, 4, 4)
    # its input gradient a plain convolution of dy (64x64, 32 channels) into dx (32x32, 64 channels)
    assert (dgrad.m, dgrad.n, dgrad.k) == (32 * 32 * 32, 64, 32 * 16)
    assert (dgrad.a.rows, dgrad.a.cols, dgrad.out.rows, dgrad.out.cols) == (32 * 64 * 64, 32, 32 * 32 * 32, 64)
    # its weight gradient: x transposed (64 x N·32·32) by dy (N·64·64 x 32)
    assert (wgrad.m, wgrad.n, wgrad.k, wgrad.a.rows, wgrad.b.rows, wgrad.b.cols) == (
        64, 32 * 16, 32 * 32 * 32, 64, 32 * 64 * 64, 32)
    assert [g.flops for g in f.after] == [2 * 32 * 32 * 32 * 512 * 64] * 3
    # not measured itself: the estimate is cuDNN's misaligned-channel penalty, as for Conv2d(30, 64, 3)
    assert 1.3 < f.est_speedup < 1.8


def test_examples_on_the_h200_profile_match_measured_gains() -> None:
    # padding measured for the BAD examples (the transposed convolution was not measured)
    measured = {0: 1.77, 1: 1.77, 2: 1.53, 3: 1.15, 5: 1.27}
    for i, gain in measured.items():
        (f,) = run_example(Rule.from_module(sl401), replace(sl401.BAD[i], gpu="h200"))
        assert abs(f.est_speedup / gain - 1) < 0.12, (sl401.BAD[i].model, f.est_speedup)


def test_tf32_aligns_to_four_channels() -> None:
    _, fs = run(conv("nn.Conv2d(256, 250, 3, padding=1)", (64, 256, 28, 28)), dtype="tf32")
    (f,) = fs
    assert f.suggestion.to_json() == {"parameter": "out_channels", "from": 250, "to": 252}
    assert f.fact("align_elems") == 4


def test_not_flagged() -> None:
    assert run(conv("nn.Conv2d(3, 64, 7, stride=2, padding=3)", (32, 3, 224, 224), False))[1] == []
    assert run(conv("nn.Conv2d(4, 64, 3, stride=2, padding=1)", (32, 4, 224, 224)))[1] == []
    assert run(conv("nn.Conv2d(64, 128, 3, padding=1)", (64, 64, 56, 56)))[1] == []
    assert run(conv("nn.Conv2d(30, 60, 3, padding=1)", (64, 30, 56, 56)), dtype="fp32")[1] == []
    assert run(conv("nn.Conv2d(30, 30, 3, padding=1, groups=30)", (64, 30, 56, 56)), policy=EVERYTHING)[1] == []
    assert sl401.misaligned_channels(geometry(3, 30), 8) == {"out_channels": 30}


def geometry(c_in: int, c_out: int) -> sl401.ConvCall:
    return sl401.ConvCall("stem", (("input", (8, c_in, 64, 64)), ("weight", (c_out, c_in, 3, 3)),
                                   ("transposed", False), ("groups", 1)))
