"""The attention head dimension keeps PyTorch off its fastest fused attention kernels.

## What it does
Checks every fused attention (``F.scaled_dot_product_attention``: the GEMMs with
roles ``attn_scores``/``attn_values``) for a head dimension that is not a multiple
of 16 bytes (8 elements in bf16/fp16) or, in bf16/fp16, above 256. It suggests the
next multiple of 8 (the pricer picks the one as fast as any larger) or, above
256, splitting each head, and names the way to keep the hidden size instead
(more or fewer heads).

## Why is this bad?
PyTorch picks the attention kernel from the shapes. cuDNN's attention (preferred
on Hopper) and the memory-efficient kernel need ``head_dim % 8 == 0``; the flash
kernel pads the head dimension with a copy and runs a generic path; with an
explicit ``attn_mask`` the flash kernel is out and PyTorch falls back to the math
kernel, which materialises the ``B·H·Tq·Tk`` score matrix in fp32. Above 256 no
flash/cuDNN kernel exists and the memory-efficient one is slow. Measured on an
H200 (torch 2.11, bf16, B=8, H=16, T=2048, forward + backward, GPU kernel time):
head_dim 100 takes 4.29 ms against 1.89 ms for 104 (2.3x); with a float
``attn_mask`` 26.4 ms against 3.47 ms (7.6x); head_dim 264 34.1 ms against 4.84
ms for 256 (7.0x); head_dim 320 with 4 heads (B=8, T=1024) 3.97 ms against 0.65
ms for 160 with 8 heads (6.1x). A plain bf16 bmm of the QKᵀ shape runs 2.8x
slower at head_dim 100 than 104 (shared/data/gemm_truth.json, rows attn_qk).

The estimate models a misaligned head dimension with the profile's
``attention_misaligned_efficiency`` (0.44 of the fused rate on Hopper, from the
head_dim 100 against 104 measurement above: 2.24x estimated for 100 → 104 against
2.27x and 2.45x measured without a mask) and, above 256, the unfused math kernel;
the details also give the math-kernel estimate (``math_kernel_ms``) that applies
when an ``attn_mask`` is passed (measured 7.6x).

## Example
```python
nn.MultiheadAttention(800, 8)  # head_dim 100
```

## Use instead
```python
nn.MultiheadAttention(832, 8)  # head_dim 104
nn.MultiheadAttention(800, 10)  # or keep 800 wide: head_dim 80
```
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from math import ceil

from shapelint.check.rule_api import Example, RuleContext, by_module
from shapelint.hardware import Hardware
from shapelint.model.records import Change, Dim, Gemm, Proposal, Severity, SizeSearch, Suggestion, Work
from shapelint.physics import attention as att
from shapelint.physics.reshape import resize

CODE = "SL301"
NAME = "attention-head-dim"
SEVERITY: Severity = "error"

#: search for the padded head dimension up to the next multiple of this many elements
SEARCH_SPAN = 64

_MHA = "nn.MultiheadAttention({}, {}, batch_first=True)"
_QKV = ("dict(query=torch.randn({b}, {t}, {d}), key=torch.randn({b}, {t}, {d}), "
        "value=torch.randn({b}, {t}, {d}), need_weights=False)")

BAD = [
    Example(_MHA.format(800, 8), _QKV.format(b=8, t=1024, d=800),
            expect={"parameter": "head_dim", "from": 100, "to": 104}, min_speedup=1.5),
    Example(_MHA.format(1200, 12), _QKV.format(b=4, t=2048, d=1200), dtype="fp16",
            expect={"parameter": "head_dim", "from": 100, "to": 104}, min_speedup=1.5),
    # above 256: no flash / cuDNN kernel; split each head in two
    Example(_MHA.format(1280, 4), _QKV.format(b=8, t=1024, d=1280),
            expect={"parameter": "num_heads", "from": 4, "to": 8}, min_speedup=2.0),
]
GOOD = [
    Example(_MHA.format(832, 8), _QKV.format(b=8, t=1024, d=832)),
    Example(_MHA.format(1024, 8), _QKV.format(b=8, t=1024, d=1024)),
    # unfused attention (need_weights=True) is SL302's, not this rule's
    Example(_MHA.format(800, 8), "(torch.randn(8, 1024, 800), torch.randn(8, 1024, 800), torch.randn(8, 1024, 800))"),
]


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Proposal]:
    for gs in by_module(gemms).values():
        calls: dict[tuple[int, int, str], list[Gemm]] = {}
        for g in gs:
            if att.is_fused(g) and hardware.uses_tensor_cores(g.dtype):
                calls.setdefault((g.batch, att.head_dim(g), g.dtype), []).append(g)
        for (_, d, _), call in calls.items():
            align = hardware.align_elems(call[0].dtype_bytes)
            if d > att.MAX_FUSED_HEAD_DIM and call[0].dtype_bytes == att.FLASH_DTYPE_BYTES:
                yield _too_large(tuple(call), d, align)
            elif d % align:
                yield _misaligned(tuple(call), d, align)


def _misaligned(call: tuple[Gemm, ...], d: int, align: int) -> Proposal:
    g = call[0]
    # the records show the head dimension as given; the kernels pad it (per-head rows of d)
    now = tuple(att.per_head(h, d) for h in call)
    named = att.param_of(g, att.HEAD_DIM_PARAMS, d)
    param = named[0] if named else (g.param(d) or "head_dim")
    heads = att.param_of(g, att.HEADS_PARAMS)
    alt = att.keep_width(d, heads[1], align) if heads else None
    alt_text = (f"; to keep the hidden size {heads[1] * d}, use {heads[0]} = {alt[0]} (head_dim {alt[1]})"
                if heads and alt else "")

    def at(sizes: tuple[int, ...]) -> Change:
        (to,) = sizes
        return Change(
            Suggestion(param, d, to), tuple(resize(h, d, to) for h in now),
            f"head_dim = {d} is not a multiple of {align}: PyTorch's cuDNN / memory-efficient attention "
            f"kernels refuse it, flash pads it, and with an attn_mask the math kernel runs "
            f"(scores materialised in fp32){alt_text}",
            (("head_dim", d), ("align_elems", align), ("seq_q", g.m), ("seq_k", g.n),
             ("alt_num_heads", alt[0] if alt else None), ("alt_head_dim", alt[1] if alt else None)),
        )

    return Proposal(CODE, NAME, SEVERITY, call, SizeSearch((Dim(d, align, SEARCH_SPAN),), at),
                    now=Work(now), references=(("math_kernel", att.math_kernel(call)),))


def _too_large(call: tuple[Gemm, ...], d: int, align: int) -> Proposal:
    g = call[0]
    split = ceil(d / att.MAX_FUSED_HEAD_DIM)
    heads = att.param_of(g, att.HEADS_PARAMS)
    named = att.param_of(g, att.HEAD_DIM_PARAMS, d)

    def at(sizes: tuple[int, ...]) -> Change:
        to = min(sizes[0], att.MAX_FUSED_HEAD_DIM)
        kernel = att.kernel_at(call, to)  # the kernel the split heads run on
        if heads:
            suggestion = Suggestion(heads[0], heads[1], heads[1] * split)
        else:
            suggestion = Suggestion(named[0] if named else (g.param(d) or "head_dim"), d, to)
        return Change(
            suggestion, tuple(att.with_kernel(replace(resize(h, d, to), batch=h.batch * split), kernel) for h in call),
            f"head_dim = {d} is above {att.MAX_FUSED_HEAD_DIM}: no flash / cuDNN attention kernel takes it, so "
            f"PyTorch runs the memory-efficient or math kernel; split each head in {split} "
            f"(head_dim {to}, {split}x the heads)",
            (("head_dim", d), ("head_dim_after", to), ("head_split", split), ("seq_q", g.m), ("seq_k", g.n)),
        )

    math = att.math_kernel(call)
    return Proposal(CODE, NAME, SEVERITY, call, SizeSearch((Dim(ceil(d / split), align, SEARCH_SPAN),), at),
                    now=math, references=(("math_kernel", math),))
