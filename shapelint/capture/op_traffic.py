"""What a recorded op streams through memory: the tensors it reads and writes, how many
elements its kernel iterates over, and the bytes each tensor really covers. The recorder
(``shapelint.capture.recorder``) prices every op's traffic with these."""

from __future__ import annotations

from typing import Any

import torch


def stream_layout(kclass: str, tensors: list[torch.Tensor]) -> tuple[int, bool]:
    """(the widest floating element size, whether a copy or pointwise op runs on
    TensorIterator's non-vectorised path): it reads or writes a tensor that is neither
    contiguous nor dense channels-last, or it mixes the two layouts (a channels-last
    activation plus an NCHW one). Every tensor contiguous, or every one channels-last,
    is vectorised (``vectorized_elementwise_kernel`` in the H100 profile of a
    channels-last MBConv step; ``elementwise_kernel<128, 4>`` where layouts mix)."""
    widest = max((t.element_size() for t in tensors if t.is_floating_point()), default=2)
    if kclass not in ("copy", "pointwise"):
        return widest, False
    layouts = {_layout(t) for t in tensors if t.dim() > 1}
    strided = "strided" in layouts or {"contiguous", "channels_last"} <= layouts
    return widest, strided


#: the channels-last memory format of a tensor of each rank
_CHANNELS_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}


def _layout(t: torch.Tensor) -> str:
    """``any`` (one pixel: both layouts), ``contiguous``, ``channels_last`` or ``strided``."""
    contiguous = t.is_contiguous()
    fmt = _CHANNELS_LAST.get(t.dim())
    last = fmt is not None and t.is_contiguous(memory_format=fmt)
    if contiguous and last:
        return "any"
    return "contiguous" if contiguous else "channels_last" if last else "strided"


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
