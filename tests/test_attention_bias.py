"""The bias padding PyTorch runs around the memory-efficient SDPA kernel, and the rate of
a batched GEMM whose contraction is misaligned: the two things SL302 mispriced on
WavLM's and SpeechT5's encoders (T = 1023), against the kernels an H100 ran
(docs/data/attention_finding_profile_h100_2026-11-26.json)."""

from __future__ import annotations

import pytest
import torch
from _rules import run_rule
from shapelint.rules import sl302_materialized_attention as sl302
from torch import nn

from shapelint.check.rule_api import RuleContext
from shapelint.hardware import resolve
from shapelint.model.records import Gemm, Operand
from shapelint.physics.attention_bias import EFFICIENT_BIAS_ALIGN, needs_padding, padding_ops
from shapelint.pipeline.run import trace
from shapelint.price.gemm import gemm_ms
from shapelint.price.kernels import op_ms

H100 = resolve("h100")
#: B·H, the bias of the scores' shape of the profiled layers (B 8, H 12)
BH = 96


def test_a_bias_is_padded_only_where_its_rows_are_not_a_multiple_of_8() -> None:
    assert EFFICIENT_BIAS_ALIGN == 8
    assert needs_padding(1023) and needs_padding(1500) and not needs_padding(1024)
    assert padding_ops(BH * 1024 * 1024, 1024, 2, grad=True, training=True) == ()


def test_the_padding_ops_are_a_fill_and_a_copy_forward_and_twice_more_backward() -> None:
    elems = BH * 1023 * 1023
    const = padding_ops(elems, 1023, 2, grad=False, training=True)
    assert [(op.name, op.backward) for op in const] == [("fill_", False), ("copy_", False)]
    grad = padding_ops(elems, 1023, 2, grad=True, training=True)
    assert sorted((op.name, op.backward) for op in grad) == [
        ("copy_", False), ("copy_", True), ("copy_", True), ("fill_", False), ("fill_", True)]
    fill, copy = const
    assert fill.bytes == BH * 1023 * 1024 * 2  # the padded tensor, written
    assert copy.bytes == 2 * elems * 2 and copy.strided  # the bias read, and written into the padded rows
    # inference, or a bias that needs no gradient: the forward's two only
    assert len(padding_ops(elems, 1023, 2, grad=True, training=False)) == 2


@pytest.mark.parametrize(("t", "grad", "measured_us"), [
    (1023, False, 248.6 + 60.9),  # one copy and one fill: the const-bias case's extra kernels
    (1023, True, 743.2 + 121.3),  # three copies, two fills
    (1500, True, 1585.3 + 261.8),
])
def test_the_padding_is_priced_as_the_h100_ran_it(t: int, grad: bool, measured_us: float) -> None:
    """Strided copies at the step's strided-copy rate (measured 0.48 of the copy
    bandwidth), fills at the elementwise rate: within 10% of the kernels' CUDA time."""
    ops = padding_ops(BH * t * t, t, 2, grad=grad, training=True)
    est_us = 1e3 * sum(op_ms(op, H100) for op in ops)
    assert est_us == pytest.approx(measured_us, rel=0.10)


def _bmm(m: int, n: int, k: int, batch: int = BH) -> Gemm:
    return Gemm(index=0, op="bmm", phase="forward", m=m, n=n, k=k, batch=batch, dtype="bf16", module="attn",
                module_type="Attention",
                a=Operand(m, k, k, batch_stride=m * k), b=Operand(k, n, n, batch_stride=k * n),
                out=Operand(m, n, n, batch_stride=m * n))


def test_a_batched_gemm_with_a_misaligned_contraction_keeps_its_measured_rate() -> None:
    """PV of a 1023-key attention (96 x 1023 x 64, K = 1023, 2-byte rows): cuBLAS's align1
    CUTLASS kernels took 174-258 us on an H100 (215 us on average over the four such GEMMs
    of a layer) against 80-86 us at K = 1024; priced at 0.40 of the memory roof (the
    input table's 0.18 priced it at 502 us)."""
    misaligned, aligned = gemm_ms(_bmm(1023, 64, 1023), H100), gemm_ms(_bmm(1024, 64, 1024), H100)
    assert 0.174 < misaligned < 0.258
    assert misaligned / aligned == pytest.approx(1 / H100.batched_misaligned_k_efficiency, rel=0.02)


class LearnedBias(nn.Module):
    """T5-like attention over ``t`` keys: a learned [1, H, T, T] bias that needs its gradient."""

    def __init__(self, t: int, heads: int = 4, dim: int = 256) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1, heads, t, t))
        self.qkv, self.heads = nn.Linear(dim, dim), heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q = k = v = self.qkv(x).view(b, t, self.heads, c // self.heads).transpose(1, 2)
        return ((q @ k.transpose(-2, -1) + self.bias).softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)


def _proposal(t: int):  # type: ignore[no-untyped-def]
    cap, _ = trace(lambda: (LearnedBias(t), torch.randn(2, t, 256)), precision="bf16")
    ctx = RuleContext(precision="bf16", training=True, ops=tuple(cap.ops))
    (p,) = sl302.check(cap.gemms, H100, ctx)
    (f,) = run_rule(sl302, cap.gemms, H100, ctx)
    return p, f


def test_sl302_adds_the_padding_where_the_fix_runs_the_memory_efficient_kernel_on_odd_keys() -> None:
    p, f = _proposal(1023)
    assert {dict(g.extra)["kernel"] for g in f.after} == {"efficient"}
    pads = [op for op in p.change.added.ops if op.name != "grad_bias"]
    assert sorted(op.name for op in pads) == ["copy_", "copy_", "copy_", "fill_", "fill_"]
    assert all(op.numel == 2 * 4 * 1023 * 1023 for op in pads)  # the fix's bias has the scores' shape
    p, _ = _proposal(1024)
    assert [op.name for op in p.change.added.ops] == ["grad_bias"]
