"""A YAML target's ``inputs:``: each input spec (``[8, 1024]`` or ``{shape: [8, 1024],
dtype: int64, high: 50257, requires_grad: false}``) made into an example tensor.
:func:`shapelint.load.validate.inputs` checks the specs first, against
:data:`TORCH_DTYPES`; this module only builds them."""

from __future__ import annotations

from typing import Any

import torch

#: the dtype names an input spec may give ("float": torch's default dtype)
TORCH_DTYPES = {
    "float": None, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16, "int64": torch.int64, "long": torch.int64,
    "int32": torch.int32, "bool": torch.bool,
}


def input_from_spec(spec: Any) -> torch.Tensor:
    """One checked input spec as a tensor: integer inputs drawn from [0, ``high``),
    floating ones normal (requiring grad where the spec says so)."""
    if isinstance(spec, list):
        spec = {"shape": spec}
    shape = tuple(spec["shape"])
    dtype = TORCH_DTYPES[str(spec.get("dtype", "float"))]
    if dtype is not None and not dtype.is_floating_point:
        return torch.randint(0, spec.get("high", 2), shape, dtype=dtype)
    t = torch.randn(shape, dtype=dtype or torch.get_default_dtype())
    return t.requires_grad_(bool(spec.get("requires_grad", False)))


def inputs_from_specs(specs: list[Any] | dict[str, Any]) -> tuple[torch.Tensor, ...] | dict[str, torch.Tensor]:
    """``inputs:`` as example inputs: a list as positional arguments, a mapping as keyword ones."""
    if isinstance(specs, dict):
        return {k: input_from_spec(v) for k, v in specs.items()}
    return tuple(input_from_spec(v) for v in specs)
