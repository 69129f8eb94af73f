"""Dropout as the GPU runs it. On a CUDA tensor ``F.dropout`` runs ATen's fused
``native_dropout`` kernel (``at::dropout`` takes it where ``is_fused_kernel_acceptable``:
CUDA, 0 < p < 1): forward one kernel that reads the input and writes the output and a
one-byte mask, backward one kernel (``native_dropout_backward``) that reads the
gradient and the mask. Off CUDA (the trace runs on the CPU) the same call decomposes
into a mask drawn (``bernoulli_``), scaled in place (``div_``) and applied (``mul``),
three kernels forward with the mask in the input's dtype, which the step model would
price as such. The swap makes the trace record what the GPU runs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from shapelint.capture.swap import swapped


@contextlib.contextmanager
def fused_dropout() -> Iterator[None]:
    """Run ``torch.nn.functional.dropout`` as the fused CUDA kernel for the duration
    (``nn.Dropout`` and library code look the function up on the module at call time;
    the function is swapped: ``shapelint.capture.swap``)."""
    functional = torch.nn.functional
    original = functional.dropout

    def dropout(input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        if not training or not 0.0 < p < 1.0 or inplace or not isinstance(input, torch.Tensor) \
                or not input.is_floating_point() or input.numel() == 0:
            return original(input, p, training, inplace)
        return torch.ops.aten.native_dropout.default(input, p, True)[0]

    with swapped(functional, "dropout", dropout):
        yield


__all__ = ["fused_dropout"]
