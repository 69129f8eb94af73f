"""Attention written as matmul → softmax → matmul materialises the score matrix.

## What it does
Finds attention computed by hand: a batched matmul reading a softmax's output
(``softmax(q @ kᵀ) @ v``) and the batched matmul that produced those ``[.., Tq, Tk]``
scores, in one module (also ``nn.MultiheadAttention`` with ``need_weights=True``, the
default). Before: the two GEMMs and every op the step recorded over the scores
(scaling, a mask or bias, autocast's fp32 casts around the softmax, dropout, and
their backward), each priced as the step prices it. After: the fused kernel's GEMMs
(scores on chip, QKᵀ recomputed in backward) on the kernel PyTorch picks for the call
the fix makes (cuDNN; the memory-efficient kernel where the bias needs its gradient),
with an additive mask where the chain masked and its dropout, at that kernel's rates,
the expanded gradient of a bias that needs one, and the copies PyTorch makes of a bias
whose rows the memory-efficient kernel cannot read unpadded (keys not a multiple of 8).

## Why is this bad?
Each pass over a ``B·H·Tq·Tk`` matrix costs memory bandwidth that grows with the
square of the sequence length, while the GEMMs around it are small (k = head
dim), so the whole attention is memory-bound. Measured on an H200 (torch 2.11,
bf16, forward + backward, GPU kernel time): B=8, H=12, T=1024, head_dim 64 takes
0.91 ms written by hand against 0.28 ms with ``F.scaled_dot_product_attention``
(3.2x); with a causal mask applied by ``masked_fill`` 1.91 ms against 0.22 ms with
``is_causal=True`` (8.5x); at T=2048 (B=4, H=16) 2.28 ms against 0.61 ms (3.7x),
masked 4.92 ms against 0.43 ms (11.4x). Under bf16 autocast the softmax runs in
fp32, with a cast each way: real models measured 3.5-15x on an H100 (2026-11-26).

## Example
```python
att = (q @ k.transpose(-2, -1)) * k.size(-1) ** -0.5
y = att.softmax(dim=-1) @ v
```

## Use instead
```python
y = F.scaled_dot_product_attention(q, k, v)  # add is_causal=True / attn_mask as needed
# nn.MultiheadAttention: call it with need_weights=False
# Hugging Face: the attn_implementation the model class supports (the finding names it)
```
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from shapelint.check.rule_api import Example, RuleContext
from shapelint.hardware import Hardware
from shapelint.model.records import Change, Gemm, Op, Proposal, Severity, Suggestion, Work
from shapelint.physics.attention import GEMM_PASSES_BACKWARD, GEMM_PASSES_FORWARD, HandWritten, find_hand_written, fused_added
from shapelint.physics.score_chain import (
    chain_kernels,
    chain_names,
    chain_needs,
    chain_traffic_bytes,
    score_chain,
    softmax_bytes_of,
)

CODE = "SL302"
NAME = "materialized-attention"
SEVERITY: Severity = "error"

_MIB = 1 << 20


class ManualAttention(nn.Module):
    """Self-attention as the BAD/GOOD examples write it (``fused`` picks SDPA)."""

    def __init__(self, dim: int, heads: int, fused: bool = False, dropout: float = 0.0) -> None:
        super().__init__()
        self.drop = nn.Dropout(dropout)  # on the probabilities (vit-pytorch, SpeechT5)
        self.qkv, self.proj, self.heads, self.fused = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim), heads, fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in self.qkv(x).split(c, dim=2))
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.drop.p if self.training else 0.0)
        else:
            att = (q @ k.transpose(-2, -1)) * (k.size(-1) ** -0.5)
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = self.drop(att) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


_FIX = {"parameter": "attention", "from": "matmul-softmax-matmul", "to": "F.scaled_dot_product_attention"}

BAD = [
    # nn.MultiheadAttention returns the averaged weights by default, so it runs unfused
    Example("nn.MultiheadAttention(512, 8, batch_first=True)",
            "(torch.randn(4, 1024, 512), torch.randn(4, 1024, 512), torch.randn(4, 1024, 512))",
            expect=_FIX, min_speedup=2.0),
    Example("_rule.ManualAttention(768, 12)", "torch.randn(8, 1024, 768)", expect=_FIX, min_speedup=2.0),
    Example("_rule.ManualAttention(768, 12, dropout=0.1)", "torch.randn(8, 1024, 768)", expect=_FIX, min_speedup=2.0),
    Example("_rule.ManualAttention(1024, 16)", "torch.randn(2, 2048, 1024)", dtype="fp16",
            training=False, expect=_FIX, min_speedup=2.0),
]
GOOD = [
    Example("_rule.ManualAttention(768, 12, fused=True)", "torch.randn(8, 1024, 768)"),
    Example("nn.MultiheadAttention(512, 8, batch_first=True)",
            "dict(query=torch.randn(4, 1024, 512), key=torch.randn(4, 1024, 512), "
            "value=torch.randn(4, 1024, 512), need_weights=False)"),
    # a softmax feeding a Linear is no attention
    Example("nn.Sequential(nn.Linear(512, 512), nn.Softmax(dim=-1), nn.Linear(512, 512))",
            "torch.randn(4096, 512)"),
]


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Proposal]:
    for atts in find_hand_written(gemms).values():
        yield _proposal(atts, context)


def _proposal(atts: list[HandWritten], context: RuleContext) -> Proposal:
    covered = tuple(g for att in atts for g in att.gemms)
    first = atts[0]
    training = any(att.backward for att in atts)
    score_bytes = sum(att.score_elems for att in atts) * first.pv.dtype_bytes
    # the ops the step runs over the scores as recorded (no op stream: the softmax's passes)
    chain = tuple(op for att in atts for op in score_chain(att, context.ops, context.gemm_markers))
    needs = chain_needs(chain, atts, context.ops, context.gemm_markers)
    chain_bytes = chain_traffic_bytes(atts, chain)
    passes = GEMM_PASSES_FORWARD + GEMM_PASSES_BACKWARD * training + round(chain_bytes / score_bytes)
    change = Change(
        Suggestion("attention", "matmul-softmax-matmul", "F.scaled_dot_product_attention"),
        tuple(g for att in atts for g in att.fused(needs)), _message(first, score_bytes, chain, training),
        (("seq_q", first.tq), ("seq_k", first.tk), ("head_dim", first.qk.k), ("score_bytes", score_bytes),
         ("score_passes", passes), ("traffic_bytes", score_bytes * passes),
         ("softmax_bytes", softmax_bytes_of(atts)), ("chain_bytes", chain_bytes), ("score_kernels", chain_kernels(chain))),
        added=fused_added(atts, needs),
        fuses=chain,
    )
    # now: the GEMMs plus the ops over the scores no GEMM record carries; the fix is in
    # the forward code, so point at the line that ran the QKᵀ matmul
    now = Work(covered, ops=chain) if chain else Work(covered, chain_bytes)
    return Proposal(CODE, NAME, SEVERITY, covered, change, now=now, source=first.qk.source or first.qk.defined_at)


def _message(first: HandWritten, score_bytes: int, chain: Sequence[Op], training: bool) -> str:
    kernels = f"the {chain_names(chain)} kernels{' (and their backward)' * training}" if chain else "the softmax"
    mha = "; call nn.MultiheadAttention with need_weights=False" if first.qk.module_type == "MultiheadAttention" else ""
    return (f"attention written as matmul → softmax → matmul materialises the {first.tq}x{first.tk} score matrix "
            f"({first.pv.batch} batch·heads, {score_bytes / _MIB:.0f} MiB), which its GEMMs and {kernels} stream "
            f"through memory every step; F.scaled_dot_product_attention keeps it on chip{mha}")
