"""Shapelint's dataclasses as inert JSON data, and back.

The result cache and the ``--fix`` re-lint (a fresh process) hand results over as
data, never as code: :func:`encode` turns a value of a known type into plain JSON
(objects, arrays, strings, numbers, booleans, null), and :func:`decode` builds a value
of a given type from such data, checking every field against the type's annotations.
Nothing but the dataclasses reachable from that type and Python's builtin scalars and
containers can come out of it: no class is looked up by a name found in the data, no
constructor but a dataclass's own runs, and data that does not fit the type exactly (a
missing or an unknown field, a string where an int belongs, a value outside a
``Literal``) raises :class:`DecodeError`.

How types map (the encoding is type-directed, so that a tuple comes back a tuple):

======================  =====================================================
type                    JSON
======================  =====================================================
dataclass               object of its ``init`` fields
``tuple[X, ...]``,      array
``tuple[X, Y]``,
``list[X]``,
``Sequence[X]``
``dict[str, V]``        object
``dict[K, V]``          array of ``[key, value]`` pairs (K not ``str``)
``X | None``, unions    the arm the value is (decoded: the first arm that fits)
``Literal[...]``        the value
``Any``, ``object``     JSON as it is; a tuple as ``{"__tuple__": [...]}``, a
                        dict whose keys are not all strings as
                        ``{"__dict__": [[key, value], ...]}``
======================  =====================================================
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

#: the tags of ``Any`` values JSON has no form for
_TUPLE, _DICT = "__tuple__", "__dict__"
#: deepest nesting of ``Any`` data accepted (a record is a few levels deep)
_MAX_DEPTH = 64


class DecodeError(ValueError):
    """Data that does not fit the type it should be (the message says where)."""


class EncodeError(TypeError):
    """A value that has no JSON form under its type (a callable, an unknown class)."""


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def _init_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.init)


@functools.cache
def _required(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls) if f.init and f.default is dataclasses.MISSING
                     and f.default_factory is dataclasses.MISSING)


def _origin(tp: Any) -> Any:
    return typing.get_origin(tp)


_SCALARS = (int, float, str, bool, type(None))


@functools.cache
def _kind(tp: Any) -> str:
    """Which of the forms in the module docstring ``tp`` takes."""
    origin, args = _origin(tp), typing.get_args(tp)
    if tp is Any or tp is object:
        return "any"
    if origin in (typing.Union, types.UnionType):
        return "union"
    if origin is typing.Literal:
        return "literal"
    if tp in _SCALARS:
        return "scalar"
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return "dataclass"
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        return "fixed_tuple"
    if origin in (tuple, list, Sequence, typing.Sequence) or tp in (list, tuple):
        return "sequence"
    if origin in (dict, Mapping, typing.Mapping) or tp is dict:
        return "mapping"
    return "unknown"


def _item_type(tp: Any) -> Any:
    args = typing.get_args(tp)
    return args[0] if args else Any


def _pair_types(tp: Any) -> tuple[Any, Any]:
    args = typing.get_args(tp)
    return (args[0], args[1]) if args else (Any, Any)


# -- encoding ---------------------------------------------------------------------------


def encode(value: Any, tp: Any = None) -> Any:
    """``value`` as JSON data, by its type ``tp`` (default: its class)."""
    return _encode(value, type(value) if tp is None else tp, "$")


def _encode(value: Any, tp: Any, where: str) -> Any:
    return _ENCODERS[_kind(tp)](value, tp, where)


def _encode_dataclass(value: Any, tp: Any, where: str) -> Any:
    if not isinstance(value, tp):
        raise EncodeError(f"{where}: expected {tp.__name__}, got {type(value).__name__}")
    hints = _hints(tp)
    return {name: _encode(getattr(value, name), hints[name], f"{where}.{name}") for name in _init_fields(tp)}


def _encode_fixed_tuple(value: Any, tp: Any, where: str) -> Any:
    args = typing.get_args(tp)
    if not isinstance(value, tuple) or len(value) != len(args):
        raise EncodeError(f"{where}: expected a tuple of {len(args)}")
    return [_encode(v, t, f"{where}[{i}]") for i, (v, t) in enumerate(zip(value, args))]


def _encode_sequence(value: Any, tp: Any, where: str) -> Any:
    if not isinstance(value, (list, tuple)):
        raise EncodeError(f"{where}: expected a sequence, got {type(value).__name__}")
    item = _item_type(tp)
    return [_encode(v, item, f"{where}[{i}]") for i, v in enumerate(value)]


def _encode_mapping(value: Any, tp: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise EncodeError(f"{where}: expected a dict, got {type(value).__name__}")
    key_tp, value_tp = _pair_types(tp)
    if key_tp is str:
        return {_key(k, where): _encode(v, value_tp, f"{where}.{k}") for k, v in value.items()}
    return [[_encode(k, key_tp, where), _encode(v, value_tp, f"{where}[{k!r}]")] for k, v in value.items()]


def _encode_unknown(value: Any, tp: Any, where: str) -> Any:
    raise EncodeError(f"{where}: no JSON form for {tp!r}")


def _key(k: Any, where: str) -> str:
    if not isinstance(k, str):
        raise EncodeError(f"{where}: key {k!r} is not a string")
    return k


def _encode_union(value: Any, tp: Any, where: str) -> Any:
    if value is None:
        return None
    for arm in typing.get_args(tp):
        if arm is type(None):
            continue
        if _fits(value, arm):
            return _encode(value, arm, where)
    raise EncodeError(f"{where}: {type(value).__name__} is none of {tp!r}")


def _fits(value: Any, arm: Any) -> bool:
    """Whether ``value`` is of the union arm ``arm`` (to pick the arm that encodes it)."""
    if _kind(arm) == "any":
        return True
    if _origin(arm) is typing.Literal:
        return value in typing.get_args(arm)
    origin = _origin(arm) or arm
    if origin in (Sequence, typing.Sequence):
        origin = (list, tuple)
    if origin in (Mapping, typing.Mapping):
        origin = dict
    if arm is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if arm is int:
        return type(value) is int
    return isinstance(value, origin)


def _encode_scalar(value: Any, tp: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, str, float)):
        return value
    raise EncodeError(f"{where}: {type(value).__name__} is not a JSON scalar")


def _encode_any(value: Any, where: str, depth: int = 0) -> Any:
    if depth > _MAX_DEPTH:
        raise EncodeError(f"{where}: nested too deeply")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return {_TUPLE: [_encode_any(v, where, depth + 1) for v in value]}
    if isinstance(value, list):
        return [_encode_any(v, where, depth + 1) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and not ({_TUPLE, _DICT} & set(value)):
            return {k: _encode_any(v, where, depth + 1) for k, v in value.items()}
        return {_DICT: [[_encode_any(k, where, depth + 1), _encode_any(v, where, depth + 1)]
                        for k, v in value.items()]}
    raise EncodeError(f"{where}: {type(value).__name__} has no JSON form")


# -- decoding ---------------------------------------------------------------------------


def decode(tp: Any, data: Any) -> Any:
    """A value of type ``tp`` built from JSON ``data``, or :class:`DecodeError`."""
    try:
        return _decode(tp, data, "$")
    except RecursionError:
        raise DecodeError("$: nested too deeply") from None


def _decode(tp: Any, data: Any, where: str) -> Any:
    return _DECODERS[_kind(tp)](tp, data, where)


def _decode_literal(tp: Any, data: Any, where: str) -> Any:
    args = typing.get_args(tp)
    if data not in args or type(data) not in {type(a) for a in args}:
        raise DecodeError(f"{where}: {data!r} is none of {args!r}")
    return data


def _decode_fixed_tuple(tp: Any, data: Any, where: str) -> Any:
    args = typing.get_args(tp)
    items = _array(data, where)
    if len(items) != len(args):
        raise DecodeError(f"{where}: expected {len(args)} items, got {len(items)}")
    return tuple(_decode(t, v, f"{where}[{i}]") for i, (t, v) in enumerate(zip(args, items)))


def _decode_sequence(tp: Any, data: Any, where: str) -> Any:
    item = _item_type(tp)
    out = [_decode(item, v, f"{where}[{i}]") for i, v in enumerate(_array(data, where))]
    return tuple(out) if _origin(tp) is tuple or tp is tuple else out


def _decode_unknown(tp: Any, data: Any, where: str) -> Any:
    raise DecodeError(f"{where}: cannot build {tp!r} from data")


def _array(data: Any, where: str) -> list[Any]:
    if not isinstance(data, list):
        raise DecodeError(f"{where}: expected an array, got {type(data).__name__}")
    return data


def _decode_scalar(tp: type, data: Any, where: str) -> Any:
    if tp is type(None):
        if data is not None:
            raise DecodeError(f"{where}: expected null")
        return None
    if tp is float:
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return float(data)
    elif type(data) is tp:
        return data
    raise DecodeError(f"{where}: expected {tp.__name__}, got {type(data).__name__}")


def _decode_union(tp: Any, data: Any, where: str) -> Any:
    arms = typing.get_args(tp)
    if data is None and type(None) in arms:
        return None
    for arm in arms:
        if arm is type(None):
            continue
        try:
            return _decode(arm, data, where)
        except DecodeError:
            continue
    raise DecodeError(f"{where}: {type(data).__name__} fits none of {tp!r}")


def _decode_dataclass(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise DecodeError(f"{where}: expected an object for {cls.__name__}, got {type(data).__name__}")
    known = _init_fields(cls)
    unknown = set(data) - set(known)
    missing = _required(cls) - set(data)
    if unknown or missing:
        raise DecodeError(f"{where}: {cls.__name__} " + ("has no field " + ", ".join(sorted(unknown)) if unknown
                                                          else "lacks " + ", ".join(sorted(missing))))
    hints = _hints(cls)
    kwargs = {name: _decode(hints[name], data[name], f"{where}.{name}") for name in known if name in data}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise DecodeError(f"{where}: {cls.__name__}: {exc}") from None


def _decode_dict(tp: Any, data: Any, where: str) -> dict[Any, Any]:
    key_tp, value_tp = _pair_types(tp)
    if key_tp is str:
        if not isinstance(data, dict):
            raise DecodeError(f"{where}: expected an object, got {type(data).__name__}")
        return {k: _decode(value_tp, v, f"{where}.{k}") for k, v in data.items()}
    out = {}
    for i, pair in enumerate(_array(data, where)):
        if not isinstance(pair, list) or len(pair) != 2:
            raise DecodeError(f"{where}[{i}]: expected a [key, value] pair")
        out[_decode(key_tp, pair[0], f"{where}[{i}]")] = _decode(value_tp, pair[1], f"{where}[{i}]")
    return out


def _decode_any(data: Any, where: str, depth: int = 0) -> Any:
    if depth > _MAX_DEPTH:
        raise DecodeError(f"{where}: nested too deeply")
    if data is None or isinstance(data, (bool, int, str, float)):
        return data
    if isinstance(data, list):
        return [_decode_any(v, where, depth + 1) for v in data]
    if not isinstance(data, dict):
        raise DecodeError(f"{where}: {type(data).__name__} is not JSON data")
    if set(data) == {_TUPLE}:
        return tuple(_decode_any(v, where, depth + 1) for v in _array(data[_TUPLE], where))
    if set(data) == {_DICT}:
        return _decode_any_pairs(data[_DICT], where, depth)
    return {k: _decode_any(v, where, depth + 1) for k, v in data.items()}


def _decode_any_pairs(data: Any, where: str, depth: int) -> dict[Any, Any]:
    out = {}
    for pair in _array(data, where):
        if not isinstance(pair, list) or len(pair) != 2:
            raise DecodeError(f"{where}: expected a [key, value] pair")
        key = _decode_any(pair[0], where, depth + 1)
        try:
            out[key] = _decode_any(pair[1], where, depth + 1)
        except TypeError:
            raise DecodeError(f"{where}: unhashable key") from None
    return out


_ENCODERS: dict[str, Callable[[Any, Any, str], Any]] = {
    "any": lambda value, tp, where: _encode_any(value, where),
    "union": lambda value, tp, where: _encode_union(value, tp, where),
    "literal": _encode_scalar,
    "scalar": _encode_scalar,
    "dataclass": _encode_dataclass,
    "fixed_tuple": _encode_fixed_tuple,
    "sequence": _encode_sequence,
    "mapping": _encode_mapping,
    "unknown": _encode_unknown,
}
_DECODERS: dict[str, Callable[[Any, Any, str], Any]] = {
    "any": lambda tp, data, where: _decode_any(data, where),
    "union": _decode_union,
    "literal": _decode_literal,
    "scalar": _decode_scalar,
    "dataclass": _decode_dataclass,
    "fixed_tuple": _decode_fixed_tuple,
    "sequence": _decode_sequence,
    "mapping": _decode_dict,
    "unknown": _decode_unknown,
}

__all__ = ["DecodeError", "EncodeError", "decode", "encode"]
