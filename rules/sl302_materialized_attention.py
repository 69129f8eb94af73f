"""Attention written as matmul → softmax → matmul materialises the score matrix.

## What it does
Finds attention computed by hand: a batched matmul whose operand came out of a
softmax (``softmax(q @ kᵀ) @ v``) together with the batched matmul before it that
produced the ``[.., Tq, Tk]`` scores, in the same module (``nn.MultiheadAttention``
with ``need_weights=True``, the default, runs this way too). It reports, per
module, the memory traffic of the score matrix that a fused
``F.scaled_dot_product_attention`` kernel never writes: the QKᵀ GEMM writes S, the
softmax reads S and writes P, the PV GEMM reads P; backward writes dP, the softmax
backward reads P and dP and writes dS, and two GEMMs read dS. The estimate
compares those GEMMs plus the softmax passes (at the profile's memory bandwidth)
with the fused kernel's GEMMs (the scores stay on chip; the backward recomputes
QKᵀ once).

## Why is this bad?
Each pass over a ``B·H·Tq·Tk`` matrix costs memory bandwidth that grows with the
square of the sequence length, while the GEMMs around it are small (k = head
dim), so the whole attention is memory-bound. Measured on an H200 (torch 2.11,
bf16, forward + backward, GPU kernel time): B=8, H=12, T=1024, head_dim 64 takes
0.91 ms written by hand against 0.28 ms with ``F.scaled_dot_product_attention``
(3.2x); with a causal mask applied by ``masked_fill`` 1.91 ms against 0.22 ms with
``is_causal=True`` (8.5x); at T=2048 (B=4, H=16) 2.28 ms against 0.61 ms (3.7x),
masked 4.92 ms against 0.43 ms (11.4x). The estimate counts the softmax passes
only (not scaling, masking or dropout), so it sits between the two. The scores
also cost ``B·H·T²`` elements of activation memory per layer.

## Example
```python
att = (q @ k.transpose(-2, -1)) * k.size(-1) ** -0.5
y = att.softmax(dim=-1) @ v
```

## Use instead
```python
y = F.scaled_dot_product_attention(q, k, v)  # add is_causal=True / attn_mask as needed
# nn.MultiheadAttention: call it with need_weights=False
```
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from shapelint.estimate import total_ms
from shapelint.hardware import Hardware
from shapelint.records import Finding, Gemm, Operand, Suggestion
from shapelint.rule_api import Example, RuleContext, by_module, graded, make_finding

CODE = "SL302"
NAME = "materialized-attention"
SEVERITY = "error"

#: below this estimated speedup a finding is a warning, not an error
ERROR_SPEEDUP = 1.25
#: aten ops a hand-written attention's two matmuls run as (batched matmul)
BATCHED_OPS = ("bmm", "baddbmm")
#: passes over the score matrix that no GEMM record carries, forward: the softmax
#: reads S and writes P (scaling, masking and dropout add more; not counted)
SOFTMAX_PASSES_FORWARD = 2
#: ... and backward: the softmax backward reads P and dP and writes dS
SOFTMAX_PASSES_BACKWARD = 3
#: passes over the score matrix that the unfused GEMMs themselves make: forward
#: QKᵀ writes S, PV reads P; backward writes dP, reads P (dV) and dS twice (dQ, dK)
GEMM_PASSES_FORWARD = 2
GEMM_PASSES_BACKWARD = 4

_MIB = 1 << 20


class ManualAttention(nn.Module):
    """Self-attention as the BAD/GOOD examples write it (``fused`` picks SDPA)."""

    def __init__(self, dim: int, heads: int, fused: bool = False) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.heads = heads
        self.fused = fused

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in self.qkv(x).split(c, dim=2))
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (k.size(-1) ** -0.5)
            mask = torch.ones(t, t, dtype=torch.bool).tril()
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = att @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


_FIX = {"parameter": "attention", "from": "matmul-softmax-matmul", "to": "F.scaled_dot_product_attention"}

BAD = [
    # nn.MultiheadAttention returns the averaged weights by default, so it runs unfused
    Example("nn.MultiheadAttention(512, 8, batch_first=True)",
            "(torch.randn(4, 1024, 512), torch.randn(4, 1024, 512), torch.randn(4, 1024, 512))",
            expect=_FIX, min_speedup=2.0),
    Example("_rule.ManualAttention(768, 12)", "torch.randn(8, 1024, 768)", expect=_FIX, min_speedup=2.0),
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


def softmax_traffic_ms(score_elems: int, dtype_bytes: int, training: bool, hw: Hardware) -> float:
    """Time of the softmax passes over a materialised score matrix (forward, and
    backward when training), streaming at the profile's copy bandwidth."""
    passes = SOFTMAX_PASSES_FORWARD + (SOFTMAX_PASSES_BACKWARD if training else 0)
    return 1e3 * score_elems * dtype_bytes * passes / hw.bandwidth


def _is_scores(op: Operand, tq: int, tk: int) -> bool:
    return (op.rows, op.cols) in ((tq, tk), (tk, tq))


def _on_chip(op: Operand) -> Operand:
    return Operand(op.rows, op.cols, op.cols, in_memory=False)


def fused(g: Gemm, tq: int, tk: int, op: str) -> Gemm:
    """``g`` as the fused attention kernel runs it (named ``op``): score-shaped
    operands stay on chip; a GEMM that produces scores is ``attn_scores``, one that
    reads them ``attn_values``."""
    a = _on_chip(g.a) if _is_scores(g.a, tq, tk) else g.a
    b = _on_chip(g.b) if _is_scores(g.b, tq, tk) else g.b
    out = _on_chip(g.out) if _is_scores(g.out, tq, tk) else g.out
    role = "attn_scores" if not out.in_memory else "attn_values"
    return replace(g, op=op, a=a, b=b, out=out, role=role, extra=(("is_causal", False),))


class _Attention:
    """One hand-written attention: its QKᵀ and PV GEMMs and their backward GEMMs."""

    def __init__(self, qk: Gemm, pv: Gemm) -> None:
        self.qk, self.pv = qk, pv
        self.backward: list[Gemm] = []

    @property
    def tq(self) -> int:
        return self.pv.m

    @property
    def tk(self) -> int:
        return self.pv.k

    def dims(self) -> tuple[list[int], list[int]]:
        return sorted((self.tq, self.tk, self.qk.k)), sorted((self.tq, self.tk, self.pv.n))

    @property
    def gemms(self) -> list[Gemm]:
        return [self.qk, self.pv, *self.backward]

    def recompute_slot(self) -> int | None:
        """Position (among the backward GEMMs) of the one producing dP: the fused
        backward recomputes S = QKᵀ there, from the same tiles."""
        return next((i for i, g in enumerate(self.backward) if _is_scores(g.out, self.tq, self.tk)), None)

    def after(self) -> list[Gemm]:
        """The fused kernel's GEMMs, one per recorded GEMM: the forward QKᵀ with S on
        chip, PV reading P on chip, and each backward GEMM with dS/dP/P on chip. They
        carry the names the capture gives SDPA's GEMMs (``sdpa.qk`` and
        ``sdpa.qk_recompute`` stand for the whole forward / backward kernel)."""
        slot = self.recompute_slot()
        qk = fused(self.qk, self.tq, self.tk, "sdpa.qk")
        pv = fused(self.pv, self.tq, self.tk, "sdpa.pv")
        return [qk, pv, *(fused(g, self.tq, self.tk, "sdpa.qk_recompute" if i == slot else "sdpa.bwd")
                          for i, g in enumerate(self.backward))]


def find_attention(gemms: Sequence[Gemm]) -> dict[str, list[_Attention]]:
    """Hand-written attentions by module: each PV GEMM fed by a softmax, paired with
    the closest earlier batched GEMM of its module producing its [Tq, Tk] operand."""
    out: dict[str, list[_Attention]] = {}
    for module, gs in by_module(gemms).items():
        used: set[int] = set()
        found: list[_Attention] = []
        for pv in gs:
            if pv.role != "after_softmax" or pv.op not in BATCHED_OPS or pv.phase not in ("forward", "recompute"):
                continue
            partners = [g for g in gs if g.index < pv.index and g.index not in used and g.op in BATCHED_OPS
                        and g.phase == pv.phase and g.batch == pv.batch and (g.m, g.n) == (pv.m, pv.k)]
            if not partners:
                continue
            att = _Attention(partners[-1], pv)
            used.update((att.qk.index, pv.index))
            found.append(att)
        for att in found:
            shapes = att.dims()
            for g in gs:
                if len(att.backward) == 4:
                    break
                if (g.phase == "grad_input" and g.op in BATCHED_OPS and g.index not in used
                        and g.batch == att.pv.batch and sorted((g.m, g.n, g.k)) in shapes):
                    att.backward.append(g)
                    used.add(g.index)
        if found:
            out[module] = found
    return out


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Finding]:
    for atts in find_attention(gemms).values():
        f = _finding(atts, hardware)
        if f.est_speedup is not None and 1 - 1 / f.est_speedup >= context.min_loss:
            yield f


def _finding(atts: list[_Attention], hw: Hardware) -> Finding:
    covered = [g for att in atts for g in att.gemms]
    after = [g for att in atts for g in att.after()]
    first = atts[0]
    dtype_bytes = first.pv.dtype_bytes
    score_elems = sum(att.pv.batch * att.tq * att.tk for att in atts)
    training = any(att.backward for att in atts)
    softmax_ms = sum(softmax_traffic_ms(att.pv.batch * att.tq * att.tk, dtype_bytes, bool(att.backward), hw)
                     for att in atts)
    passes = (SOFTMAX_PASSES_FORWARD + GEMM_PASSES_FORWARD
              + (SOFTMAX_PASSES_BACKWARD + GEMM_PASSES_BACKWARD if training else 0))
    score_bytes = score_elems * dtype_bytes
    f = make_finding(
        CODE, NAME, SEVERITY, covered, after, hw,
        f"attention written as matmul → softmax → matmul materialises the {first.tq}x{first.tk} "
        f"score matrix ({first.pv.batch} batch·heads, {score_bytes / _MIB:.0f} MiB, about {passes} passes "
        f"through memory per step); F.scaled_dot_product_attention keeps it on chip (nn.MultiheadAttention: "
        f"need_weights=False; Hugging Face: attn_implementation=\"sdpa\")",
        Suggestion("attention", "matmul-softmax-matmul", "F.scaled_dot_product_attention"),
        {"seq_q": first.tq, "seq_k": first.tk, "head_dim": first.qk.k, "score_bytes": score_bytes,
         "score_passes": passes, "traffic_bytes": score_bytes * passes, "softmax_ms": softmax_ms},
    )
    # before: the GEMMs plus the softmax passes no GEMM record carries; after: the fused
    # GEMMs plus the backward's recompute of QKᵀ (charged to the GEMM producing dP)
    gemm_after = list(f.detail("gemm_ms_after", ()))  # type: ignore[call-overload]
    pos = 0
    for att in atts:
        slot = att.recompute_slot()
        if slot is not None:
            gemm_after[pos + 2 + slot] += total_ms([att.after()[0]], hw)
        pos += len(att.gemms)
    est = (f.est_ms or 0.0) + softmax_ms
    est_after = sum(gemm_after)
    details = dict(f.details)
    details["gemm_ms_after"] = tuple(gemm_after)
    # the fix is in the forward code: point at the line that ran the QKᵀ matmul
    f = replace(f, est_ms=est, est_ms_after=est_after, est_speedup=est / est_after if est_after else None,
                details=tuple(details.items()), source=first.qk.source or f.source)
    return graded(f, ERROR_SPEEDUP)
