"""Shape extraction: aten matmul-class ops → the GEMMs they run. The only place that
reads sizes and strides off tensors.

Works on anything tensor-like with ``shape``, ``stride()`` and ``storage_offset()``
(fake, meta or real tensors), so the dispatch-mode capture and the FX graph dump
share it.

>>> import torch
>>> a, b = torch.empty(5, 8, device="meta"), torch.empty(16, 8, device="meta").t()
>>> [(g.op, g.m, g.n, g.k) for g in extract("mm", (a, b), {}, a @ b)]
[('mm', 5, 16, 8)]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from shapelint.model.records import Operand, gemm_flops
from shapelint.physics.attention import MASKED

#: shapelint's own ops (``torch.ops.shapelint.<name>``, defined by ``shapelint.capture.run``)
#: for the fused attention kernels a GPU runs: forward (q, k, v, attn_mask,
#: is_causal, scale, kernel, compiled, dropout_p) and backward (grad, q, k, v,
#: attn_mask, is_causal, scale, kernel, compiled, dropout_p)
FUSED_ATTENTION = "fused_attention"
FUSED_ATTENTION_BACKWARD = "fused_attention_backward"

#: op packets that run GEMMs, by name (``torch.ops.aten.<name>``, and shapelint's)
GEMM_OPS = frozenset(
    {
        FUSED_ATTENTION,
        FUSED_ATTENTION_BACKWARD,
        "mm",
        "addmm",
        "_addmm_activation",
        "bmm",
        "baddbmm",
        "_scaled_mm",
        "_grouped_mm",
        "_scaled_grouped_mm",
        "convolution",
        "convolution_backward",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention_for_cpu_backward",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_efficient_attention_backward",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_cudnn_attention_backward",
    }
)

#: ops whose GEMMs are backward ones even though no autograd node runs them
#: (they appear in FX graphs; in eager capture the autograd node tells the phase)
BACKWARD_OPS = frozenset(n for n in GEMM_OPS if n.endswith("_backward"))
#: extra key of a ``baddbmm`` record that adds its input (beta != 0): where it computes
#: attention scores, the mask or bias added to them (``F.multi_head_attention_forward``
#: with an ``attn_mask``, Bloom's ALiBi)
ADDS_INPUT = "adds_input"


@dataclass(frozen=True)
class GemmShape:
    """One GEMM as an op runs it; ``part`` names which GEMM of a multi-GEMM op
    (``grad_input`` / ``grad_weight`` of a convolution backward, ``qk`` / ``pv`` /
    ``dq``... of attention)."""

    op: str
    m: int
    n: int
    k: int
    batch: int
    a: Operand
    b: Operand
    out: Operand
    part: str = ""
    role: str = ""
    #: what re-running the op needs beyond m, n, k (convolution geometry, causality)
    extra: tuple[tuple[str, object], ...] = ()

    @property
    def flops(self) -> int:
        return gemm_flops(self.m, self.n, self.k, self.batch)


def matrix(rows: int, cols: int, s_row: int, s_col: int, offset: int = 0, batch_stride: int = 0) -> Operand:
    """The layout cuBLAS gets for a rows x cols matrix with these strides
    (mirrors ATen's ``prepare_matrix_for_cublas``)."""
    if s_col == 1 and (rows == 1 or s_row >= max(1, cols)):
        return Operand(rows, cols, s_row if rows > 1 else cols, False, False, offset, batch_stride)
    if s_row == 1 and (cols == 1 or s_col >= max(1, rows)):
        return Operand(rows, cols, s_col if cols > 1 else rows, True, False, offset, batch_stride)
    # neither stride is 1: ATen copies to a contiguous (row-major) matrix first
    return Operand(rows, cols, cols, False, True, 0, rows * cols if batch_stride else 0)


def _mat2d(t: Any) -> Operand:
    r, c = int(t.shape[0]), int(t.shape[1])
    s = t.stride()
    return matrix(r, c, int(s[0]), int(s[1]), int(t.storage_offset()))


def _mat3d(t: Any) -> Operand:
    _, r, c = (int(x) for x in t.shape)
    s = t.stride()
    return matrix(r, c, int(s[1]), int(s[2]), int(t.storage_offset()), int(s[0]))


def _dense(rows: int, cols: int, batched: bool = False) -> Operand:
    return Operand(rows, cols, cols, batch_stride=rows * cols if batched else 0)


def _on_chip(rows: int, cols: int) -> Operand:
    return Operand(rows, cols, cols, in_memory=False)


def _first(x: Any) -> Any:
    return x[0] if isinstance(x, (tuple, list)) else x


def _mm(op: str, a: Any, b: Any, out: Any) -> list[GemmShape]:
    m, k = int(a.shape[0]), int(a.shape[1])
    n = int(b.shape[1])
    return [GemmShape(op, m, n, k, 1, _mat2d(a), _mat2d(b), _mat2d(_first(out)))]


def _bmm(op: str, a: Any, b: Any, out: Any) -> list[GemmShape]:
    batch, m, k = (int(x) for x in a.shape)
    n = int(b.shape[2])
    return [GemmShape(op, m, n, k, batch, _mat3d(a), _mat3d(b), _mat3d(_first(out)))]


def _channels_matrix(t: Any, rows: int, channels: int) -> Operand:
    """An N·H·W x C view of an activation: row-major with ld = C when channels-last;
    an NCHW tensor has no such layout (cuDNN transposes it or skips tensor cores),
    which is recorded as a copy."""
    spatial = math.prod(int(s) for s in t.shape[2:])
    channels_last = t.dim() >= 3 and (int(t.stride()[1]) == 1 or spatial == 1)
    return Operand(rows, channels, channels, copied=not channels_last)


def _conv_extra(x: Any, w: Any, args: Sequence[Any], transposed: bool, groups: int) -> tuple[tuple[str, object], ...]:
    return (
        ("input", tuple(int(d) for d in x.shape)),
        ("weight", tuple(int(d) for d in w.shape)),
        ("stride", tuple(int(d) for d in args[0])),
        ("padding", tuple(int(d) for d in args[1])),
        ("dilation", tuple(int(d) for d in args[2])),
        ("transposed", transposed),
        ("groups", groups),
        ("channels_last", x.dim() >= 3 and int(x.stride()[1]) == 1 and int(x.shape[1]) > 1),
    )


def _footprint(t: Any, groups: int = 1) -> Operand:
    """An activation (or its gradient) as it lies in memory: N·H·W rows of C channels;
    with groups, each group's GEMM reads its C/g of them (ld C, the groups C/g apart),
    so that over the groups (the GEMM's batch) the tensor counts once."""
    rows = int(t.shape[0]) * math.prod(int(s) for s in t.shape[2:])
    whole = _channels_matrix(t, rows, int(t.shape[1]))
    if groups == 1:
        return whole
    c_g = whole.cols // groups
    return replace(whole, cols=c_g, batch_stride=c_g)


# Every convolution GEMM multiplies a "P" channel count by the kernel size R·S and takes
# a "Q" channel count as is (per group g): P = in_channels, Q = out_channels for a
# convolution; a transposed convolution is the input gradient of the convolution with
# P = its out_channels, Q = its in_channels (weight [Q, P/g, R, S] either way), so its
# forward runs the "dgrad" GEMM and its input gradient the "fwd" one:
#   fwd    m = rows of the Q side, n = Q/g,      k = P/g·R·S   reads P-side, writes Q-side
#   dgrad  m = rows of the Q side, n = P/g·R·S,  k = Q/g       reads Q-side, writes P-side
#   wgrad  m = Q/g,  n = P/g·R·S,  k = rows of the Q side      reads Q-sideᵀ and P-side
# The operands are what lies in memory (implicit GEMM): the activations and gradients
# as N·H·W x C matrices (``copied`` when NCHW), never the R·S-times larger im2col columns;
# with groups (the GEMM's batch) each group's C/g channels of them, ld C.


def conv_forward_gemm(op: str, p_act: Any, q_act: Any, w: Any, groups: int) -> GemmShape:
    """out (Q side) = im2col(P side) @ Wᵀ: m = N·H·W of the Q side, n = Q/g, k = P/g·R·S."""
    q_fp = _footprint(q_act, groups)
    kernel = math.prod(int(s) for s in w.shape[2:])
    k = int(p_act.shape[1]) // groups * kernel
    # the weight [Q, P/g·R·S] (row-major, either kind of convolution) is B = Wᵀ
    b = Operand(k, q_fp.cols, k, transposed=True, batch_stride=k * q_fp.cols if groups > 1 else 0)
    return GemmShape(op, q_fp.rows, q_fp.cols, k, groups, _footprint(p_act, groups), b, q_fp, role="conv")


def conv_dgrad_gemm(op: str, q_act: Any, p_act: Any, w: Any, groups: int) -> GemmShape:
    """P-side columns = Q side @ W [Q/g, P/g·R·S], folded (col2im) into the P-side tensor."""
    q_fp = _footprint(q_act, groups)
    kernel = math.prod(int(s) for s in w.shape[2:])
    n = int(p_act.shape[1]) // groups * kernel
    b = Operand(q_fp.cols, n, n, batch_stride=q_fp.cols * n if groups > 1 else 0)
    return GemmShape(op, q_fp.rows, n, q_fp.cols, groups, q_fp, b, _footprint(p_act, groups), role="conv")


def conv_wgrad_gemm(op: str, q_act: Any, p_act: Any, w: Any, groups: int) -> GemmShape:
    """W [Q/g, P/g·R·S] = Q sideᵀ [Q/g, rows] @ columns [rows, P/g·R·S], the columns read from the P side."""
    q_fp = _footprint(q_act, groups)
    kernel = math.prod(int(s) for s in w.shape[2:])
    n = int(p_act.shape[1]) // groups * kernel
    a = Operand(q_fp.cols, q_fp.rows, q_fp.ld, True, q_fp.copied, batch_stride=q_fp.batch_stride)
    return GemmShape(op, q_fp.cols, n, q_fp.rows, groups, a, _footprint(p_act, groups),
                     _dense(q_fp.cols, n, groups > 1), role="conv")


def _conv(x: Any, w: Any, out: Any, transposed: bool, groups: int) -> list[GemmShape]:
    """Convolution as the implicit GEMM that im2col lowering runs (per group); a
    transposed convolution runs the input-gradient GEMM of the convolution it inverts."""
    y = _first(out)
    if transposed:
        return [conv_dgrad_gemm("convolution", x, y, w, groups)]
    return [conv_forward_gemm("convolution", x, y, w, groups)]


def _conv_backward(grad: Any, x: Any, w: Any, transposed: bool, groups: int, mask: Sequence[bool]) -> list[GemmShape]:
    """dgrad and wgrad of a convolution, as implicit GEMMs (FLOPs match
    ``torch.utils.flop_counter``'s ``conv_backward_flop`` for groups = 1). The
    operands are what lies in memory: implicit-GEMM kernels read x and dy and write
    dx as they are, never the R·S-times larger column matrix. Of a transposed
    convolution (x is its Q side, dy its P side) the input gradient is a plain
    convolution of dy, the weight gradient the same GEMM with x and dy swapped."""
    q_side, p_side = (x, grad) if transposed else (grad, x)
    shapes = []
    if mask[0]:
        if transposed:
            g = conv_forward_gemm("convolution_backward", grad, x, w, groups)
        else:
            g = conv_dgrad_gemm("convolution_backward", grad, x, w, groups)
        shapes.append(replace(g, part="grad_input"))
    if mask[1]:
        shapes.append(replace(conv_wgrad_gemm("convolution_backward", q_side, p_side, w, groups), part="grad_weight"))
    return shapes


def _heads(q: Any) -> tuple[int, int, int, int]:
    """(batch·heads, seq, head_dim, row stride) of a [B, H, T, D] attention operand."""
    *lead, t, d = (int(s) for s in q.shape)
    return math.prod(lead), t, d, int(q.stride()[-2])


def _attn_operand(t: Any, rows: int, cols: int, transposed: bool) -> Operand:
    _, _, _, ld = _heads(t)
    if int(t.stride()[-1]) != 1:
        return Operand(rows, cols, cols, copied=True)
    return Operand(rows, cols, ld, transposed, False, int(t.storage_offset()))


def _scores(op: str, q: Any, k: Any, part: str) -> GemmShape:
    """S = Q Kᵀ, kept on chip by the fused kernels."""
    bh, tq, d, _ = _heads(q)
    _, tk, _, _ = _heads(k)
    return GemmShape(op, tq, tk, d, bh, _attn_operand(q, tq, d, False), _attn_operand(k, d, tk, True),
                     _on_chip(tq, tk), part=part, role="attn_scores")


def _sdpa(op: str, q: Any, k: Any, v: Any) -> list[GemmShape]:
    """The two GEMMs of a fused attention forward: S = Q Kᵀ, O = P V (P on chip)."""
    bh, tq, _, _ = _heads(q)
    _, tk, _, _ = _heads(k)
    dv = int(v.shape[-1])
    return [
        _scores(op, q, k, "qk"),
        GemmShape(op, tq, dv, tk, bh, _on_chip(tq, tk), _attn_operand(v, tk, dv, False),
                  _dense(tq, dv), part="pv", role="attn_values"),
    ]


def _sdpa_backward(op: str, grad: Any, q: Any, k: Any, v: Any) -> list[GemmShape]:
    """The five GEMMs of a fused attention backward (the flash/efficient kernels
    recompute S = Q Kᵀ; the same five ``flop_counter.sdpa_backward_flop`` counts)."""
    bh, tq, d, _ = _heads(q)
    _, tk, _, _ = _heads(k)
    dv = int(v.shape[-1])
    return [
        _scores(op, q, k, "qk_recompute"),
        GemmShape(op, tk, dv, tq, bh, _on_chip(tk, tq), _attn_operand(grad, tq, dv, False),
                  _dense(tk, dv), part="dv", role="attn_values"),
        GemmShape(op, tq, tk, dv, bh, _attn_operand(grad, tq, dv, False), _attn_operand(v, dv, tk, True),
                  _on_chip(tq, tk), part="dp", role="attn_scores"),
        GemmShape(op, tq, d, tk, bh, _on_chip(tq, tk), _attn_operand(k, tk, d, False),
                  _dense(tq, d), part="dq", role="attn_values"),
        GemmShape(op, tk, d, tq, bh, _on_chip(tk, tq), _attn_operand(q, tq, d, False),
                  _dense(tk, d), part="dk", role="attn_values"),
    ]


#: operand dtypes for which CUDA's ``_grouped_mm`` runs one grouped (CUTLASS) kernel on
#: sm90/sm100 (``aten/src/ATen/native/cuda/GroupedBlas.cpp``); any other dtype takes
#: ``_grouped_mm_fallback``: the offsets are copied to the host (a sync) and each group
#: runs its own ``mm``. Transformers casts the experts' input to the weight dtype and
#: CUDA autocast does not cover ``_grouped_mm``, so experts over fp32 master weights
#: run that fallback in fp32 (measured on an H100: 40 fp32 GEMMs and 3 host copies for
#: 8 experts forward and backward, 5x the bf16 grouped kernels' time)
GROUPED_KERNEL_DTYPES = frozenset({"torch.bfloat16"})


def grouped_fallback(g_extra: Sequence[tuple[str, object]]) -> tuple[int, str] | None:
    """(groups, the dimension split over them: ``m`` or ``k``) of a ``_grouped_mm``
    record that runs aten's per-group fallback, else None."""
    extra = dict(g_extra)
    groups = extra.get("expert_groups")
    return (int(groups), str(extra.get("split", "m"))) if isinstance(groups, int) else None


def _fallback_extra(op: str, a: Any, b: Any, groups: int, split: str) -> tuple[tuple[str, object], ...]:
    if op != "_grouped_mm" or (str(a.dtype) in GROUPED_KERNEL_DTYPES and str(b.dtype) in GROUPED_KERNEL_DTYPES):
        return ()
    return (("expert_groups", groups), ("split", split))


def _grouped_mm(op: str, a: Any, b: Any, out: Any, offs: Any = None) -> list[GemmShape]:
    """``_grouped_mm`` of mixture-of-experts layers: tokens [T, K] x experts [G, K, N].
    Tokens per expert are data dependent, so the record carries all T rows with
    batch = 1 (the FLOPs are exact; the per-expert split is not). Where the operands
    take aten's per-group fallback (not bf16), ``extra`` says over how many groups and
    which dimension the fallback splits (``grouped_fallback``)."""
    if a.dim() == 2 and b.dim() == 3:
        t, kk = int(a.shape[0]), int(a.shape[1])
        n = int(b.shape[2])
        extra = _fallback_extra(op, a, b, int(b.shape[0]), "m")
        return [GemmShape(op, t, n, kk, 1, _mat2d(a), _mat3d(b), _mat2d(_first(out)), extra=extra)]
    if a.dim() == 3 and b.dim() == 3:
        return _bmm(op, a, b, out)
    # 2D x 2D (weight gradient, grouped over K): [N, T] x [T, K], one group per offset
    groups = int(offs.shape[0]) if offs is not None and hasattr(offs, "shape") else 1
    return [replace(s, extra=_fallback_extra(op, a, b, groups, "k")) for s in _mm(op, a, b, out)]


def _flag(args: Sequence[Any], kwargs: dict[str, Any], index: int, key: str) -> bool:
    value = args[index] if len(args) > index else kwargs.get(key, False)
    return bool(value) if isinstance(value, (bool, int)) else False


def _baddbmm(args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> list[GemmShape]:
    """``baddbmm``'s batched GEMM, tagged where it adds its input (beta != 0: the mask or
    bias added to attention scores in the same kernel)."""
    adds = () if _arg(args, kwargs, 3, "beta") == 0 else ((ADDS_INPUT, True),)
    return [replace(s, extra=adds) for s in _bmm("baddbmm", args[1], args[2], out)]


def extract(name: str, args: Sequence[Any], kwargs: dict[str, Any], out: Any) -> list[GemmShape]:
    """The GEMMs that aten op ``name`` (an overload packet name) runs for these
    arguments and output. Empty for ops that run none."""
    if name in ("mm", "_scaled_mm"):
        return _mm(name, args[0], args[1], out)
    if name in ("addmm", "_addmm_activation"):
        return _mm(name, args[1], args[2], out)
    if name == "bmm":
        return _bmm(name, args[0], args[1], out)
    if name == "baddbmm":
        return _baddbmm(args, kwargs, out)
    if name in ("_grouped_mm", "_scaled_grouped_mm"):
        offs = _arg(args, kwargs, 2, "offs") if name == "_grouped_mm" else None
        return _grouped_mm(name, args[0], args[1], out, offs)
    if name == "convolution":
        transposed = bool(args[6]) if len(args) > 6 else bool(kwargs.get("transposed", False))
        groups = int(args[8]) if len(args) > 8 else int(kwargs.get("groups", 1))
        extra = _conv_extra(args[0], args[1], args[3:6], transposed, groups)
        return [replace(s, extra=extra) for s in _conv(args[0], args[1], out, transposed, groups)]
    if name == "convolution_backward":
        extra = _conv_extra(args[1], args[2], args[4:7], bool(args[7]), int(args[9]))
        return [replace(s, extra=extra)
                for s in _conv_backward(args[0], args[1], args[2], bool(args[7]), int(args[9]), list(args[10]))]
    if name in (FUSED_ATTENTION, FUSED_ATTENTION_BACKWARD):
        return _fused_attention(name, args, kwargs)
    if name.startswith("_scaled_dot_product_"):
        return _aten_attention(name, args, kwargs)
    return []


def _arg(args: Sequence[Any], kwargs: dict[str, Any], index: int, key: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(key)


def _attention_extra(causal: bool, kernel: str | None, compiled: str | None = None,
                     dropout: float | None = None) -> tuple[tuple[str, object], ...]:
    """``is_causal``; ``kernel``: the SDPA kernel; ``compiled``: the kernel under
    torch.compile where the call gets a mask there; ``dropout``: attention dropout."""
    return ((("is_causal", causal),) + ((("kernel", kernel),) if kernel else ())
            + ((("compiled", compiled),) if compiled else ()) + ((("dropout", dropout),) if dropout else ()))


def _fused_attention(name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> list[GemmShape]:
    """shapelint's attention ops: the GEMMs of the kernel named in their arguments."""
    first = 4 if name == FUSED_ATTENTION else 5  # where is_causal is
    extra = _attention_extra(bool(_arg(args, kwargs, first, "is_causal")), str(_arg(args, kwargs, first + 2, "kernel")),
                             _arg(args, kwargs, first + 3, "compiled"), _arg(args, kwargs, first + 4, "dropout_p"))
    mask = _arg(args, kwargs, first - 1, "attn_mask")
    if getattr(mask, "requires_grad", False) and mask.is_floating_point():
        extra += (("bias_grad", mask.element_size()),)  # a position bias that needs its gradient
    elif mask is not None:
        extra += ((MASKED, True),)  # a mask with no gradient: it still picks the kernel
    shapes = _sdpa("sdpa", *args[:3]) if name == FUSED_ATTENTION else _sdpa_backward("sdpa", *args[:4])
    return [replace(s, extra=extra) for s in shapes]


def _aten_attention(name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> list[GemmShape]:
    """ATen's fused attention ops (in graphs, or traced on a GPU): the CUDA kernel is
    the name's fifth word (``_scaled_dot_product_flash_attention``); the CPU's says
    nothing of the GPU's."""
    kernel = None if "_for_cpu" in name else name.split("_")[4]
    if name.endswith("_backward"):
        extra = _attention_extra(_flag(args, kwargs, 7, "is_causal"), kernel)
        return [replace(s, extra=extra) for s in _sdpa_backward("sdpa", *args[:4])]
    extra = _attention_extra(_flag(args, kwargs, 4, "is_causal"), kernel)
    return [replace(s, extra=extra) for s in _sdpa("sdpa", *args[:3])]
