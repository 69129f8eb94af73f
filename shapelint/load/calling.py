"""Calling a target's own code (a ``shapelint_model()``, a YAML's builder): behind the
one boundary where a stack walk for user frames stops, with the ``batch``/``seq``
keywords the function takes, and what it returns checked."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from shapelint.capture.sources import boundary
from shapelint.errors import ShapelintError
from shapelint.files import check_regular
from shapelint.load.usercode import import_user_file, user_code


@boundary
def call_target_code(fn: Callable[..., Any], file: Path, what: str, paths: Sequence[Path] = (), /,
                     **kwargs: Any) -> Any:
    """``fn(**kwargs)``: user code from ``file`` (importing from ``paths`` too),
    behind the one boundary."""
    with user_code(file, what, paths):
        return fn(**kwargs)


@boundary
def import_target_file(path: Path) -> Any:
    """A user's Python file as a fresh module, behind the one boundary."""
    check_regular(path)
    return import_user_file(path)


def size_kwargs(fn: Callable[..., Any], batch: int | None, seq: int | None) -> dict[str, int]:
    """``batch`` and ``seq`` for a function that takes them as keywords (``--batch``/``--seq``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    out = {}
    if batch is not None and "batch" in params:
        out["batch"] = batch
    if seq is not None and "seq" in params:
        out["seq"] = seq
    return out


def check_built(result: Any, what: str) -> tuple[torch.nn.Module, Any]:
    """What a target's function returned, as (model, example inputs)."""
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.nn.Module)):
        raise ShapelintError(f"{what} must return (model, example_inputs), got {type(result).__name__}")
    model, inputs = result
    if not isinstance(inputs, (torch.Tensor, tuple, list, dict)):
        raise ShapelintError(f"{what}: example_inputs must be a tensor, a tuple of tensors or a dict, "
                             f"got {type(inputs).__name__}")
    return model, inputs
