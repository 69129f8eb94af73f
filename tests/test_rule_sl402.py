"""SL402 conv-channels-last: tensor-core convolutions on NCHW tensors."""

from __future__ import annotations

import pytest
import torch
from _rules import run_rule
from shapelint.rules import sl402_conv_channels_last as sl402
from torch import nn

from shapelint.check.rule_api import RuleContext
from shapelint.hardware import resolve
from shapelint.physics.conv import as_channels_last
from shapelint.physics.conv_kernels import transposed_bytes
from shapelint.pipeline.run import trace
from shapelint.price.gemm import total_ms, transposes_s

H100 = resolve("h100")


def run(build, dtype: str = "bf16", **ctx):
    cap, _ = trace(build, precision=dtype)
    return cap, list(run_rule(sl402, cap.gemms, H100, RuleContext(precision=dtype, **ctx)))


def conv(module: str, shape: tuple[int, ...], channels_last: bool = False, grad: bool = True):
    def build():
        x = torch.randn(*shape)
        if channels_last:
            x = x.to(memory_format=torch.channels_last)
        return eval(module, {"nn": nn}), x.requires_grad_(grad)

    return build


def shape_of(g):
    return (g.op, g.phase, g.m, g.n, g.k, g.batch, g.a, g.b, g.out, g.extra)


def test_nchw_conv_runs_channels_last_after_the_fix() -> None:
    cap, fs = run(conv("nn.Conv2d(64, 64, 3, padding=1)", (64, 64, 56, 56)))
    (f,) = fs
    assert (f.code, f.name, f.module, f.severity) == ("SL402", "conv-channels-last", "<root>", "warning")
    assert f.suggestion.to_json() == {"parameter": "memory_format", "from": "contiguous", "to": "channels_last"}
    assert sorted(f.gemms) == [0, 1, 2]  # forward, grad_input, grad_weight
    rows = 64 * 56 * 56
    # one transpose (read + write) per NCHW operand per kernel: x and y forward, dy and dx
    # for grad_input, dy and x for grad_weight
    assert f.fact("copy_bytes") == 6 * 2 * rows * 64 * 2
    # and the 3x3 weight (KCRS <-> KRSC) once per kernel: read, or its gradient written
    weight = 2 * 64 * 64 * 9 * 2
    assert [transposed_bytes(g) for g in cap.gemms] == [(2 * rows * 64 * 2, 2 * rows * 64 * 2, weight)] * 3
    # each transpose a kernel of its own: its bytes, a kernel's fixed time and the gap before the next
    fixed = (H100.step.min_kernel_us + H100.step.kernel_gap_us) * 1e-3
    copy_ms = (1e3 * (f.fact("copy_bytes") + 3 * weight) / (H100.bandwidth * H100.conv_transpose_efficiency)
               + 9 * fixed)
    assert abs(1e3 * sum(transposes_s(g, H100) for g in cap.gemms) - copy_ms) < 1e-9
    assert abs(f.est_ms - f.est_ms_after - copy_ms) < 1e-9  # the transposes are all the fix saves
    assert f.fact("modules") == ["<root>"]
    # the suggested GEMMs are exactly those of the same conv traced on channels_last input
    ref, _ = run(conv("nn.Conv2d(64, 64, 3, padding=1)", (64, 64, 56, 56), channels_last=True))
    assert [shape_of(g) for g in f.after] == [shape_of(g) for g in ref.gemms]
    assert abs(f.est_ms_after - sum(f.gemm_ms_after)) < 1e-12
    # profiled forward + backward kernel time: 1.59x on an H100 (0.430 vs 0.271 ms), 1.54x on an
    # H200 (0.368 vs 0.239 ms); --verify, timing each GEMM's call alone, measured 2.18x
    assert 1.35 < f.est_speedup < 1.7


def test_grouped_conv_transposes_each_tensor_once() -> None:
    _, (f,) = run(conv("nn.Conv2d(64, 64, 3, padding=1)", (64, 64, 56, 56)))
    cap, grouped = run(conv("nn.Conv2d(64, 64, 3, padding=1, groups=4)", (64, 64, 56, 56)))
    fwd = cap.gemms[0]
    # each group's GEMM reads its 16 of the 64 channels (ld 64): over the 4 groups, x once
    assert (fwd.batch, fwd.n, fwd.a.cols, fwd.a.ld, fwd.a.batch_stride) == (4, 16, 16, 64, 16)
    assert sum(g.copy_bytes for g in cap.gemms) == f.fact("copy_bytes") == 6 * 2 * 64 * 56 * 56 * 64 * 2
    # cuDNN's channels-last grouped kernels of a width not a multiple of 64 are slower than
    # NCHW with its transposes (measured 0.75x at 56 per group): nothing to report
    assert grouped == []


def test_conv_kernels_by_layout_match_the_h100_measurements() -> None:
    """NCHW over channels-last, forward + backward kernel time, bf16, batch 64 (H100,
    torch 2.11, cuDNN 9.19, issue 26): within 25% but for grouped 3x3 at 56 per group,
    where channels-last measured 0.75x and is estimated slower still (0.50x). The
    profiler's kernel time leaves out the gaps between cuDNN's transposes and its
    convolution, which the estimate of a call counts: they are taken out here."""
    cases = [  # (module, spatial, measured NCHW / channels-last)
        ("nn.Conv2d(256, 64, 1)", 56, 1.00), ("nn.Conv2d(232, 56, 1)", 36, 0.96),
        ("nn.Conv2d(1024, 256, 1)", 14, 1.56), ("nn.Conv2d(2048, 512, 1)", 7, 1.60),
        ("nn.Conv2d(144, 144, 3, padding=1, groups=144)", 72, 2.86),
        ("nn.Conv2d(288, 288, 5, padding=2, groups=288)", 36, 3.22),
        ("nn.Conv2d(448, 448, 3, padding=1, groups=7)", 28, 1.21),
        ("nn.Conv2d(64, 64, 3, padding=1)", 56, 1.59), ("nn.Conv2d(128, 32, 3, padding=1)", 28, 1.35),
        ("nn.Conv2d(224, 224, 3, padding=1, groups=4)", 56, 0.75),
    ]
    errors = []
    for module, size, measured in cases:
        channels = eval(module, {"nn": nn}).in_channels
        nchw, _ = run(conv(module, (64, channels, size, size)))
        nhwc, _ = run(conv(module, (64, channels, size, size), channels_last=True))
        gaps = sum(len(transposed_bytes(g)) for g in nchw.gemms) * H100.step.kernel_gap_us * 1e-3
        estimated = (total_ms(nchw.gemms, H100) - gaps) / total_ms(nhwc.gemms, H100)
        errors.append(estimated / measured - 1)
    assert all(abs(e) < 0.25 for e in errors[:-1]), errors
    assert -0.4 < errors[-1] < 0


def test_one_finding_for_the_model_stem_included() -> None:
    cap, fs = run(conv("nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3), nn.ReLU(), "
                       "nn.Conv2d(64, 128, 3, padding=1))", (32, 3, 224, 224), grad=False), dtype="fp16")
    (f,) = fs
    assert f.fact("modules") == ["0", "2"] and f.module == "0"
    assert f.message.startswith("2 convolutions (0, 2) run on NCHW tensors")
    assert {cap.gemms[i].module for i in f.gemms} == {"0", "2"}
    assert all(not op.copied for g in f.after for op in (g.a, g.b, g.out))
    assert 1.3 < f.est_speedup < 1.8  # --verify measured 2.03x (each GEMM's call alone)
    # the stem gains less than the 64 -> 128 convolution (measured 1.23x alone on an H200; the
    # estimate, 1.35x, is near it)
    stem = [cap.gemms[i] for i in f.gemms if cap.gemms[i].module == "0"]
    assert [g.phase for g in stem] == ["forward", "grad_weight"]  # the image needs no gradient
    stem_gain = total_ms(stem, H100) / total_ms([as_channels_last(g) for g in stem], H100)
    assert 1.1 < stem_gain < f.est_speedup


def test_not_flagged() -> None:
    assert run(conv("nn.Conv2d(64, 64, 3, padding=1)", (64, 64, 56, 56), channels_last=True))[1] == []
    assert run(conv("nn.Conv2d(64, 64, 3, padding=1)", (64, 64, 56, 56)), dtype="fp32")[1] == []
    # misaligned channels: SL401's (channels-last alone measured no faster there)
    assert run(conv("nn.Conv2d(30, 60, 3, padding=1)", (64, 30, 56, 56)))[1] == []
    # a 1x1 over 56x56 runs as cuBLASLt GEMMs on NCHW tensors (measured 1.00x)
    assert run(conv("nn.Conv2d(256, 64, 1)", (64, 256, 56, 56)))[1] == []


def test_depthwise_convolutions_gain_the_most() -> None:
    """PyTorch's own NCHW depthwise kernel against cuDNN's NHWC one: measured 2.86x."""
    cap, (f,) = run(conv("nn.Conv2d(144, 144, 3, padding=1, groups=144)", (64, 144, 72, 72)))
    assert abs(f.est_speedup / 2.86 - 1) < 0.15
    # both kernels are memory-bound: the gain is the ratio of their rates at this size (each
    # kernel moves x and y, 2 x 64 x 144 x 72^2 bf16 elements, and the 3x3 weights)
    nbytes = cap.gemms[0].min_bytes
    assert nbytes == 2 * 64 * 144 * 72 * 72 * 2 + 144 * 9 * 2
    nhwc = max(H100.depthwise_nhwc_min_efficiency,
               H100.depthwise_nhwc_efficiency * nbytes / (nbytes + H100.depthwise_nhwc_half_mb * 1e6))
    nchw = max(H100.depthwise_nchw_min_efficiency,
               H100.depthwise_nchw_efficiency * nbytes / (nbytes + H100.depthwise_nchw_half_mb * 1e6))
    assert (round(nhwc, 3), round(nchw, 3)) == (0.245, 0.075)  # on the ramp: 191 MB per kernel
    assert f.est_speedup == pytest.approx(nhwc / nchw, rel=0.02)
    assert run(lambda: (nn.Linear(1024, 4096), torch.randn(4096, 1024)))[1] == []
