"""Values checked at the edge, each with its own one-line message: a shapelint YAML
target's settings, builder keyword arguments and input specs; a Hugging Face config's
attention heads and depth.

YAML is loose (``training: 'no'`` is a string, ``dtype: {a: 1}`` a mapping,
``99999999999999999999`` an int that overflows every tensor size): nothing it gives
reaches torch before these checks.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

from shapelint.errors import ShapelintError
from shapelint.files import INT64_MAX, is_int, positive_int, show
from shapelint.model.attention_keys import KV_HEAD_KEYS
from shapelint.model.dtypes import FSDP_DTYPES

#: the keys of one input spec
INPUT_KEYS = ("shape", "dtype", "high", "requires_grad")

#: settings a YAML target may carry that must be positive integers
POSITIVE_SETTINGS = ("batch", "seq", "tp", "dp", "fsdp", "gpus_per_node")


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
    for key in ("training", "sp"):
        if key in doc and not isinstance(doc[key], bool):
            raise ShapelintError(f"{where}: {key} must be true or false, got {show(doc[key])}")
    for key in ("fsdp_param_dtype", "fsdp_reduce_dtype"):
        if key in doc and doc[key] not in FSDP_DTYPES:
            raise ShapelintError(f"{where}: {key} must be one of {', '.join(FSDP_DTYPES)}, got {show(doc[key])}")


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
    _shape(spec["shape"], where)
    dtype = spec.get("dtype", "float")
    if not (isinstance(dtype, str) and dtype in dtypes):
        raise ShapelintError(f"{where}: unknown input dtype {show(dtype)} (one of {', '.join(dtypes)})")
    if "high" in spec:
        positive_int(spec["high"], f"{where}: high")
    if "requires_grad" in spec and not isinstance(spec["requires_grad"], bool):
        raise ShapelintError(f"{where}: requires_grad must be true or false, got {show(spec['requires_grad'])}")


def _shape(shape: Any, where: str) -> None:
    """An input's shape: a list of positive integers whose product a tensor can hold."""
    if not isinstance(shape, list) or not all(is_int(d) for d in shape):
        raise ShapelintError(f"{where}: shape must be a list of integers, got {show(shape)}")
    if any(d <= 0 for d in shape):
        raise ShapelintError(f"{where}: shape {show(shape)} has a zero or negative dimension")
    if math.prod(shape) > INT64_MAX:
        raise ShapelintError(f"{where}: shape {show(shape)} has more elements than a tensor can (2**63 - 1)")


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


# -- Hugging Face configs ------------------------------------------------------------

# the key/value heads of grouped-query attention (KV_HEAD_KEYS) must divide the query heads


def hf_heads(config: Any, doc: Mapping[str, Any], where: str) -> None:
    """A config whose key/value heads do not divide its query heads (``num_key_value_heads``
    3 of 4): transformers builds it, and it either traces into a meaningless shape
    error or lints silently green. Checked on the config (defaults included) and on
    its sub-configs (``text_config``...), naming the keys as the file spells them."""
    for cfg, sub, prefix in _configs(config, doc):
        heads = _count(getattr(cfg, "num_attention_heads", None))
        for attr in KV_HEAD_KEYS:
            kv = _count(getattr(cfg, attr, None))
            if heads is not None and kv is not None and heads % kv:
                raise ShapelintError(
                    f"{where}: {_setting(cfg, sub, prefix, 'num_attention_heads', heads)} is not a multiple of "
                    f"{_setting(cfg, sub, prefix, attr, kv)}: grouped-query attention gives every key/value head "
                    "the same number of query heads")


#: attributes that count a stack's layers (GPT-2's ``n_layer`` and T5's ``num_layers``
#: are ``num_hidden_layers`` through the config's attribute map)
LAYER_KEYS = ("num_hidden_layers", "encoder_layers", "decoder_layers", "num_decoder_layers")

#: the deepest stack a config may ask for. The largest published models have up to
#: about 130 layers; GPT-2 with 2,000 layers lints (in about 4 minutes and 1.1 GB on a
#: 2-core CPU), with 10,000 it ran 7 minutes and 2.8 GB and then crashed torch
#: (SIGSEGV: the C stack overflows while the autograd graph of the step is freed).
#: A layer's GEMM shapes repeat in every layer, so a shallower copy finds the same
#: shapes.
MAX_LAYERS = 1000


def hf_depth(config: Any, doc: Mapping[str, Any], where: str) -> None:
    """A config deeper than :data:`MAX_LAYERS` is refused before anything is built,
    naming the key."""
    for cfg, sub, prefix in _configs(config, doc):
        for attr in LAYER_KEYS:
            layers = _count(getattr(cfg, attr, None))
            if layers is not None and layers > MAX_LAYERS:
                raise ShapelintError(
                    f"{where}: {_setting(cfg, sub, prefix, attr, layers)} is more than the {MAX_LAYERS:,} layers "
                    "shapelint traces (deeper steps take minutes and gigabytes, and crash torch); the layers "
                    "repeat the same GEMM shapes: lint a copy with fewer")


def hf_heads_reason(config_class: Any, doc: Mapping[str, Any]) -> str | None:
    """Why transformers refused a config, in its keys, when its heads explain it: the
    hidden size is not a multiple of the number of heads (and the config sets no
    head size), or the key/value heads do not divide the query heads. None when
    neither holds (the caller then quotes transformers)."""
    amap = getattr(config_class, "attribute_map", None) or {}
    names = {attr: next((k for k in (attr, amap.get(attr)) if k and k in doc), None)
             for attr in ("hidden_size", "num_attention_heads", "head_dim", *KV_HEAD_KEYS)}
    heads_key, hidden_key = names["num_attention_heads"], names["hidden_size"]
    heads = _count_at(doc, heads_key)
    if heads is None:
        return None
    for attr in KV_HEAD_KEYS:
        kv_key = names[attr]
        kv = _count_at(doc, kv_key)
        if kv is not None and heads % kv:
            return (f"{heads_key} = {heads} is not a multiple of {kv_key} = {kv}: grouped-query attention gives "
                    "every key/value head the same number of query heads")
    hidden = _count_at(doc, hidden_key)
    if hidden is not None and hidden % heads and names["head_dim"] is None:
        return (f"{hidden_key} = {hidden} is not a multiple of the number of attention heads "
                f"({heads_key} = {heads})")
    return None


def _count(value: Any) -> int | None:
    """A positive integer count, else None (lists of per-stage heads, unset values)."""
    return value if is_int(value) and value > 0 else None


def _count_at(doc: Mapping[str, Any], key: str | None) -> int | None:
    """The positive integer count the file gives under ``key`` (None: no key, or no count)."""
    return _count(doc[key] if key else None)


def _configs(config: Any, doc: Mapping[str, Any], prefix: str = "") -> list[tuple[Any, Mapping[str, Any], str]]:
    """The config and its sub-configs, each with its part of the file and key prefix."""
    out = [(config, doc, prefix)]
    for name in getattr(config, "sub_configs", None) or {}:
        sub = getattr(config, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            part = doc.get(name)
            out += _configs(sub, part if isinstance(part, Mapping) else {}, f"{prefix}{name}.")
    return out


def _setting(config: Any, doc: Mapping[str, Any], prefix: str, attr: str, value: int) -> str:
    """``key = value`` with ``attr`` as the file spells it (GPT-2's ``n_head`` for
    ``num_attention_heads``); a key the file leaves out is marked as the default."""
    mapped = (getattr(config, "attribute_map", None) or {}).get(attr)
    for key in (attr, mapped):
        if key and key in doc:
            return f"{prefix}{key} = {value}"
    return f"{prefix}{mapped or attr} = {value} (the default)"


__all__ = ["INT64_MAX", "LAYER_KEYS", "MAX_LAYERS", "built", "hf_depth", "hf_heads",
           "hf_heads_reason", "input_spec", "inputs", "kwargs", "positive_int", "settings", "show"]
