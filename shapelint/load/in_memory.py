"""A model the user already holds (the Python API, ``calibrate``): a copy of it on fake
tensors, loaded as a target is, so that nothing of the model or its inputs is read,
allocated or changed.

``fake_copy`` traces a copy whose parameters and buffers are fake tensors of the same
shapes, dtypes and strides (built from meta tensors, so a model on a GPU, on the CPU or
on the meta device costs no memory); capture puts the copy in training mode and casts
it to the compute dtype.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._pytree import tree_map

from shapelint.capture.recorder import RecordingFakeMode
from shapelint.errors import ShapelintError
from shapelint.load.loaded import Loaded


def loaded_from_module(model: torch.nn.Module, example_inputs: Any) -> Loaded:
    """``model`` and its example inputs as a loaded target, on fake tensors."""
    if not isinstance(model, torch.nn.Module):
        raise ShapelintError(f"lint(): model must be a torch.nn.Module, got {type(model).__name__}")
    mode = RecordingFakeMode()
    inputs = tree_map(lambda x: _fake(x, mode) if isinstance(x, torch.Tensor) else x, example_inputs)
    return Loaded(f"<{type(model).__name__}>", "python", fake_copy(model, mode), inputs, mode)


def fake_copy(model: torch.nn.Module, mode: FakeTensorMode) -> torch.nn.Module:
    """A copy of ``model`` whose parameters, buffers and tensor attributes are fake
    tensors of ``mode`` (same shapes, dtypes, strides; on the CPU): the deep copy is
    told their copies beforehand, so no tensor data is read or allocated. Tied
    parameters stay tied; the copy of a ``torch.compile`` wrapper is its model's."""
    model = getattr(model, "_orig_mod", model)
    memo: dict[int, Any] = {}
    for mod in model.modules():
        for p in mod._parameters.values():
            if p is not None and id(p) not in memo:
                memo[id(p)] = torch.nn.Parameter(_fake(p, mode), requires_grad=p.requires_grad)
        tensors = [*mod._buffers.values(), *(v for v in vars(mod).values() if isinstance(v, torch.Tensor))]
        for t in tensors:
            if t is not None and id(t) not in memo:
                memo[id(t)] = _fake(t, mode)
    try:
        return copy.deepcopy(model, memo)
    except Exception as exc:  # noqa: BLE001 - a model that cannot be copied
        raise ShapelintError(f"lint(): cannot copy {type(model).__name__} to trace it on fake tensors: "
                             f"{type(exc).__name__}: {exc}") from exc


def _fake(t: torch.Tensor, mode: FakeTensorMode) -> torch.Tensor:
    meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    fake = FakeTensor(mode, meta, torch.device("cpu"))
    return fake.requires_grad_(t.requires_grad) if t.is_floating_point() and t.requires_grad else fake



__all__ = ["fake_copy", "loaded_from_module"]
