"""A Python target: a file defining ``shapelint_model()`` that returns ``(model,
example_inputs)`` (a tensor, a tuple of tensors, or a dict of keyword arguments). It
may take ``batch`` and/or ``seq`` keyword arguments, which ``--batch``/``--seq`` then set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from shapelint.capture.traceable import check_on_cpu
from shapelint.errors import ShapelintError
from shapelint.load import validate
from shapelint.load.calling import call_target_code, check_built, import_target_file, size_kwargs
from shapelint.load.fake import fake_construction
from shapelint.load.loaded import Loaded
from shapelint.load.usercode import quiet_torch_logs
from shapelint.model.records import Source


def load_python(path: Path, *, batch: int | None = None, seq: int | None = None) -> Loaded:
    quiet_torch_logs()
    defined_at: dict[int, Source] = {}
    with fake_construction(defined_at) as mode:
        model, inputs = python_model(path, batch, seq)
    validate.built(model, inputs, f"{path}: shapelint_model()")
    check_on_cpu(model, inputs, str(path))
    return Loaded(str(path), "python", model, inputs, mode, defined_at)


def python_model(path: Path, batch: int | None, seq: int | None) -> tuple[torch.nn.Module, Any]:
    """What the file's ``shapelint_model()`` returns, in the caller's construction context
    (fake tensors for the lint, a device for ``--verify --step``)."""
    module = import_target_file(path)
    fn = getattr(module, "shapelint_model", None)
    if not callable(fn):
        raise ShapelintError(
            f"{path}: defines no shapelint_model() returning (model, example_inputs)"
        )
    result = call_target_code(fn, path, "shapelint_model()", **size_kwargs(fn, batch, seq))
    return check_built(result, f"{path}: shapelint_model()")
