"""A model and its inputs in another memory format for one more trace, as a user who
follows SL402 runs them (``model.to(memory_format=torch.channels_last)`` and
channels-last images), and the model as it was afterwards.

The tensors converted are the ones ``Module.to(memory_format=...)`` converts: every
4-D parameter and buffer. ``Module.to`` itself swaps a fake parameter for a new one,
which the fake mode's weak references to it refuse, so each parameter gets new data in
place and each buffer is replaced. The lint goes on with the model as the user wrote it
(locating findings, ``--dump-graph``), so every converted tensor, and each parameter's
gradient (a trace's backward leaves one, which a second backward would accumulate
into), is put back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._pytree import tree_map

#: each memory format shapelint converts a model to, and the rank of the tensors it applies to
FORMATS: dict[str, tuple[torch.memory_format, int]] = {"channels_last": (torch.channels_last, 4)}


def _converted_input(value: Any, fmt: torch.memory_format, rank: int) -> Any:
    """A floating input tensor of the format's rank (images) in that format (a leaf stays
    a leaf); integer tensors (token ids, masks) as they are."""
    if not isinstance(value, torch.Tensor) or value.dim() != rank or not value.is_floating_point():
        return value
    out = value.detach().to(memory_format=fmt)
    return out.requires_grad_() if value.requires_grad and value.is_leaf else out


def converted_inputs(inputs: Any, name: str) -> Any:
    """``inputs`` with each tensor of the format's rank in memory format ``name``."""
    fmt, rank = FORMATS[name]
    return tree_map(lambda v: _converted_input(v, fmt, rank), inputs)


@contextmanager
def in_memory_format(model: torch.nn.Module, inputs: Any, name: str) -> Iterator[Any]:
    """``model`` converted to memory format ``name`` (a key of ``FORMATS``) inside the
    block, which receives ``inputs`` converted likewise; the model as it was after."""
    fmt, rank = FORMATS[name]
    params = [(p, p.data, p.grad) for p in model.parameters()]
    buffers = [(m, dict(m._buffers)) for m in model.modules()]
    try:
        for p, _, _ in params:
            p.grad = None
        for p, data, _ in params:
            if data.dim() == rank:
                p.data = data.to(memory_format=fmt)
        for m, saved in buffers:
            m._buffers.update({k: b.to(memory_format=fmt) for k, b in saved.items()
                               if isinstance(b, torch.Tensor) and b.dim() == rank})
        yield converted_inputs(inputs, name)
    finally:
        for p, data, grad in params:
            p.data, p.grad = data, grad
        for m, saved in buffers:
            m._buffers.clear()
            m._buffers.update(saved)


__all__ = ["FORMATS", "converted_inputs", "in_memory_format"]
