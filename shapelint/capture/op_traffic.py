"""What a recorded op streams through memory: the tensors it reads and writes, how many
elements its kernel iterates over, and the bytes each tensor really covers. The recorder
(``shapelint.capture.recorder``) prices every op's traffic with these."""

from __future__ import annotations

from typing import Any

import torch


def stream_layout(kclass: str, tensors: list[torch.Tensor]) -> tuple[int, bool]:
    """(the widest floating element size, whether a copy or pointwise op reads or
    writes a non-contiguous tensor)."""
    widest = max((t.element_size() for t in tensors if t.is_floating_point()), default=2)
    strided = kclass in ("copy", "pointwise") and any(not t.is_contiguous() for t in tensors if t.dim() > 1)
    return widest, strided


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
