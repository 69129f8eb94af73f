"""shapelint.price.breakdown: the step estimate entry by entry adds up to the step
model's time per class, eager and compiled, and names each convolution's kernel and the
part of its time that is cuDNN's layout transposes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import shapelint
from shapelint.price.breakdown import LAYOUT_DETAIL, by_detail, by_kind, priced_kernels, top, transposes_ms
from shapelint.price.step import step_time


def _convnet() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), nn.BatchNorm2d(64), nn.SiLU(),
                         nn.Conv2d(64, 64, 3, padding=1, groups=64), nn.SiLU(),  # depthwise
                         nn.Conv2d(64, 128, 1), nn.ReLU(),  # 1x1 over 56^2 pixels: cuBLASLt
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.out, self.norm = nn.Linear(256, 768), nn.Linear(256, 256), nn.LayerNorm(256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, s, 3, 4, 64).permute(2, 0, 3, 1, 4)
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.out(a.transpose(1, 2).reshape(b, s, 256))


def _report(model: nn.Module, x: torch.Tensor, compile: bool) -> shapelint.Report:
    return shapelint.lint(model, x, gpu="h100", compile=compile)


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compile"])
def test_entries_add_up_to_the_step_models_classes(compile: bool) -> None:
    for model, x in ((_convnet(), torch.randn(8, 3, 56, 56)), (nn.Sequential(_Block(), _Block()), torch.randn(4, 128, 256))):
        sm = _report(model, x, compile).result.step_model
        assert sm is not None
        entries = priced_kernels(sm.step, sm.hw, sm.mode, sm.optimizer)
        st = step_time(sm.step, sm.hw, sm.mode, sm.optimizer)
        assert by_kind(entries) == pytest.approx(dict(st.by_class), rel=1e-9, abs=1e-12)
        assert sum(e.kernels for e in entries) == st.kernels
        assert sum(by_detail(entries).values()) == pytest.approx(sum(dict(st.by_class).values()))
        if compile:
            assert sum(1 for e in entries if e.kind == "fused") == len(sm.step.regions) > 0
            assert not any(e.kind in ("pointwise", "reduction", "copy", "fill") for e in entries)
        else:  # one entry per op of the capture, and the optimizer's
            assert len(entries) == len(sm.step.ops) + 1
            assert [e.name for e in entries[:-1]] == [op.name for op in sm.step.ops]
        assert entries[-1].kind == "optimizer" and entries[-1].kernels >= 1


def test_convolutions_by_kernel_and_their_layout_transposes() -> None:
    r = _report(_convnet(), torch.randn(8, 3, 56, 56), compile=False).result
    sm = r.step_model
    assert sm is not None
    entries = priced_kernels(sm.step, sm.hw, "eager")
    convs = [e for e in entries if e.detail.startswith("conv")]
    fwd = [e.detail for e in convs if not e.backward]
    assert fwd == ["conv:implicit_gemm", "conv:depthwise", "conv:gemm_1x1"]
    assert [e.detail for e in convs if e.backward] == ["conv:gemm_1x1", "conv:depthwise", "conv:implicit_gemm"]
    dense = convs[0]
    # NCHW: cuDNN's implicit GEMM transposes what it reads and writes; priced inside the GEMM's time
    expected = sum(transposes_ms(r.capture.gemms[i], sm.hw) for i in dense.gemms)
    assert dense.layout_ms == pytest.approx(expected) and 0 < dense.layout_ms < dense.ms
    assert all(e.layout_ms == 0 for e in convs if e.detail in ("conv:depthwise", "conv:gemm_1x1"))
    details = by_detail(entries)
    assert details[LAYOUT_DETAIL] == pytest.approx(sum(e.layout_ms for e in entries))
    assert details["conv:implicit_gemm"] == pytest.approx(sum(e.ms - e.layout_ms for e in convs
                                                              if e.detail == "conv:implicit_gemm"))
    # channels-last, nothing is transposed
    cl = _report(_convnet().to(memory_format=torch.channels_last),
                 torch.randn(8, 3, 56, 56).to(memory_format=torch.channels_last), compile=False).result.step_model
    assert cl is not None
    assert sum(e.layout_ms for e in priced_kernels(cl.step, cl.hw, "eager")) == 0


def test_top_groups_repeated_layers() -> None:
    sm = _report(nn.Sequential(_Block(), _Block()), torch.randn(4, 128, 256), compile=False).result.step_model
    assert sm is not None
    entries = priced_kernels(sm.step, sm.hw, "eager")
    ranked = top(entries, 100)
    assert sum(n for _, n, _, _ in ranked) == len(entries)
    assert [ms for _, _, ms, _ in ranked] == sorted((ms for _, _, ms, _ in ranked), reverse=True)
    qkv = [(n, first) for label, n, _, first in ranked if first.detail == "matmul" and not first.backward
           and "512x768x256" in first.shape]
    assert len(qkv) == 1 and qkv[0][0] == 2  # the two blocks' QKV projections, one row
    attention = [first for _, _, _, first in ranked if first.kind == "attention"]
    assert attention and all(e.detail.startswith("attention:") for e in attention)
