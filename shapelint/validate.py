"""Values checked at the edge, each with its own one-line message: a shapelint YAML
target's settings, builder keyword arguments and input specs.

YAML is loose (``training: 'no'`` is a string, ``dtype: {a: 1}`` a mapping,
``99999999999999999999`` an int that overflows every tensor size): nothing it gives
reaches torch before these checks.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

from shapelint.errors import ShapelintError, cap_length

#: the largest tensor dimension (and element count) torch can index: int64
INT64_MAX = 2**63 - 1

#: the keys of one input spec
INPUT_KEYS = ("shape", "dtype", "high", "requires_grad")

#: settings a YAML target may carry that must be positive integers
POSITIVE_SETTINGS = ("batch", "seq", "tp")


def show(value: Any, cap: int = 60) -> str:
    """A value in a message: its repr, cut short."""
    return cap_length(repr(value), cap)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(value: Any, what: str) -> int:
    """A dimension: an integer in 1 .. int64."""
    if not is_int(value):
        raise ShapelintError(f"{what} must be a positive integer, got {show(value)}")
    if value <= 0:
        raise ShapelintError(f"{what} = {value}: dimensions must be positive")
    if value > INT64_MAX:
        raise ShapelintError(f"{what} = {show(value)}: larger than a tensor dimension can be (2**63 - 1)")
    return int(value)


def settings(doc: Mapping[str, Any], where: str, precisions: Collection[str]) -> None:
    """A YAML target's own settings: ``dtype``, ``gpu``, ``training``, ``batch``,
    ``seq``, ``tp``."""
    for key in POSITIVE_SETTINGS:
        if key in doc:
            positive_int(doc[key], f"{where}: {key}")
    if "dtype" in doc and not (isinstance(doc["dtype"], str) and doc["dtype"] in precisions):
        raise ShapelintError(f"{where}: dtype must be one of {', '.join(precisions)}, got {show(doc['dtype'])}")
    if "gpu" in doc and not (isinstance(doc["gpu"], str) and doc["gpu"].strip()):
        raise ShapelintError(f"{where}: gpu must be a GPU name such as h100, got {show(doc['gpu'])}")
    if "training" in doc and not isinstance(doc["training"], bool):
        raise ShapelintError(f"{where}: training must be true or false, got {show(doc['training'])}")


def kwargs(values: Any, where: str) -> dict[str, Any]:
    """A builder's keyword arguments: a mapping with identifier keys; a top-level
    integer is a size (positive); no integer anywhere beyond int64."""
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ShapelintError(f"{where}: kwargs must be a mapping, got {show(values)}")
    for key, value in values.items():
        if not (isinstance(key, str) and key.isidentifier()):
            raise ShapelintError(f"{where}: kwargs: {show(key)} is not a keyword argument name")
        if is_int(value):
            positive_int(value, f"{where}: kwargs.{key}")
        _bounded_ints(value, f"{where}: kwargs.{key}")
    return dict(values)


def _bounded_ints(value: Any, what: str) -> None:
    if is_int(value) and abs(value) > INT64_MAX:
        raise ShapelintError(f"{what}: {show(value)} is larger than int64")
    if isinstance(value, dict):
        for k, v in value.items():
            _bounded_ints(v, f"{what}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _bounded_ints(v, f"{what}[{i}]")


def inputs(specs: Any, where: str, dtypes: Collection[str]) -> None:
    """``inputs:``: a list or a mapping of input specs."""
    if isinstance(specs, dict):
        for name, spec in specs.items():
            if not (isinstance(name, str) and name.isidentifier()):
                raise ShapelintError(f"{where}: inputs: {show(name)} is not a keyword argument name")
            input_spec(spec, f"{where}: inputs.{name}", dtypes)
    elif isinstance(specs, list):
        for i, spec in enumerate(specs):
            input_spec(spec, f"{where}: inputs[{i}]", dtypes)
    elif specs is not None:
        raise ShapelintError(f"{where}: inputs must be a list or a mapping of input specs, got {show(specs)}")


def input_spec(spec: Any, where: str, dtypes: Collection[str]) -> None:
    """``[8, 1024]`` or ``{shape: [8, 1024], dtype: int64, high: 50257, requires_grad: false}``."""
    if isinstance(spec, list):
        spec = {"shape": spec}
    if not isinstance(spec, dict) or "shape" not in spec:
        raise ShapelintError(f"{where}: an input needs a shape, e.g. {{shape: [8, 1024]}}")
    unknown = [k for k in spec if k not in INPUT_KEYS]
    if unknown:
        raise ShapelintError(f"{where}: unknown key {show(unknown[0])} (known: {', '.join(INPUT_KEYS)})")
    shape = spec["shape"]
    if not isinstance(shape, list) or not all(is_int(d) for d in shape):
        raise ShapelintError(f"{where}: shape must be a list of integers, got {show(shape)}")
    if any(d <= 0 for d in shape):
        raise ShapelintError(f"{where}: shape {show(shape)} has a zero or negative dimension")
    if math.prod(shape) > INT64_MAX:
        raise ShapelintError(f"{where}: shape {show(shape)} has more elements than a tensor can (2**63 - 1)")
    dtype = spec.get("dtype", "float")
    if not (isinstance(dtype, str) and dtype in dtypes):
        raise ShapelintError(f"{where}: unknown input dtype {show(dtype)} (one of {', '.join(dtypes)})")
    if "high" in spec:
        positive_int(spec["high"], f"{where}: high")
    if "requires_grad" in spec and not isinstance(spec["requires_grad"], bool):
        raise ShapelintError(f"{where}: requires_grad must be true or false, got {show(spec['requires_grad'])}")


def built(model: Any, inputs: Any, where: str) -> None:
    """What a builder returned: no parameter and no example input with a zero-size
    dimension (``nn.Linear(0, 64)``, a zero batch), which would give empty GEMMs that
    no rule can price."""
    for name, param in model.named_parameters():
        if 0 in tuple(param.shape):
            raise ShapelintError(f"{where}: parameter {name} has shape {list(param.shape)}: "
                                 "dimensions must be positive")
    for label, shape in _input_shapes(inputs, "example input"):
        if 0 in shape:
            raise ShapelintError(f"{where}: {label} has shape {list(shape)}: dimensions must be positive")


def _input_shapes(inputs: Any, label: str) -> list[tuple[str, tuple[int, ...]]]:
    if isinstance(inputs, dict):
        return [s for k, v in inputs.items() for s in _input_shapes(v, f"{label} {k!r}")]
    if isinstance(inputs, (tuple, list)):
        return [s for i, v in enumerate(inputs) for s in _input_shapes(v, f"{label} {i}")]
    shape = getattr(inputs, "shape", None)
    return [(label, tuple(shape))] if shape is not None else []


__all__ = ["INT64_MAX", "built", "input_spec", "inputs", "kwargs", "positive_int", "settings", "show"]
