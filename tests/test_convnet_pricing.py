"""Convnet steps priced as the GPU runs them (issue 26): batch norm by the layout of its
activation, the convolution kernel each layout gets and its rate by size, Inductor's
batch-norm regions, and channels-last pointwise kernels on TensorIterator's vectorised
path. The rates are the H100 profile's (``_arch.yaml``, ``docs/step-model.md``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

from shapelint import hardware
from shapelint.capture.op_traffic import channels_last, stream_layout
from shapelint.physics.conv import ConvCall
from shapelint.physics.conv_kernels import BATCH_NORM, GEMM_1X1_MIN_ROWS, conv_kernel, kernel_of
from shapelint.pipeline.run import trace
from shapelint.price.batch_norm import kernel_ms, op_kernels
from shapelint.price.gemm import conv_memory_efficiency, depthwise_efficiency
from shapelint.price.inductor import fused_regions
from shapelint.price.kernels import memory_kernel_ms, op_ms
from shapelint.price.step import Step, step_time

H100 = hardware.resolve("h100")
ROOT = Path(__file__).resolve().parent.parent


def _bn_step(layout: bool, n: int = 8, c: int = 32, hw: int = 28):
    def build() -> tuple[nn.Module, torch.Tensor]:
        model = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.SiLU())
        x = torch.randn(n, c, hw, hw)
        if layout:
            return model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
        return model, x
    cap, _ = trace(build)
    return cap


@pytest.mark.parametrize("layout", [False, True])
def test_batch_norm_is_priced_by_the_layout_and_shape_of_its_activation(layout: bool) -> None:
    cap = _bn_step(layout)
    bns = [op for op in cap.ops if op.name in BATCH_NORM]
    assert [op.name for op in bns] == ["native_batch_norm", "native_batch_norm_backward"]
    assert all(op.channels_last is layout and op.shape == (8, 32, 28, 28) for op in bns)
    act = 8 * 32 * 28 * 28 * 2  # bf16 activation
    fwd, bwd = bns
    assert fwd.bytes >= 2 * act  # reads x, writes y (and the per-channel statistics)
    for op in bns:
        # the kernels of its layout (shapelint.price.batch_norm), not its bytes at one rate
        kernels = op_kernels(op)
        assert {k.family.startswith("channels_last") for k in kernels} == {layout}
        assert op_ms(op, H100) == pytest.approx(sum(kernel_ms(k, H100) for k in kernels))
    # a profile without the law prices the bytes at one rate per layout, the NCHW kernels
    # (a block per channel striding over N and H·W) measured 3.3x slower per byte
    no_law = replace(H100, step=replace(H100.step, batch_norm_nchw_stats_thread_meps=0.0,
                                        batch_norm_channels_last_stats_thread_meps=0.0))
    eff = (H100.step.batch_norm_channels_last_efficiency if layout else H100.step.batch_norm_nchw_efficiency)
    assert op_ms(fwd, no_law) == pytest.approx(memory_kernel_ms(fwd.bytes, eff, H100))
    assert H100.step.batch_norm_channels_last_efficiency / H100.step.batch_norm_nchw_efficiency == pytest.approx(
        0.267 / 0.080)


def test_layout_of_a_tensor() -> None:
    x = torch.empty(8, 16, 4, 4)
    cl = x.to(memory_format=torch.channels_last)
    one_pixel = torch.empty(8, 16, 1, 1).to(memory_format=torch.channels_last)
    assert not channels_last([x]) and channels_last([cl]) and not channels_last([one_pixel])
    assert channels_last([torch.empty(3), cl])  # the first 4-D tensor decides
    # every operand channels-last (or of one pixel): the vectorised path; mixed or strided: not
    assert stream_layout("pointwise", [cl, cl]) == (4, False)
    assert stream_layout("pointwise", [cl, one_pixel, cl]) == (4, False)
    assert stream_layout("pointwise", [cl, x]) == (4, True)
    assert stream_layout("pointwise", [x.transpose(1, 2)]) == (4, False)  # one permutation: merged back
    assert stream_layout("copy", [x.transpose(1, 3), x.transpose(1, 3).contiguous()], outputs=1) == (4, True)
    assert stream_layout("reduction", [cl, x]) == (4, False)  # a reduction's rate is its own


def test_batch_norm_takes_its_channels_last_kernels_as_aten_decides() -> None:
    """``batch_norm_use_channels_last_kernels``: channels-last, or contiguous with the
    channels at unit stride ([N, C], [N, C, 1, 1]); NCHW with pixels is not."""
    assert channels_last([torch.empty(8, 16, 4, 4).to(memory_format=torch.channels_last)], batch_norm=True)
    assert channels_last([torch.empty(8, 16, 1, 1)], batch_norm=True)
    assert channels_last([torch.empty(8, 16)], batch_norm=True)
    assert channels_last([torch.empty(8, 1, 4, 4)], batch_norm=True)
    assert not channels_last([torch.empty(8, 16, 4, 4)], batch_norm=True)
    assert not channels_last([torch.empty(8, 16, 5)], batch_norm=True)  # BatchNorm1d over a sequence


def test_an_eval_mode_batch_norm_is_one_pointwise_pass() -> None:
    """In eval mode the running statistics normalise: no statistics kernel."""
    model = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32)).eval()
    cap, _ = trace(lambda: (model, torch.randn(8, 16, 28, 28)), precision="bf16", training=False)
    (bn,) = [op for op in cap.ops if "batch_norm" in op.name]
    assert (bn.name, bn.kind) == ("_native_batch_norm_legit_no_training", "pointwise")
    assert bn.name not in BATCH_NORM
    assert op_ms(bn, H100) == pytest.approx(memory_kernel_ms(bn.bytes, H100.step.elementwise_efficiency, H100))


def _conv(cin: int, cout: int, k: int, n: int, hw: int, groups: int = 1) -> ConvCall:
    extra = (("input", (n, cin, hw, hw)), ("weight", (cout, cin // groups, k, k)), ("groups", groups),
             ("transposed", False), ("stride", (1, 1)))
    return ConvCall("conv", extra)


def test_a_channels_last_1x1_convolution_with_enough_rows_runs_as_a_gemm() -> None:
    # MBConv at batch 256: 1x1 convolutions at 14^2 (50176 rows) ran as cuBLASLt's nvjet GEMMs
    assert conv_kernel(_conv(672, 112, 1, 256, 14), channels_last=True) == "gemm_1x1"
    assert 256 * 14 * 14 >= GEMM_1X1_MIN_ROWS > 64 * 14 * 14
    # 1024 -> 256 at 14^2, batch 64 (12544 rows): cuDNN's implicit GEMM, 1.56x over NCHW
    assert conv_kernel(_conv(1024, 256, 1, 64, 14), channels_last=True) == "implicit_gemm"
    # NCHW: by pixels per image, whatever the batch
    assert conv_kernel(_conv(672, 112, 1, 256, 14)) == "implicit_gemm"
    assert conv_kernel(_conv(256, 64, 1, 8, 56)) == "gemm_1x1"
    assert conv_kernel(_conv(64, 64, 3, 256, 56), channels_last=True) == "implicit_gemm"
    assert conv_kernel(_conv(96, 96, 3, 256, 56, groups=96), channels_last=True) == "depthwise"


def test_depthwise_rate_grows_with_the_bytes_a_kernel_moves() -> None:
    mb = 1e6
    # the measured points (H100, batch 64): 3x3 144 at 72^2 (191 MB per kernel) and 5x5 288 at 36^2
    # (96 MB): NCHW 0.079 and 0.049, channels-last 0.226 and 0.157
    assert depthwise_efficiency(int(191 * mb), True, H100) == pytest.approx(0.158 * 191 / (191 + 212), rel=1e-6)
    assert depthwise_efficiency(int(96 * mb), True, H100) == pytest.approx(0.049, abs=0.001)
    assert depthwise_efficiency(int(191 * mb), False, H100) == pytest.approx(0.9 * 191 / (191 + 510), rel=1e-6)
    # below the smallest measured kernels: their rate, not a ramp that would cost hundreds of us
    assert depthwise_efficiency(int(1 * mb), True, H100) == H100.depthwise_nchw_min_efficiency == 0.049
    assert depthwise_efficiency(int(1 * mb), False, H100) == H100.depthwise_nhwc_min_efficiency == 0.157
    # batch 256's large kernels (771 MB) reach far more of the bandwidth channels-last
    assert depthwise_efficiency(int(771 * mb), False, H100) == pytest.approx(0.9 * 771 / (771 + 510), rel=1e-6)


def test_1x1_convolutions_of_a_channels_last_step_are_priced_as_gemms() -> None:
    def build() -> tuple[nn.Module, torch.Tensor]:
        model = nn.Sequential(nn.Conv2d(64, 256, 1), nn.SiLU(), nn.Conv2d(256, 64, 1))
        x = torch.randn(64, 64, 28, 28)  # 50176 rows
        return model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
    cap, _ = trace(build)
    convs = [g for g in cap.gemms if g.role == "conv"]
    assert len(convs) == 6 - 1  # the input needs no gradient
    assert {kernel_of(g) for g in convs} == {"gemm_1x1"}
    assert {conv_memory_efficiency(g, H100) for g in convs} == {(H100.conv_gemm_1x1_efficiency, False)}


def test_inductor_prices_its_batch_norm_regions_at_their_measured_rate() -> None:
    cap = _bn_step(False, n=32, c=64, hw=56)
    step = Step(cap.gemms, cap.ops, cap.params)
    regions = fused_regions(cap.ops)
    norm = [r for r in regions if r.norm]
    assert len(norm) == 2  # BN + SiLU forward, SiLU + BN backward
    for r in norm:
        assert r.ms(H100) == pytest.approx(max(memory_kernel_ms(r.bytes, H100.step.fused_norm_efficiency, H100),
                                               r.kernels(H100) * H100.step.min_kernel_us * 1e-3))
    fused = dict(step_time(step, H100, "compile").by_class)["fused"]
    assert fused == pytest.approx(sum(r.ms(H100) for r in regions))
    assert all(not r.norm for r in regions if not any(cap.ops[i].name in BATCH_NORM for i in r.ops))


@pytest.mark.slow
@pytest.mark.parametrize(("model", "measured"), [
    # benchmarks/step_profile.py on an H100 SXM, torch 2.11, cuDNN 9.19, 2026-11-26
    # (docs/step-measurements.md): batch 256 at 224^2, bf16 autocast, fused AdamW
    ("mbconv.py", {"eager": 132.74, "compile": 40.95}),
    ("mbconv_channels_last.py", {"eager": 53.59, "compile": 40.76}),
])
def test_mbconv_steps_within_15_percent_of_the_h100(model: str, measured: dict[str, float]) -> None:
    from shapelint.app import api

    for mode, ms in measured.items():
        report = api.lint_target(ROOT / "benchmarks" / "real_models" / model, gpu="h100",
                                 compile=mode == "compile", batch=256, seq=224)
        assert report.step_time is not None
        assert abs(report.step_time.ms / ms - 1) < 0.15, (model, mode, report.step_time.ms, ms)


@pytest.mark.parametrize("doc, message", [
    ({"depthwise_nhwc_half_mb": -212}, "must be positive"),
    ({"depthwise_nchw_half_mb": 0}, "must be positive"),
    ({"depthwise_nchw_efficiency": 0.1, "depthwise_nchw_min_efficiency": 0.2}, "is above"),
])
def test_a_profile_with_a_depthwise_rate_that_cannot_be_is_refused(doc: dict, message: str) -> None:
    from shapelint.errors import ShapelintError
    from shapelint.hardware.check import check_profile

    with pytest.raises(ShapelintError, match=message):
        check_profile(doc, "mine.yaml")
