"""The attention head dimension keeps PyTorch off its fastest fused attention kernels.

## What it does
Checks every fused attention (``F.scaled_dot_product_attention``: the GEMMs with
roles ``attn_scores``/``attn_values``) for a head dimension that is not a multiple
of 16 bytes (8 elements in bf16/fp16) or, in bf16/fp16, above 256. It suggests the
next multiple of 8 that the estimator finds as fast as any larger one (or, above
256, splitting each head), and names the way to keep the hidden size instead
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
the message also gives the math-kernel estimate that applies when an
``attn_mask`` is passed (measured 7.6x).

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

from dataclasses import replace
from math import ceil
from typing import Iterable, Sequence

from shapelint.estimate import best_size, resize, total_ms
from shapelint.hardware import Hardware
from shapelint.records import Finding, Gemm, Operand, Suggestion
from shapelint.rule_api import Example, RuleContext, by_module, graded, make_finding
from shapelint.rules.sl302_materialized_attention import softmax_traffic_ms

CODE = "SL301"
NAME = "attention-head-dim"
SEVERITY = "error"

#: below this estimated speedup a finding is a warning, not an error
ERROR_SPEEDUP = 1.25
#: largest head dimension PyTorch's flash / cuDNN attention kernels take (bf16/fp16)
MAX_FUSED_HEAD_DIM = 256
#: element size of the dtypes the flash / cuDNN kernels run (bf16, fp16)
FLASH_DTYPE_BYTES = 2
#: search for the padded head dimension up to the next multiple of this many elements
SEARCH_SPAN = 64
#: the dtype PyTorch's math attention kernel computes half-precision inputs in
#: (torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp is False by default)
MATH_DTYPE = "fp32"
#: owning-module attributes that hold the head dimension / the number of heads
HEAD_DIM_PARAMS = ("head_dim", "head_size", "attention_head_size", "d_head", "dim_head", "kv_channels")
HEADS_PARAMS = ("num_heads", "num_attention_heads", "n_head", "n_heads", "nhead", "heads")

ATTN_ROLES = ("attn_scores", "attn_values")

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


def head_dim(g: Gemm) -> int:
    """The head dimension a fused attention GEMM runs with: the k of the GEMMs that
    produce scores (QKᵀ, dP), the n of those that read them (PV, dV, dQ, dK)."""
    return g.k if g.role == "attn_scores" else g.n


def _per_head(op: Operand, d: int) -> Operand:
    """``op`` as the kernel reads it when each head's rows are ``d`` elements apart."""
    if not op.in_memory or d not in (op.rows, op.cols):
        return op
    return Operand(op.rows, op.cols, d, op.transposed, op.copied,
                   batch_stride=op.rows * op.cols if op.batch_stride else 0)


def per_head(g: Gemm, d: int) -> Gemm:
    """The GEMM with the head-dimension operands read as rows of ``d`` elements: how a
    kernel that does not take this head dimension natively sees them."""
    return replace(g, a=_per_head(g.a, d), b=_per_head(g.b, d), out=_per_head(g.out, d))


def _in_memory(op: Operand) -> Operand:
    if op.in_memory:
        return op
    return Operand(op.rows, op.cols, op.cols, batch_stride=op.rows * op.cols)


def math_kernel_ms(call: Sequence[Gemm], hw: Hardware) -> float:
    """Estimated time of the same attention on PyTorch's math kernel: plain batched
    GEMMs in fp32 with the scores in memory (no QKᵀ recompute in backward), plus the
    softmax passes over the fp32 score matrix."""
    unfused = [replace(g, dtype=MATH_DTYPE, role="", a=_in_memory(g.a), b=_in_memory(g.b), out=_in_memory(g.out))
               for g in call if not g.op.endswith("qk_recompute")]
    qk = next((g for g in call if g.role == "attn_scores"), call[0])
    training = any(g.phase in ("grad_input", "grad_weight") for g in call)
    score_elems = qk.batch * qk.m * qk.n
    return total_ms(unfused, hw) + softmax_traffic_ms(score_elems, unfused[0].dtype_bytes, training, hw)


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Finding]:
    for gs in by_module(gemms).values():
        calls: dict[tuple[int, int, str], list[Gemm]] = {}
        for g in gs:
            if g.role in ATTN_ROLES and g.op.startswith("sdpa.") and hardware.uses_tensor_cores(g.dtype):
                calls.setdefault((g.batch, head_dim(g), g.dtype), []).append(g)
        for (_, d, _), call in calls.items():
            align = hardware.align_elems(call[0].dtype_bytes)
            if d > MAX_FUSED_HEAD_DIM and call[0].dtype_bytes == FLASH_DTYPE_BYTES:
                f = _too_large(call, d, hardware)
            elif d % align:
                f = _misaligned(call, d, align, hardware)
            else:
                continue
            if f.est_speedup is not None and 1 - 1 / f.est_speedup >= context.min_loss:
                yield graded(f, ERROR_SPEEDUP)


def _param(g: Gemm, names: tuple[str, ...], value: int | None = None) -> tuple[str, int] | None:
    params = dict(g.module_params)
    for name in names:
        if name in params and (value is None or params[name] == value):
            return name, params[name]
    return None


def _keep_width(d: int, heads: int, align: int) -> tuple[int, int] | None:
    """(heads, head_dim) with the same hidden size heads·d and an aligned head_dim of
    at most MAX_FUSED_HEAD_DIM, the head_dim nearest ``d``; None if there is none."""
    hidden = heads * d
    options = [c for c in range(align, MAX_FUSED_HEAD_DIM + 1, align) if hidden % c == 0]
    if not options:
        return None
    best = min(options, key=lambda c: (abs(c - d), -c))
    return hidden // best, best


def _with_before(f: Finding, before_ms: float, extra: dict[str, object]) -> Finding:
    """The finding with the estimated time before the change set to ``before_ms``
    (the GEMM records show the kernel PyTorch would not run)."""
    after = f.est_ms_after or 0.0
    details = dict(f.details)
    details.update(extra)
    details["recorded_ms"] = f.est_ms
    return replace(f, est_ms=before_ms, est_speedup=before_ms / after if after else None,
                   details=tuple(details.items()))


def _misaligned(call: list[Gemm], d: int, align: int, hw: Hardware) -> Finding:
    g = call[0]
    before = [per_head(h, d) for h in call]
    to = best_size(d, lambda c: total_ms((resize(h, d, c) for h in before), hw), align, search=SEARCH_SPAN)
    named = _param(g, HEAD_DIM_PARAMS, d)
    param = named[0] if named else (g.param(d) or "head_dim")
    heads = _param(g, HEADS_PARAMS)
    alt = _keep_width(d, heads[1], align) if heads else None
    alt_text = (f"; to keep the hidden size {heads[1] * d}, use {heads[0]} = {alt[0]} (head_dim {alt[1]})"
                if heads and alt else "")
    math_ms = math_kernel_ms(call, hw)
    f = make_finding(
        CODE, NAME, SEVERITY, call, [resize(h, d, to) for h in before], hw,
        f"head_dim = {d} is not a multiple of {align}: PyTorch's cuDNN / memory-efficient attention "
        f"kernels refuse it, flash pads it, and with an attn_mask the math kernel runs "
        f"(scores materialised in fp32, est. {math_ms:.3g} ms){alt_text}",
        Suggestion(param, d, to),
        {"head_dim": d, "align_elems": align, "seq_q": g.m, "seq_k": g.n,
         "alt_num_heads": alt[0] if alt else None, "alt_head_dim": alt[1] if alt else None},
    )
    return _with_before(f, total_ms(before, hw), {"math_kernel_ms": math_ms})


def _too_large(call: list[Gemm], d: int, hw: Hardware) -> Finding:
    g = call[0]
    align = hw.align_elems(g.dtype_bytes)
    split = ceil(d / MAX_FUSED_HEAD_DIM)

    def after(c: int) -> list[Gemm]:
        return [replace(resize(h, d, c), batch=h.batch * split) for h in call]

    to = best_size(ceil(d / split), lambda c: total_ms(after(c), hw), align, search=SEARCH_SPAN)
    to = min(to, MAX_FUSED_HEAD_DIM)
    heads = _param(g, HEADS_PARAMS)
    named = _param(g, HEAD_DIM_PARAMS, d)
    if heads:
        suggestion = Suggestion(heads[0], heads[1], heads[1] * split)
    else:
        suggestion = Suggestion(named[0] if named else (g.param(d) or "head_dim"), d, to)
    math_ms = math_kernel_ms(call, hw)
    f = make_finding(
        CODE, NAME, SEVERITY, call, after(to), hw,
        f"head_dim = {d} is above {MAX_FUSED_HEAD_DIM}: no flash / cuDNN attention kernel takes it, so "
        f"PyTorch runs the memory-efficient or math kernel; split each head in {split} "
        f"(head_dim {to}, {split}x the heads)",
        suggestion,
        {"head_dim": d, "head_dim_after": to, "head_split": split, "seq_q": g.m, "seq_k": g.n},
    )
    return _with_before(f, math_ms, {"math_kernel_ms": math_ms})
