"""Inductor's layout optimisation: compiled, an NCHW convnet runs its convolutions
channels-last (``GraphLowering.decide_layout_opt``), so its compiled step is priced as
the channels-last one's; a grouped convolution with several channels per group keeps
the model's layout."""

from __future__ import annotations

import torch
from torch import nn

from shapelint import hardware
from shapelint.pipeline.run import trace
from shapelint.price.step import Step, step_time

H100 = hardware.resolve("h100")


def _mbconv(groups: int, channels_last: bool) -> tuple[nn.Module, torch.Tensor]:
    model = nn.Sequential(nn.Conv2d(64, 256, 1), nn.SiLU(), nn.Conv2d(256, 256, 3, padding=1, groups=groups),
                          nn.SiLU(), nn.Conv2d(256, 64, 1))
    x = torch.randn(32, 64, 56, 56)
    if channels_last:
        return model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
    return model, x


def _step(groups: int, channels_last: bool) -> Step:
    cap, _ = trace(lambda: _mbconv(groups, channels_last))
    return Step(cap.gemms, cap.ops, cap.params)


def test_depthwise_and_1x1_convolutions_are_laid_out_channels_last_compiled() -> None:
    nchw, nhwc = _step(256, False), _step(256, True)
    assert nchw.channels_last_convs and nhwc.channels_last_convs
    conv_ms = [dict(step_time(s, H100, mode).by_class)["gemm"] for s in (nchw, nhwc) for mode in ("eager", "compile")]
    eager_nchw, compiled_nchw, eager_nhwc, compiled_nhwc = conv_ms
    assert eager_nchw > 1.2 * eager_nhwc  # eager, NCHW pays the depthwise kernel and cuDNN's transposes
    assert compiled_nchw == compiled_nhwc  # compiled, Inductor lays both out channels-last


def test_a_grouped_convolution_with_several_channels_per_group_keeps_the_layout() -> None:
    nchw = _step(8, False)  # 32 input channels per group
    assert not nchw.channels_last_convs
    eager, compiled = (dict(step_time(nchw, H100, mode).by_class)["gemm"] for mode in ("eager", "compile"))
    assert compiled == eager  # priced NCHW both ways, transposes included
