"""The value tokens a fix of a ``config.json`` or a shapelint YAML edits.

JSON: the value of the exact key path the finding was located at
(``details.config_key``), found by :mod:`shapelint.load.json_tokens` as ``json.loads`` reads
the file (the last of duplicated keys; never the same key of a nested object on the
same line). After the edit the file is parsed again and must differ from before in
those keys only.

YAML: only integers written in decimal are edited. YAML 1.1 also reads ``0x1555``,
``0o17``, ``017``, ``1_000`` and ``1:30`` as integers; writing the new size in their
place would need their notation, and guessing it is not worth a wrong file: such a
value is refused with its reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

from shapelint.fix.edits import Span
from shapelint.fix.files import Doc, NotFixed
from shapelint.load.json_tokens import paths, scan

#: YAML sections whose integers are the builder's sizes
YAML_SIZE_SECTIONS = ("kwargs", "hf_config")
#: an integer as --fix writes it, and the only form it edits
DECIMAL = re.compile(r"-?(0|[1-9][0-9]*)")
#: at most this many YAML nodes are looked at (aliases are visited once)
MAX_NODES = 100_000


# -- JSON -----------------------------------------------------------------------------------


def json_spans(doc: Doc, keys: Sequence[str], value: int) -> list[Span]:
    """The value tokens of ``keys`` (dotted paths), each the integer ``value``."""
    root = scan(doc.text)
    if root is None or root.kind != "object":
        raise NotFixed(f"{doc.path}: not one JSON object")
    found = paths(root)
    spans = []
    for key in keys:
        v = found.get(key)
        if v is None:
            raise NotFixed(f"{doc.path}: no key {key} (or one spelled two ways)")
        if v.integer(doc.text) != value:
            raise NotFixed(f"{doc.path}: {key} is {doc.text[v.start:v.end]}, not {value}")
        spans.append((v.start, v.end))
    return spans


def check_json(doc: Doc, new_text: str, keys: Sequence[str]) -> None:
    """The edited JSON must read as before but for ``keys`` (a last line of defence
    against an edit in the wrong place)."""
    try:
        before, after = json.loads(doc.text), json.loads(new_text)
    except ValueError as exc:
        raise NotFixed(f"{doc.path}: the edit would not be valid JSON ({exc})") from None
    changed = sorted(_differences(before, after, ""))
    if changed != sorted(set(keys)):
        raise NotFixed(f"{doc.path}: the edit would change {', '.join(changed) or 'nothing'}, not {', '.join(keys)}")


def _differences(a: Any, b: Any, path: str) -> Iterator[str]:
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        for k in a:
            yield from _differences(a[k], b[k], f"{path}.{k}" if path else k)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from _differences(x, y, f"{path}[{i}]")
    elif a != b or type(a) is not type(b):
        yield path


# -- YAML -----------------------------------------------------------------------------------


def _int_scalars(root: Any) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """(key path, scalar node) of every integer scalar, each node once (aliases share nodes)."""
    import yaml  # type: ignore[import-untyped]

    seen: set[int] = set()
    stack: list[tuple[tuple[Any, ...], Any]] = [((), root)]
    while stack:
        path, node = stack.pop()
        if id(node) in seen or len(seen) > MAX_NODES:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            stack.extend(((*path, str(k.value)), v) for k, v in reversed(node.value))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(((*path, i), v) for i, v in reversed(list(enumerate(node.value))))
        elif isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:int" and path:
            yield path, node


def _int_of(node: Any) -> int | None:
    from yaml.constructor import ConstructorError, SafeConstructor

    try:
        number = SafeConstructor().construct_yaml_int(node)
    except (ConstructorError, ValueError, TypeError):
        return None
    return number if isinstance(number, int) else None


def _decimal(doc: Doc, node: Any, value: int) -> Span:
    if not DECIMAL.fullmatch(str(node.value)):
        line = node.start_mark.line + 1
        raise NotFixed(f"{doc.path}:{line}: `{node.value}` is {value} written in another form than decimal (hex, "
                       f"octal, underscores or base 60 in YAML 1.1): write it as {value} for --fix to change it")
    return node.start_mark.index, node.end_mark.index


def yaml_spans(doc: Doc, lines: Sequence[int], value: int, input_width: int | None) -> list[Span]:
    """The integers ``value`` of a shapelint YAML: on each of ``lines`` (the keys the
    finding points at), else the one under the builder's sections (``kwargs``,
    ``hf_config``). With ``input_width`` (the index, in an input's ``shape``, of the
    features the layer takes), also that size of every example input. Empty when the
    YAML holds no such integer (the size is in the builder's code)."""
    import yaml

    try:
        root = yaml.compose(doc.text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise NotFixed(f"{doc.path}: cannot read it as one YAML document ({exc})") from None
    nodes = [(p, n) for p, n in _int_scalars(root) if _int_of(n) == value]
    if lines:
        return [_decimal(doc, n, value) for n in _on_lines(doc, nodes, lines, value)]
    size = _builder_size(doc, nodes, value)
    if size is None:
        return []
    spans = [_decimal(doc, size, value)]
    if input_width is not None:
        spans += [_decimal(doc, n, value) for p, n in nodes
                  if p[0] == "inputs" and len(p) >= 3 and p[-2] == "shape" and _is_width(p, n, root, input_width)]
    return spans


#: an integer scalar of a YAML document and its key path
Located = tuple[tuple[Any, ...], Any]


def _on_lines(doc: Doc, nodes: Sequence[Located], lines: Sequence[int], value: int) -> list[Any]:
    """The integer on each of ``lines``, or NotFixed when one has none."""
    chosen = [next((n for _, n in nodes if n.start_mark.line + 1 == line), None) for line in lines]
    found = [n for n in chosen if n is not None]
    if len(found) != len(lines):
        raise NotFixed(f"{doc.path}: no integer {value} on line {', '.join(map(str, lines))}")
    return found


def _builder_size(doc: Doc, nodes: Sequence[Located], value: int) -> Any:
    """The one integer under the builder's sections (None: none; NotFixed: several)."""
    sizes = [n for p, n in nodes if p[0] in YAML_SIZE_SECTIONS]
    if len(sizes) > 1:
        where = ", ".join(str(n.start_mark.line + 1) for n in sizes)
        raise NotFixed(f"{doc.path}: {value} is given {len(sizes)} times (lines {where}): shapelint cannot tell which "
                       f"one is this size")
    return sizes[0] if sizes else None


def _is_width(path: tuple[Any, ...], node: Any, root: Any, index: int) -> bool:
    """Whether ``node`` (at ``path``, ending ``shape, i``) is the ``index``-th size of its
    shape (a negative index counts from the end)."""
    shape = _at(root, path[:-1])
    items = getattr(shape, "value", None)
    if not isinstance(items, list):
        return False
    position = index if index >= 0 else len(items) + index
    return 0 <= position < len(items) and items[position] is node


def _at(root: Any, path: tuple[Any, ...]) -> Any:
    node = root
    for step in path:
        items = node.value
        node = items[step] if isinstance(step, int) else next((v for k, v in items if str(k.value) == step), None)
        if node is None:
            return None
    return node


__all__ = ["YAML_SIZE_SECTIONS", "check_json", "json_spans", "yaml_spans"]
