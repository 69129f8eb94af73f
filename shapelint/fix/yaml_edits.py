"""The integer tokens a fix of a shapelint YAML edits.

Only an integer written in decimal is edited. YAML 1.1 also reads ``0x1555``, ``0o17``,
``017``, ``1_000`` and ``1:30`` as integers; writing the new size in their place would
need their notation, and guessing it is not worth a wrong file: such a value is refused
with its reason.

The edit covers the integer's own characters and nothing else. PyYAML's node for
``width: &w 1023`` starts at the anchor; an edit of that whole span dropped ``&w`` and
left every ``*w`` an undefined alias (or, for ``!!int 1023``, dropped the tag).

One integer node may be read at several places (an anchor and its aliases, a merge key
``<<``). Editing it changes every one of them, so it is edited only when every place
that reads it is a size this fix changes (the size itself, an example input's width
that grows with it); an anchor another key also reads is refused, with the places.

Block style (``kwargs:`` then ``  in_features: 1023``) and flow style (``kwargs:
{in_features: 1023}``) are the same document and get the same edits: the size is the
one integer of that value under the builder's sections, narrowed by the finding's
line where the finding points into the YAML and by the parameter's name where several
remain; two candidates left are refused in either style.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from shapelint.fix.edits import Span
from shapelint.fix.files import Doc, NotFixed

#: YAML sections whose integers are the builder's sizes
YAML_SIZE_SECTIONS = ("kwargs", "hf_config")
#: an integer as --fix writes it, and the only form it edits
DECIMAL = re.compile(r"-?(0|[1-9][0-9]*)")
#: at most this many YAML nodes are looked at (aliases are visited once); a larger
#: document is refused rather than edited with some of its readers unseen
MAX_NODES = 100_000

#: a key path in a YAML document (mapping keys as text, sequence indices as ints)
KeyPath = tuple[Any, ...]


@dataclass
class IntNode:
    """An integer scalar of the document and every key path that reads it (more than
    one: it is anchored and aliased, or merged with ``<<``)."""

    node: Any
    paths: list[KeyPath] = field(default_factory=list)


def _int_nodes(root: Any, path: str) -> list[IntNode]:
    """Every integer scalar below ``root``, each once, with all the paths that reach it."""
    import yaml  # type: ignore[import-untyped]

    found: dict[int, IntNode] = {}
    # a mapping reached again through an alias or a ``<<`` merge is walked again, so that
    # every path reading its integers is seen (a value read by two keys is not edited as
    # one); the walk is bounded, which also ends a recursive alias
    visited = 0
    stack: list[tuple[KeyPath, Any]] = [((), root)]
    while stack:
        at, node = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            if node.tag == "tag:yaml.org,2002:int" and at:
                found.setdefault(id(node), IntNode(node)).paths.append(at)
            continue
        visited += 1
        if visited > MAX_NODES:
            raise NotFixed(f"{path}: more than {MAX_NODES:,} YAML nodes: edit it by hand")
        if isinstance(node, yaml.MappingNode):
            stack.extend(((*at, str(k.value)), v) for k, v in reversed(node.value))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(((*at, i), v) for i, v in reversed(list(enumerate(node.value))))
    return list(found.values())


def _int_of(node: Any) -> int | None:
    from yaml.constructor import ConstructorError, SafeConstructor

    try:
        number = SafeConstructor().construct_yaml_int(node)
    except (ConstructorError, ValueError, TypeError):
        return None
    return number if isinstance(number, int) else None


def _shown(p: KeyPath) -> str:
    return "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in p).lstrip(".")


class YamlDoc:
    """A shapelint YAML's integers of one value, with where each is written."""

    def __init__(self, doc: Doc, value: int) -> None:
        import yaml

        self.doc = doc
        self.value = value
        try:
            self.root = yaml.compose(doc.text, Loader=yaml.SafeLoader)
        except yaml.YAMLError as exc:
            raise NotFixed(f"{doc.path}: cannot read it as one YAML document ({exc})") from None
        self.nodes = [n for n in _int_nodes(self.root, str(doc.path)) if _int_of(n.node) == value]

    def span(self, n: IntNode) -> Span:
        """The integer's own characters (not an anchor ``&w`` or a tag ``!!int`` before it)."""
        node = n.node
        line = self.line(n)
        if node.style is not None or not DECIMAL.fullmatch(str(node.value)):
            raise NotFixed(f"{self.doc.path}:{line}: `{node.value}` is {self.value} written in another form than "
                           f"decimal (hex, octal, underscores or base 60 in YAML 1.1, or quoted): write it as "
                           f"{self.value} for --fix to change it")
        end = node.end_mark.index
        start = end - len(node.value)
        if self.doc.text[start:end] != node.value:
            raise NotFixed(f"{self.doc.path}:{line}: cannot find the characters of {self.value} on its line")
        return start, end

    def line(self, n: IntNode) -> int:
        return int(n.node.end_mark.line) + 1

    def where(self, paths: Sequence[KeyPath]) -> str:
        return ", ".join(_shown(p) for p in paths)


def _sizes(y: YamlDoc, lines: Sequence[int], names: Sequence[str]) -> list[tuple[IntNode, KeyPath]]:
    """The integer(s) that are the finding's size, each with the path it is read at as
    that size: the one on each of ``lines`` (the finding points into the YAML), else
    the one under the builder's sections; several on a line or in the sections are
    narrowed to those read under one of ``names``; [] when the YAML holds none."""
    if lines:
        return [_one(y, [(n, p) for n in y.nodes for p in n.paths if y.line(n) == line], names, f"on line {line}",
                     required=True)[0] for line in lines]
    found = _one(y, [(n, p) for n in y.nodes for p in n.paths if p[0] in YAML_SIZE_SECTIONS], names,
                 f"under {' or '.join(YAML_SIZE_SECTIONS)}", required=False)
    return found


def _one(y: YamlDoc, found: list[tuple[IntNode, KeyPath]], names: Sequence[str], where: str, *,
         required: bool) -> list[tuple[IntNode, KeyPath]]:
    if len(found) > 1:
        named = [(n, p) for n, p in found if p[-1] in names]
        found = named if len(named) == 1 else found
    if len(found) > 1:
        lines = ", ".join(str(y.line(n)) for n, _ in found)
        raise NotFixed(f"{y.doc.path}: {y.value} is given {len(found)} times {where} ({y.where([p for _, p in found])}; "
                       f"lines {lines}): shapelint cannot tell which one is this size")
    if not found and required:
        raise NotFixed(f"{y.doc.path}: no integer {y.value} {where}")
    return found


def _widths(y: YamlDoc, index: int) -> Iterator[tuple[IntNode, KeyPath]]:
    """The example inputs' sizes at ``index`` of their ``shape`` that hold the value."""
    for n in y.nodes:
        for p in n.paths:
            if p[0] == "inputs" and len(p) >= 3 and p[-2] == "shape" and _is_width(y.root, p, n.node, index):
                yield n, p


def _unshared(y: YamlDoc, edited: Sequence[tuple[IntNode, KeyPath]]) -> None:
    """Every path that reads an edited integer must be one this fix changes: an anchor
    another key aliases (``in_features: &w 1023`` and ``out_features: *w``) is refused."""
    claimed = {p for _, p in edited}
    for n, p in edited:
        others = [q for q in n.paths if q not in claimed]
        if others:
            raise NotFixed(f"{y.doc.path}:{y.line(n)}: {y.value} at {_shown(p)} is an anchor also read at "
                           f"{y.where(others)}: editing it would change those too; give {_shown(p)} its own value "
                           f"to fix it")


def yaml_spans(doc: Doc, lines: Sequence[int], value: int, input_width: int | None,
               names: Sequence[str] = ()) -> tuple[list[Span], list[str]]:
    """The integers ``value`` of a shapelint YAML to edit: the size (:func:`_sizes`)
    and, with ``input_width`` (the index, in an input's ``shape``, of the features the
    layer takes), that size of every example input; and the names of the mapping keys
    that hold the size (whether the fix is safe depends on what the key is: a builder's
    ``d`` may size more than this layer; a list's item has no name of its own). Empty when the YAML holds no such integer
    (the size is in the builder's code)."""
    y = YamlDoc(doc, value)
    sizes = _sizes(y, lines, names)
    if not sizes:
        return [], []
    edited = list(sizes)
    if input_width is not None:
        edited += [w for w in _widths(y, input_width) if w not in edited]
    _unshared(y, edited)
    for n, p in edited:
        _single_keys(y, n, p)
    return list(dict.fromkeys(y.span(n) for n, _ in edited)), [p[-1] for _, p in sizes if isinstance(p[-1], str)]


def _single_keys(y: YamlDoc, n: IntNode, path: KeyPath) -> None:
    """Every key on ``path`` is given once in its mapping. YAML keeps the last of a
    duplicated key: the first one is dead text, and the line a finding points at (or
    the first match) may be it (``in_features: 1023`` twice: the edit of the first
    changed nothing the model reads)."""
    node: Any = y.root
    for step in path:
        if isinstance(step, int):
            node = node.value[step]
            continue
        matches = [v for k, v in node.value if str(k.value) == step]
        if len(matches) > 1:
            raise NotFixed(f"{y.doc.path}:{y.line(n)}: the key {step} is given {len(matches)} times in one mapping "
                           f"(YAML keeps the last): remove the others to fix it")
        node = matches[0]


def _is_width(root: Any, path: KeyPath, node: Any, index: int) -> bool:
    """Whether ``node`` (at ``path``, ending ``shape, i``) is the ``index``-th size of its
    shape (a negative index counts from the end)."""
    shape = _at(root, path[:-1])
    items = getattr(shape, "value", None)
    if not isinstance(items, list):
        return False
    position = index if index >= 0 else len(items) + index
    return 0 <= position < len(items) and items[position] is node and path[-1] == position


def _at(root: Any, path: KeyPath) -> Any:
    node = root
    for step in path:
        items = node.value
        node = items[step] if isinstance(step, int) else next((v for k, v in items if str(k.value) == step), None)
        if node is None:
            return None
    return node


__all__ = ["YAML_SIZE_SECTIONS", "yaml_spans"]
