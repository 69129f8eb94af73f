"""Tensor parallelism does not divide the attention heads, so every GPU computes them all.

## What it does
Under ``--tp N``, finds the attention modules whose heads (or key/value heads, where
they are not fewer than N and replicated) N does not divide. Megatron-LM refuses such a
layout; a model kept as it is runs its attention whole on every GPU: the q/k/v/o
projections unsharded and every head's scores on each rank (the report lists these
layers as not sharded). It suggests a head count that N divides with the same hidden
size and an aligned head dimension (the one nearest the current), key/value heads with
it, and prices the sharded attention against the whole one on the step: the GEMMs
split N ways, and the all-reduce each way per block that the row-parallel output
projection then adds.

## Why is this bad?
The attention's GEMMs are a third of a transformer block's or more: left whole they
do N times a sharded layer's work on each GPU, every GPU of the group repeating the
others'. Estimated on an H100 (bf16, eager, 32 × 1024 tokens per GPU): GPT-2 XL's 25
heads at ``--tp 4`` run their attention GEMMs in 182 ms per step, 56 ms with 20 heads
of 80, and the step saves 51 ms (4.0%) after paying the 48 all-reduces each way that
sharding adds. Where those all-reduces cost more than the GEMMs save (a small model
at a high degree: OPT-125m at ``--tp 8``), nothing is reported.

## Example
```python
# GPT-2 XL, hidden 1600 = 25 heads x 64, with --tp 4
config = GPT2Config(n_embd=1600, n_head=25)
```

## Use instead
```python
config = GPT2Config(n_embd=1600, n_head=20)  # 20 x 80: 5 heads per GPU
```
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from shapelint.capture.tensor_parallel import features_axis, shard_one
from shapelint.check.rule_api import Example, RuleContext
from shapelint.hardware import Hardware
from shapelint.model.parallel import HeadsChange, ParallelChange, WholeAttention
from shapelint.model.records import Change, Gemm, Proposal, Severity, Suggestion
from shapelint.physics.attention import head_axis
from shapelint.physics.heads import sharded_heads
from shapelint.physics.reshape import set_dim

CODE = "SL602"
NAME = "heads-not-divisible"
SEVERITY: Severity = "error"

BAD = [
    Example("_rule.TinyAttention(768, 12)", "torch.randn(8, 1024, 768)", tp=8,
            expect={"parameter": "num_heads", "from": 12, "to": 16}, min_speedup=2.0),
    Example("_rule.TinyAttention(896, 14, 2)", "torch.randn(4, 1024, 896)", tp=4,
            expect={"parameter": "num_heads", "from": 14, "to": 16}, min_speedup=1.4),
]
GOOD = [
    Example("_rule.TinyAttention(768, 12)", "torch.randn(8, 1024, 768)", tp=4),
    # 8 key/value heads at --tp 16: each replicated on 2 GPUs, as Megatron-LM does
    Example("_rule.TinyAttention(4096, 32, 8)", "torch.randn(1, 1024, 4096)", tp=16),
]


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Proposal]:
    for whole in context.whole_attention:
        # the attention's own GEMMs first: the finding points at the attention module
        covered = (*(g for g in gemms if g.module == whole.module),
                   *(g for g in gemms if g.module in dict(whole.layers)))
        if not covered or whole.head_dim <= 0:
            continue
        option = sharded_heads(whole.heads, whole.kv_heads, whole.head_dim, context.tp,
                               hardware.align_elems(covered[0].dtype_bytes))
        if option is not None:
            yield Proposal(CODE, NAME, SEVERITY, covered, _change(whole, covered, option, context.tp))


def _change(whole: WholeAttention, covered: tuple[Gemm, ...], option: tuple[int, int, int], tp: int) -> Change:
    heads, kv, d = option
    proposed = HeadsChange(whole.heads, whole.kv_heads, whole.head_dim, heads, kv, d)
    styles = dict(whole.layers)
    old_kv, new_kv = whole.kv_heads * whole.head_dim, kv * d
    fused_old, fused_new = (whole.heads + 2 * whole.kv_heads) * whole.head_dim, (heads + 2 * kv) * d

    def after(g: Gemm) -> Gemm:
        if g.module == whole.module:  # the attention itself: heads / tp per GPU, each of d
            axis = head_axis(g, whole.head_dim)
            g = set_dim(g, axis, d) if axis is not None else g
            return replace(g, batch=max(1, g.batch * heads // whole.heads // tp))
        width = None
        # a column projection's out_features (never a token count of the same value)
        axis = features_axis(g) if styles[g.module] == "column" else None
        for old, new, replicated in ((fused_old, fused_new, (heads // tp + 2) * d), (old_kv, new_kv, d)):
            if old != heads * d and axis is not None and getattr(g, axis) == old:
                g = set_dim(g, axis, new)
                width = replicated if kv < tp else None
                break
        return shard_one(g, tp, style=styles[g.module], width=width)

    own = next((g for g in covered if g.module == whole.module), covered[0])
    param = own.param(whole.heads) or "num_attention_heads"
    kv_note = f" and {kv} key/value heads" if kv != heads else ""
    replicated = f" (each key/value head on {tp // kv} GPUs)" if kv < tp else ""
    return Change(
        Suggestion(param, whole.heads, heads),
        tuple(after(g) for g in covered),
        f"{whole.heads} attention heads and {whole.kv_heads} key/value heads do not divide by --tp {tp}, so each "
        f"GPU computes every head and the {len(styles)} projections whole ({len(covered)} GEMMs repeated on "
        f"{tp} GPUs; Megatron-LM refuses this layout): {heads} heads of {d}{kv_note} keep the hidden size "
        f"{whole.heads * whole.head_dim} and shard {heads // tp} per GPU{replicated}, for one more all-reduce "
        "each way per block",
        (*proposed.details(), ("tp", tp)),
        parallel=ParallelChange(whole.reduce_elems, whole.layers, heads=proposed),
    )


class TinyAttention(nn.Module):
    """Self-attention with Hugging Face's projection names, for the examples."""

    def __init__(self, hidden: int, num_heads: int, num_key_value_heads: int | None = None) -> None:
        super().__init__()
        self.num_heads, self.num_key_value_heads = num_heads, num_key_value_heads or num_heads
        self.head_dim = hidden // num_heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, self.num_key_value_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.num_key_value_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.num_key_value_heads != self.num_heads)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, -1))
