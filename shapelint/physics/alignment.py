"""Tensor-core alignment: every operand's leading dimension (its row stride as laid
out in memory), its pointer offset and batch stride, and the output's, must be a
multiple of ``Hardware.alignment_bytes`` (16 bytes: 8 elements in bf16/fp16, 4 in
tf32, 16 in fp8/int8). A dimension that is never a leading dimension (a Linear's
token count) does not matter. The one definition of that rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from shapelint.hardware import Hardware
from shapelint.model.records import ATTN_ROLES, Gemm, Operand
from shapelint.physics.reshape import resize


def aligned_bytes(value_elems: int, dtype_bytes: int, cap: int = 16) -> int:
    """The largest power of two (up to ``cap``) dividing ``value_elems * dtype_bytes``."""
    b = value_elems * dtype_bytes
    if b == 0:
        return cap
    return min(cap, b & -b)


def operand_alignment(op: Operand, dtype_bytes: int, cap: int) -> int:
    """Bytes of alignment the kernel gets for this operand (up to ``cap``)."""
    if not op.in_memory:
        return cap
    worst = cap if op.single_line else aligned_bytes(op.ld, dtype_bytes, cap)
    worst = min(worst, aligned_bytes(op.offset, dtype_bytes, cap))
    if op.batch_stride:
        worst = min(worst, aligned_bytes(op.batch_stride, dtype_bytes, cap))
    return worst


def input_alignment(g: Gemm, hw: Hardware) -> int:
    """The worst alignment (bytes) of A and B."""
    return min(operand_alignment(op, g.dtype_bytes, hw.alignment_bytes) for op in (g.a, g.b))


def output_alignment(g: Gemm, hw: Hardware) -> int:
    return operand_alignment(g.out, g.dtype_bytes, hw.alignment_bytes)


def gemm_alignment(g: Gemm, hw: Hardware) -> int:
    """The worst alignment (bytes) over A, B and the output."""
    return min(input_alignment(g, hw), output_alignment(g, hw))


def is_aligned(g: Gemm, hw: Hardware) -> bool:
    return gemm_alignment(g, hw) >= hw.alignment_bytes


def misaligned_leading_dims(g: Gemm, hw: Hardware) -> set[int]:
    """The leading dimensions (in elements) of ``g``'s in-memory operands that break
    the alignment rule."""
    align = hw.align_elems(g.dtype_bytes)
    return {op.ld for op in (g.a, g.b, g.out) if op.in_memory and not op.single_line and op.ld % align}


def misaligned_layer_sizes(gemms: Sequence[Gemm], hw: Hardware,
                           skip: Callable[[int, Gemm], bool]) -> Iterator[tuple[int, tuple[Gemm, ...]]]:
    """Each size that is a misaligned leading dimension of a layer's tensor-core GEMM
    (not attention's, not a convolution's), once per layer and size, with every GEMM of
    that layer it sizes; ``skip(size, gemm)`` leaves a size out (it is looked at again
    on the layer's next GEMM). A leading dimension that is none of m, n, k is the stride
    of a view (Longformer's overlapping chunks, SpeechT5's relative-position operand with
    rows 1023² apart): no size of the layer sets it."""
    seen: set[tuple[str, int]] = set()
    for g in gemms:
        if not hw.uses_tensor_cores(g.dtype) or g.role in ATTN_ROLES or g.role == "conv" or is_aligned(g, hw):
            continue
        for value in sorted(misaligned_leading_dims(g, hw)):
            if value not in (g.m, g.n, g.k) or (g.module, value) in seen or skip(value, g):
                continue
            seen.add((g.module, value))
            yield value, tuple(h for h in gemms if h.module == g.module and value in (h.m, h.n, h.k))


def misaligned_groups(gemms: Sequence[Gemm], hw: Hardware) -> dict[str, list[Gemm]]:
    """The GEMMs that break the rule (convolutions left out: SL401's), by the set of their
    misaligned leading dimensions (``"769"``, ``"1023,1046529"``; ``"offset"`` where only
    an offset or a batch stride breaks it), in capture order."""
    groups: dict[str, list[Gemm]] = {}
    for g in gemms:
        if g.role != "conv" and not is_aligned(g, hw):
            groups.setdefault(",".join(map(str, sorted(misaligned_leading_dims(g, hw)))) or "offset", []).append(g)
    return groups


def padded_to_alignment(g: Gemm, hw: Hardware) -> Gemm:
    """``g`` as it would run aligned: each misaligned leading dimension that is a GEMM
    dimension padded up to the next aligned size, the other leading dimensions (a view's
    stride), offsets and batch strides rounded up (what aligning costs nothing to name)."""
    a = hw.align_elems(g.dtype_bytes)

    def up(v: int) -> int:
        return -(-v // a) * a

    for v in sorted(misaligned_leading_dims(g, hw) & {g.m, g.n, g.k}):
        g = resize(g, v, up(v))

    def fix(op: Operand) -> Operand:
        return replace(op, ld=op.ld if op.single_line else up(op.ld), offset=up(op.offset),
                       batch_stride=up(op.batch_stride) if op.batch_stride else 0)

    return replace(g, a=fix(g.a), b=fix(g.b), out=fix(g.out))
