"""What a recorded op streams through memory: the tensors it reads and writes, how many
elements its kernel iterates over, and the bytes each tensor really covers. The recorder
(``shapelint.capture.recorder``) prices every op's traffic with these."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import torch

from shapelint.physics.conv_kernels import BATCH_NORM
from shapelint.physics.kernels import SOFTMAX

#: how a copy or pointwise kernel walks memory (:func:`elementwise_access`)
Access = Literal["vectorized", "coalesced", "strided"]
#: the kernel path of a copy or pointwise op (:func:`stream_access`): how it walks memory,
#: or ``cast_offset``, a dynamic cast where the iteration is not one contiguous run
KernelPath = Literal["vectorized", "coalesced", "strided", "cast_offset"]

#: bytes a warp must read in one run of the innermost dimension for its loads to fill
#: whole 32-byte sectors: a shorter run wastes most of every sector it touches
SECTOR_BYTES = 32


def stream_layout(kclass: str, tensors: list[torch.Tensor], outputs: int = 0) -> tuple[int, bool]:
    """(the widest floating element size, whether a copy or pointwise op takes the
    ``strided`` path of :func:`stream_access`). ``tensors`` holds the op's inputs, then
    its ``outputs`` outputs (the last ones)."""
    split = len(tensors) - outputs
    widest, path = stream_access(kclass, tensors[:split], tensors[split:])
    return widest, path == "strided"


def stream_access(kclass: str, ins: Sequence[torch.Tensor], outs: Sequence[torch.Tensor]) -> tuple[int, KernelPath]:
    """(the widest floating element size, the path the op's kernel takes): a copy or
    pointwise op as :func:`elementwise_access` says, but where it casts (:func:`casts`):

    - a contiguous cast runs ``unrolled_elementwise_kernel``, loading one element at a
      time as the coalesced path does: ``coalesced`` (the op's ``cast`` flag prices it at
      the contiguous cast rate);
    - any other cast, ``cast_offset``: ``elementwise_kernel<128, vt>`` with an
      ``OffsetCalculator`` and a dynamic cast of every element it loads and stores
      (``gpu_kernel_impl``, not ``gpu_kernel_impl_nocast``, in CUDALoops.cuh), whether its
      tensors are dense (a broadcast fp32 ALiBi bias or mask added to bf16 attention
      scores) or have gaps (MPT's ALiBi sliced from rows of ``max_seq_len``): the cast
      of every element, not the sectors, bounds it, at a rate of its own.

    Any other op is ``vectorized`` (its own kernel's rate prices it). The width is of the
    tensors the kernel iterates over: a one-element operand (``torch.where``'s fp32 fill,
    which ``where`` converts to the scores' dtype before its bf16 kernel runs) does not
    widen it."""
    floats = [t for t in (*ins, *outs) if t.is_floating_point()]
    widest = max((t.element_size() for t in floats if t.numel() > 1), default=0) or \
        max((t.element_size() for t in floats), default=2)
    if kclass not in ("copy", "pointwise"):
        return widest, "vectorized"
    access = elementwise_access(ins, outs)
    if casts(ins, outs):
        return widest, "coalesced" if access == "vectorized" else "cast_offset"
    return widest, access


#: the casts CUDA's copy runs as a kernel of their own types (``direct_copy_kernel_cuda``:
#: fp32 to bf16 or fp16 without a dynamic cast, vectorised where contiguous)
_NOCAST_COPIES = {(torch.float32, torch.bfloat16), (torch.float32, torch.float16)}


def softmax_row(name: str, args: Sequence[Any]) -> int:
    """The row a softmax normalises (the length of its ``dim``), forward or backward,
    where the rows are contiguous (every dimension after ``dim`` of size 1: PyTorch's warp
    and block kernels, ``SoftMax.cu``'s ``inner_size == 1``); 0 for a softmax over an outer
    dimension (its spatial kernel: a segmentation loss over [N, C, H, W] logits) and for
    any other op (``shapelint.physics.kernels.SOFTMAX``)."""
    if name not in SOFTMAX or not args or not isinstance(args[0], torch.Tensor):
        return 0
    x, dim = args[0], args[2 if name.endswith("_backward_data") else 1] if len(args) > 1 else -1
    if not isinstance(dim, int) or not x.dim():
        return 0
    inner = math.prod(int(n) for n in x.shape[dim % x.dim() + 1:])
    return int(x.shape[dim]) if inner == 1 else 0


def casts(ins: Sequence[torch.Tensor], outs: Sequence[torch.Tensor]) -> bool:
    """Whether TensorIterator runs the op with a dynamic cast (``gpu_kernel_impl``, not
    ``gpu_kernel_impl_nocast``, in CUDALoops.cuh): its floating operands are not all of
    one dtype (autocast's bf16 activations beside fp32 ones, an upcast to fp32), but
    fp32 to bf16 or fp16, which the copy kernel runs without one. Integer and boolean
    operands (masks, indices) are the kernels' own types."""
    floats = {t.dtype for t in (*ins, *outs) if t.is_floating_point() and t.numel() > 1}
    if len(floats) < 2:
        return False
    sources = [t for t in ins if not any(t is o for o in outs)]  # copy_ reads its destination too
    return not (len(sources) == 1 and len(outs) == 1 and (sources[0].dtype, outs[0].dtype) in _NOCAST_COPIES)


def elementwise_access(ins: Sequence[torch.Tensor], outs: Sequence[torch.Tensor]) -> Access:
    """How CUDA runs a TensorIterator op over these tensors. TensorIterator first sorts
    the dimensions by stride, the output's first (``reorder_dimensions``), then merges
    the ones that are adjacent in memory in every operand (``coalesce_dimensions``), so
    that operands that are all the same permutation of dense memory iterate as one
    contiguous run. Then (aten/src/ATen/native/cuda/CUDALoops.cuh):

    - ``vectorized``: one run, unit stride in every operand (``iter.is_contiguous()``):
      ``vectorized_elementwise_kernel`` (``unrolled_elementwise_kernel`` where it casts);
    - ``coalesced``: anything else takes ``elementwise_kernel<128, vt>`` with an
      ``OffsetCalculator``, one element per thread per step; where every operand is
      dense (a permuted view, a broadcast) and the innermost sorted dimension is unit
      stride (or broadcast) in all of them for at least a sector, a warp still reads
      whole sectors: ``q.transpose(1, 2) * cos`` in RoPE, an RMS norm's ``x * rsqrt``;
    - ``strided``: an operand with gaps (a slice of a wider row) or one whose unit
      stride is not the innermost dimension (a transpose, channels-last beside NCHW).

    Operands of one element (a scalar lifted into the kernel) take no part. An op whose
    operands do not broadcast to one shape (``cat``, a gather, ``slice_backward``) runs a
    kernel of its own, judged operand by operand: ``vectorized`` (the rate of contiguous
    copies) where each is dense and all of a rank have their unit stride in the same
    dimension (NCHW beside NCHW, NHWC beside NHWC), else ``strided``."""
    operands = [t for t in (*outs, *ins) if t.numel() > 1]
    if not operands:
        return "vectorized"
    try:
        shape = tuple(torch.broadcast_shapes(*(t.shape for t in operands)))
    except RuntimeError:
        return _access_apart(operands)
    if any(tuple(t.shape) != shape for t in operands[: len(outs)]):
        return _access_apart(operands)  # an output smaller than the iteration: not one TensorIterator
    strides = [_broadcast_strides(t, shape) for t in operands]
    if not all(map(_dense, strides, [shape] * len(strides))):
        return "strided"
    runs = _coalesce(shape, strides, _reorder(shape, strides))
    return _path(runs, max(t.element_size() for t in operands))


def _path(runs: Sequence[tuple[int, tuple[int, ...]]], widest: int) -> Access:
    """The kernel path of dense operands, from their merged dimensions (innermost first)."""
    size, inner = runs[0]
    if len(runs) == 1 and all(s == 1 for s in inner):
        return "vectorized"
    if all(s in (0, 1) for s in inner) and size * widest >= SECTOR_BYTES:
        return "coalesced"
    return "strided"


def _broadcast_strides(t: torch.Tensor, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The tensor's strides (in elements) over the broadcast ``shape``: 0 where it broadcasts."""
    lead = len(shape) - t.dim()
    own = [0] * lead + [0 if size == 1 else int(s) for size, s in zip(t.shape, t.stride())]
    return tuple(own)


def _dense(strides: Sequence[int], shape: Sequence[int]) -> bool:
    """Whether the elements a tensor stores (its dimensions that do not broadcast) fill
    one block of memory with no gap, in some order of its dimensions."""
    dims = sorted((s, n) for s, n in zip(strides, shape) if s != 0 and n != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def _reorder(shape: Sequence[int], strides: Sequence[Sequence[int]]) -> list[int]:
    """TensorIterator's order of the dimensions, innermost first (``reorder_dimensions``):
    by stride, the first operand (the output) that tells two dimensions apart decides,
    an operand that broadcasts either dimension is skipped; ties keep the reverse order."""

    def should_swap(d0: int, d1: int) -> int:
        for s in strides:
            if s[d0] == 0 or s[d1] == 0:
                continue
            if s[d0] != s[d1]:
                return 1 if s[d0] > s[d1] else -1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = [d for d in reversed(range(len(shape))) if shape[d] != 1]
    for i in range(1, len(perm)):
        at = i
        for j in range(i - 1, -1, -1):
            order = should_swap(perm[j], perm[at])
            if order > 0:
                perm[j], perm[at] = perm[at], perm[j]
                at = j
            elif order < 0:
                break
    return perm


def _coalesce(shape: Sequence[int], strides: Sequence[Sequence[int]], perm: Sequence[int]
              ) -> list[tuple[int, tuple[int, ...]]]:
    """(size, stride of each operand) of each dimension after ``coalesce_dimensions``:
    neighbours in ``perm`` merge where every operand steps over the inner one exactly."""
    runs: list[tuple[int, tuple[int, ...]]] = []
    for d in perm:
        step = tuple(s[d] for s in strides)
        if runs:
            size, inner = runs[-1]
            if all(o == i * size for o, i in zip(step, inner)):
                runs[-1] = (size * shape[d], inner)
                continue
        runs.append((shape[d], step))
    return runs or [(1, tuple(1 for _ in strides))]


def _access_apart(operands: Sequence[torch.Tensor]) -> Access:
    """Operands that do not share one iteration shape (a kernel of the op's own), judged
    one by one: ``strided`` where one has gaps or where two of one rank keep their unit
    stride in different dimensions."""
    unit: dict[int, int] = {}
    for t in operands:
        strides = [0 if n == 1 else int(s) for n, s in zip(t.shape, t.stride())]
        if not _dense(strides, t.shape):
            return "strided"
        inner = next((d for d in reversed(range(t.dim())) if strides[d] == 1), -1)
        if unit.setdefault(t.dim(), inner) != inner:
            return "strided"
    return "vectorized"


#: the channels-last memory format of a tensor of each rank
_CHANNELS_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}


def channels_last(tensors: list[torch.Tensor], batch_norm: bool = False) -> bool:
    """Whether the first 4-D or 5-D tensor an op reads is laid out channels-last and not
    also contiguous (a tensor of one pixel is both): the layout PyTorch picks a
    convolution's kernel by. A batch norm (``batch_norm``) takes its channels-last
    kernels by ``batch_norm_use_channels_last_kernels`` (aten's Normalization.cuh): a
    channels-last tensor, or a contiguous one whose channels are its unit stride (2-D
    [N, C], [N, C, 1, 1])."""
    if batch_norm:
        t = next((x for x in tensors if x.dim() >= 2), None)
        fmt = _CHANNELS_LAST.get(t.dim()) if t is not None else None
        return t is not None and ((fmt is not None and t.is_contiguous(memory_format=fmt))
                                  or (t.is_contiguous() and t.stride(1) == 1))
    for t in tensors:
        fmt = _CHANNELS_LAST.get(t.dim())
        if fmt is not None:
            return t.is_contiguous(memory_format=fmt) and not t.is_contiguous()
    return False


def normalised_shape(name: str, tensors: list[torch.Tensor]) -> tuple[int, ...]:
    """The shape of the activation a batch norm op normalises (its first tensor of two or
    more dimensions: the input forward, the output's gradient backward); () for any
    other op."""
    if name not in BATCH_NORM:
        return ()
    t = next((x for x in tensors if x.dim() >= 2), None)
    return tuple(int(n) for n in t.shape) if t is not None else ()


def tensors_of(values: Any) -> list[torch.Tensor]:
    return [v for v in values if isinstance(v, torch.Tensor)]


def iteration(kclass: str, ins: list[torch.Tensor], outs: list[torch.Tensor]) -> tuple[int, int]:
    """(elements the kernel iterates over, elements it produces): a reduction iterates
    over its largest input and produces its largest output, any other op iterates over
    its largest output (or input)."""
    made = max((t.numel() for t in outs), default=0)
    if kclass == "reduction":
        return max((t.numel() for t in ins), default=made), made
    size = made or max((t.numel() for t in ins), default=0)
    return size, size


def stored_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements a tensor covers (a broadcast dimension once)."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            n *= int(size)
    return n * t.element_size()
