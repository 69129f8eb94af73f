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
from collections.abc import Mapping, Sequence
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


def _is_union(tp: Any) -> bool:
    return _origin(tp) in (typing.Union, types.UnionType)


def _is_any(tp: Any) -> bool:
    return tp is Any or tp is object


# -- encoding ---------------------------------------------------------------------------


def encode(value: Any, tp: Any = None) -> Any:
    """``value`` as JSON data, by its type ``tp`` (default: its class)."""
    return _encode(value, type(value) if tp is None else tp, "$")


def _encode(value: Any, tp: Any, where: str) -> Any:
    if _is_any(tp):
        return _encode_any(value, where, 0)
    if _is_union(tp):
        return _encode_union(value, tp, where)
    if _origin(tp) is typing.Literal or tp in (int, float, str, bool, type(None)):
        return _encode_scalar(value, where)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, tp):
            raise EncodeError(f"{where}: expected {tp.__name__}, got {type(value).__name__}")
        hints = _hints(tp)
        return {name: _encode(getattr(value, name), hints[name], f"{where}.{name}") for name in _init_fields(tp)}
    origin, args = _origin(tp), typing.get_args(tp)
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        if not isinstance(value, tuple) or len(value) != len(args):
            raise EncodeError(f"{where}: expected a tuple of {len(args)}")
        return [_encode(v, t, f"{where}[{i}]") for i, (v, t) in enumerate(zip(value, args))]
    if origin in (tuple, list, Sequence, typing.Sequence) or tp in (list, tuple):
        item = args[0] if args else Any
        return [_encode(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin in (dict, Mapping, typing.Mapping) or tp is dict:
        key_tp, value_tp = args if args else (Any, Any)
        if key_tp is str:
            return {_key(k, where): _encode(v, value_tp, f"{where}.{k}") for k, v in value.items()}
        return [[_encode(k, key_tp, where), _encode(v, value_tp, f"{where}[{k!r}]")] for k, v in value.items()]
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
    if _is_any(arm):
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


def _encode_scalar(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value
    raise EncodeError(f"{where}: {type(value).__name__} is not a JSON scalar")


def _encode_any(value: Any, where: str, depth: int) -> Any:
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
    if _is_any(tp):
        return _decode_any(data, where, 0)
    if _is_union(tp):
        return _decode_union(tp, data, where)
    origin, args = _origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        if data not in args or type(data) not in {type(a) for a in args}:
            raise DecodeError(f"{where}: {data!r} is none of {args!r}")
        return data
    if tp in (int, float, str, bool, type(None)):
        return _decode_scalar(tp, data, where)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _decode_dataclass(tp, data, where)
    if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        items = _array(data, where)
        if len(items) != len(args):
            raise DecodeError(f"{where}: expected {len(args)} items, got {len(items)}")
        return tuple(_decode(t, v, f"{where}[{i}]") for i, (t, v) in enumerate(zip(args, items)))
    if origin in (tuple, list, Sequence, typing.Sequence) or tp in (list, tuple):
        item = args[0] if args else Any
        out = [_decode(item, v, f"{where}[{i}]") for i, v in enumerate(_array(data, where))]
        return tuple(out) if origin is tuple or tp is tuple else out
    if origin in (dict, Mapping, typing.Mapping) or tp is dict:
        return _decode_dict(args if args else (Any, Any), data, where)
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


def _decode_dict(args: tuple[Any, ...], data: Any, where: str) -> dict[Any, Any]:
    key_tp, value_tp = args
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


def _decode_any(data: Any, where: str, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise DecodeError(f"{where}: nested too deeply")
    if data is None or isinstance(data, (bool, int, str)):
        return data
    if isinstance(data, float):
        return data
    if isinstance(data, list):
        return [_decode_any(v, where, depth + 1) for v in data]
    if isinstance(data, dict):
        if set(data) == {_TUPLE}:
            return tuple(_decode_any(v, where, depth + 1) for v in _array(data[_TUPLE], where))
        if set(data) == {_DICT}:
            pairs = _array(data[_DICT], where)
            out = {}
            for pair in pairs:
                if not isinstance(pair, list) or len(pair) != 2:
                    raise DecodeError(f"{where}: expected a [key, value] pair")
                key = _decode_any(pair[0], where, depth + 1)
                try:
                    out[key] = _decode_any(pair[1], where, depth + 1)
                except TypeError:
                    raise DecodeError(f"{where}: unhashable key") from None
            return out
        return {k: _decode_any(v, where, depth + 1) for k, v in data.items()}
    raise DecodeError(f"{where}: {type(data).__name__} is not JSON data")


__all__ = ["DecodeError", "EncodeError", "decode", "encode"]
