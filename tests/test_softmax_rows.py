"""The capture records each softmax's row (the dimension it normalises), which decides
the kernel PyTorch runs it with on a GPU: a warp per row up to 1024 elements and 4 KiB,
a block per row above (SL302's score chain at T = 1023 ran the warp kernel at 0.84 of
the bandwidth forward and 0.91 backward on an H100: the pointwise rate, where the
block kernel runs at the row reductions')."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from shapelint.physics.kernels import warp_softmax
from shapelint.pipeline.run import trace


class Scores(nn.Module):
    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return (q @ q.transpose(-1, -2)).softmax(-1) @ q


@pytest.mark.parametrize("t", [1023, 64])
def test_the_softmax_row_is_recorded_forward_and_backward(t: int) -> None:
    cap, _ = trace(lambda: (Scores(), torch.randn(2, 4, t, 32, requires_grad=True)), precision="bf16")
    rows = {(op.name, op.backward): op.row for op in cap.ops if "softmax" in op.name}
    assert rows == {("_softmax", False): t, ("_softmax_backward_data", True): t}
    assert all(op.row == 0 for op in cap.ops if "softmax" not in op.name)


def test_log_softmax_over_a_vocabulary_records_its_row() -> None:
    cap, _ = trace(lambda: (nn.LogSoftmax(-1), torch.randn(8, 50257, requires_grad=True)), precision="fp32")
    (fwd,) = [op for op in cap.ops if op.name == "_log_softmax"]
    assert fwd.row == 50257 and not warp_softmax(fwd.name, fwd.row, fwd.element_bytes)


@pytest.mark.parametrize(("row", "element_bytes", "warp"), [
    (1023, 4, True), (1024, 4, True), (1025, 4, False), (512, 2, True), (4096, 2, False), (0, 4, False),
    (1024, 8, False)])  # 8 KiB rows: over the warp kernel's 4 KiB
def test_warp_softmax_is_pytorchs_dispatch_rule(row: int, element_bytes: int, warp: bool) -> None:
    assert warp_softmax("_softmax", row, element_bytes) is warp
    assert not warp_softmax("add", row, element_bytes)


def test_a_softmax_over_an_outer_dimension_is_not_a_warp_row() -> None:
    """PyTorch's warp and block kernels need contiguous rows (``inner_size == 1``); a
    softmax over C of [N, C, H, W] logits runs its spatial kernel (row 0: priced as a row
    reduction)."""
    cap, _ = trace(lambda: (nn.Softmax(1), torch.randn(2, 21, 16, 16, requires_grad=True)), precision="fp32")
    assert {op.row for op in cap.ops if "softmax" in op.name} == {0}
    cap, _ = trace(lambda: (nn.Softmax(1), torch.randn(2, 21, 1, 1, requires_grad=True)), precision="fp32")
    assert {op.row for op in cap.ops if "softmax" in op.name} == {21}  # trailing size-1 dims: rows still contiguous


def test_a_warp_softmax_is_priced_at_the_pointwise_rate_forward_and_backward() -> None:
    """One streaming pass at ``elementwise_efficiency``; rows past the warp kernel take
    the block kernel's ``reduction_efficiency``."""
    from shapelint.hardware import resolve
    from shapelint.price.kernels import op_ms

    h100 = resolve("h100")
    for t in (1024, 2048):
        cap, _ = trace(lambda: (Scores(), torch.randn(2, 4, t, 32, requires_grad=True)), precision="fp32")  # noqa: B023
        for op in (op for op in cap.ops if "softmax" in op.name):
            eff = h100.step.elementwise_efficiency if t == 1024 else h100.step.reduction_efficiency
            expected = max(op.bytes / (h100.memory_bandwidth_gbps * 1e9 * eff), h100.step.min_kernel_us * 1e-6) * 1e3
            assert op_ms(op, h100) == pytest.approx(expected), (op.name, t)
