"""Dropout is recorded as the GPU runs it: ATen's fused native_dropout (one kernel each
way, a one-byte mask), not the CPU's bernoulli_ / div_ / mul decomposition."""

from __future__ import annotations

import torch
from torch import nn

from shapelint.pipeline.run import trace


def ops_of(model: nn.Module, x: torch.Tensor, training: bool = True) -> list:
    cap, _ = trace(lambda: (model, x), precision="fp32", training=training)
    return [op for op in cap.ops if op.kind != "gemm"]


def test_dropout_is_one_fused_kernel_each_way() -> None:
    ops = ops_of(nn.Sequential(nn.Linear(256, 256), nn.Dropout(0.1)), torch.randn(64, 256))
    names = [(op.name, op.backward) for op in ops]
    assert ("native_dropout", False) in names and ("native_dropout_backward", True) in names
    assert not any(n in ("bernoulli_", "div_") for n, _ in names)
    (drop,) = [op for op in ops if op.name == "native_dropout"]
    # reads the fp32 input, writes the fp32 output and a one-byte mask
    assert drop.bytes == 64 * 256 * (4 + 4 + 1)
    (back,) = [op for op in ops if op.name == "native_dropout_backward"]
    assert back.bytes == 64 * 256 * (4 + 1 + 4)


def test_dropout_off_records_nothing_and_the_swap_is_undone() -> None:
    original = torch.nn.functional.dropout
    model = nn.Sequential(nn.Linear(256, 256), nn.Dropout(0.0))
    assert not [op for op in ops_of(model, torch.randn(64, 256)) if "dropout" in op.name]
    assert torch.nn.functional.dropout is original
