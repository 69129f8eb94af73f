"""The fused attention forward's own grid: one thread block of 128 query rows per
batch·head, the keys a loop inside it (cuDNN's sm90 fprop, as flash's). A call with few
batch·heads and queries over many keys fills few SMs: perceiver-pytorch's cross-attention
(8 batch·heads of 256 latents over 50176 pixels, 16 blocks on 132 SMs) ran its forward
in 0.44 ms on an H100 (benchmarks/attention_finding_profile.py --sweep-grid, 2026-11-26),
priced 0.09 ms as if it filled the GPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from shapelint.hardware import resolve
from shapelint.model.records import Gemm
from shapelint.physics.attention import FUSED_FORWARD_ROWS, forward_blocks
from shapelint.pipeline.run import trace
from shapelint.price.gemm import fused_forward_wave, gemm_ms

H100 = resolve("h100")


class Call(nn.Module):
    """One SDPA call on [1, BH, T, d] tensors that need their gradients."""

    def __init__(self, bh: int, tq: int, tk: int, d: int = 64) -> None:
        super().__init__()
        self.q = nn.Parameter(torch.randn(1, bh, tq, d))
        self.k, self.v = nn.Parameter(torch.randn(1, bh, tk, d)), nn.Parameter(torch.randn(1, bh, tk, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(self.q, self.k, self.v).sum() + x.sum()


def records(bh: int, tq: int, tk: int) -> list[Gemm]:
    cap, _ = trace(lambda: (Call(bh, tq, tk), torch.randn(2)), precision="bf16")
    return [g for g in cap.gemms if g.op.startswith("sdpa.")]


def forward_us(bh: int, tq: int, tk: int) -> float:
    return 1e3 * sum(gemm_ms(g, H100) for g in records(bh, tq, tk) if g.phase == "forward")


def test_the_grid_is_batch_heads_by_query_blocks() -> None:
    qk = next(g for g in records(8, 256, 50176) if g.op == "sdpa.qk" and g.phase == "forward")
    assert FUSED_FORWARD_ROWS == 128 and forward_blocks(qk) == 8 * 2
    # one partial wave: 16 of 132 SMs, each block at most 1.3x faster alone
    assert H100.step.fused_forward_solo_speedup == 1.3
    assert fused_forward_wave(qk, H100) == pytest.approx(16 / 132 * 1.3)


@pytest.mark.parametrize(("bh", "tq", "tk", "measured_us"), [
    (8, 256, 50176, 440.0),  # perceiver's cross-attention, 16 blocks
    (8, 128, 50176, 430.8),  # 8 blocks: the same time (one block's loop over the keys)
    (8, 256, 12544, 110.2),
    (16, 256, 12544, 110.6),
    (32, 256, 12544, 114.5),  # 64 blocks
])
def test_a_grid_of_one_partial_wave_takes_one_blocks_time(bh: int, tq: int, tk: int, measured_us: float) -> None:
    """H100, cuDNN fprop (torch 2.11), forward kernel time: within 5%, where pricing the
    call as if it filled the GPU had been 4-12x fast."""
    assert forward_us(bh, tq, tk) == pytest.approx(measured_us, rel=0.05)


def test_a_full_grid_keeps_the_fitted_rate() -> None:
    """Many waves: the last one's share is small (4096 blocks: 31 waves and 4 blocks)."""
    qk = next(g for g in records(512, 1024, 1024) if g.op == "sdpa.qk" and g.phase == "forward")
    assert forward_blocks(qk) == 4096
    assert fused_forward_wave(qk, H100) == pytest.approx((4096 / 132) / (31 + 1 / 1.3))
    assert forward_us(512, 1024, 1024) == pytest.approx(330.3, rel=0.15)  # measured 330.3 us


def test_backward_records_keep_the_output_tiles() -> None:
    """The backward kernel's grid runs over the keys (not mirrored): its records and SL302's
    QKᵀ recompute, which runs in it, keep cuBLAS's quantization."""
    back = [g for g in records(8, 256, 50176) if g.phase != "forward"]
    assert back and all(gemm_ms(g, H100) < 0.06 for g in back)


class CrossAttention(nn.Module):
    """perceiver-pytorch 0.11's cross-attention: 256 latents, one head of 64, over the
    224² pixels of each of 8 images (q, k and v from Linears; scaled scores, softmax)."""

    def __init__(self) -> None:
        super().__init__()
        self.latents = nn.Parameter(torch.randn(256, 64))
        self.to_q, self.to_kv = nn.Linear(64, 64, bias=False), nn.Linear(29, 128, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.to_q(self.latents).expand(x.shape[0], -1, -1)
        k, v = self.to_kv(x).chunk(2, dim=-1)
        return ((q @ k.transpose(1, 2)) * 64 ** -0.5).softmax(-1) @ v


def test_sl302_prices_the_fix_on_the_forward_grid() -> None:
    """Perceiver's cross-attention fixed: the forward on 16 blocks (0.44 ms), the backward
    and its QKᵀ recompute on the backward kernel's grid (0.20 ms): 5.12x, measured 5.51x
    (H100, 2026-11-26; 11.55x before, when the forward was priced as filling the GPU)."""
    from _rules import run_rule
    from shapelint.rules import sl302_materialized_attention as sl302

    from shapelint.check.rule_api import RuleContext

    cap, _ = trace(lambda: (CrossAttention(), torch.randn(8, 224 * 224, 29)), precision="bf16")
    (f,) = run_rule(sl302, cap.gemms, H100, RuleContext(precision="bf16", training=True, ops=tuple(cap.ops)))
    forward = [g for g in f.after if g.phase == "forward"]
    assert [g.op for g in forward] == ["sdpa.qk", "sdpa.pv"]
    assert 1e3 * sum(gemm_ms(g, H100) for g in forward) == pytest.approx(444.0, rel=0.01)
    assert f.est_ms_after == pytest.approx(0.644, rel=0.01)
    assert f.est_speedup == pytest.approx(5.12, rel=0.02)
