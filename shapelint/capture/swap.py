"""A module attribute replaced for the duration of a ``with`` body (``torch.rand``,
``torch.compile``, ``torch.nn.functional.dropout`` ...), then put back whatever happens:
how the capture makes the trace run what the GPU runs. An attribute swap, not a
TorchFunctionMode, which would route every torch call of the step through Python."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def swapped(owner: Any, name: str, replacement: Any) -> Iterator[None]:
    """``owner.<name>`` is ``replacement`` inside the ``with`` body, and what it was after."""
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield
    finally:
        setattr(owner, name, original)


__all__ = ["swapped"]
