"""The precision a step runs in: the compute dtypes a user trains with, the dtype
names records carry, and how the model and its inputs are cast (autocast over fp32
weights for the 16-bit precisions, as a mixed-precision step runs)."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from shapelint.capture import autocast
from shapelint.model.dtypes import AUTOCAST_PRECISIONS, NAMES_OF_TORCH, PRECISION_NAMES, TORCH_DTYPE_NAMES

#: the compute precisions a user can train with, and the torch dtype GEMMs run in
PRECISIONS: dict[str, torch.dtype] = {name: getattr(torch, TORCH_DTYPE_NAMES[name]) for name in PRECISION_NAMES}

_DTYPE_NAMES: dict[torch.dtype, str] = {getattr(torch, attr): name for attr, name in NAMES_OF_TORCH.items()
                                        if hasattr(torch, attr)}


def dtype_name(dtype: torch.dtype, precision: str) -> str:
    name = _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))
    if name == "fp32" and precision == "tf32":
        return "tf32"
    return name


def to_precision(model: torch.nn.Module, inputs: Any, precision: str) -> Any:
    """Put floating parameters, buffers and inputs in the dtype the step keeps them
    in, keeping tied parameters tied, and return the new inputs: fp32 for the
    16-bit precisions (the default step: autocast over fp32 weights, which casts
    each GEMM's operands), the GEMM dtype otherwise. (``Module.to`` cannot swap
    fake parameters, so they are replaced one by one.)"""
    dtype = torch.float32 if precision in AUTOCAST_PRECISIONS else PRECISIONS[precision]
    done: dict[int, torch.nn.Parameter] = {}
    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is None or not p.is_floating_point() or p.dtype == dtype:
                continue
            if id(p) not in done:
                done[id(p)] = torch.nn.Parameter(p.detach().to(dtype), requires_grad=p.requires_grad)
            mod._parameters[name] = done[id(p)]
        for name, b in list(mod._buffers.items()):
            if b is not None and b.is_floating_point() and b.dtype != dtype:
                mod._buffers[name] = b.to(dtype)
    return cast_tree(inputs, dtype)


def cast_tree(x: Any, dtype: torch.dtype) -> Any:
    """Every floating tensor in ``x`` (tensors, dicts, tuples, lists) in ``dtype``,
    keeping whether it requires grad."""
    if isinstance(x, torch.Tensor):
        if x.is_floating_point() and x.dtype != dtype:
            return x.detach().to(dtype).requires_grad_(x.requires_grad)
        return x
    if isinstance(x, dict):
        return {k: cast_tree(v, dtype) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(cast_tree(v, dtype) for v in x)
    return x


def autocast_context(precision: str) -> Any:
    """Autocast to a 16-bit precision, as a mixed-precision step runs: GEMMs run in it
    whatever their inputs' dtype (an explicit ``.float()`` included)."""
    dtype = PRECISIONS[precision]
    autocast.install()  # also the meta kernels an fp32 step needs
    if dtype not in (torch.bfloat16, torch.float16):
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype=dtype)


def operand_dtype(name: str, tensors: list[torch.Tensor]) -> torch.dtype:
    """The dtype the GEMM multiplies in: its first matrix operand's (``addmm`` and
    ``baddbmm`` lead with the bias / accumulator, which may differ)."""
    if name in ("addmm", "_addmm_activation", "baddbmm") and len(tensors) > 1:
        return tensors[1].dtype
    return tensors[0].dtype if tensors else torch.float32
