"""Where each value of a JSON document lies in its text, as ``json.loads`` reads it.

``--fix`` must change the one token that holds a config key's value. A regular
expression over a line cannot tell a key from the same key of a nested object on
that line, a key from a string that looks like one (``"note": "\\"vocab_size\\": 1"``),
or which of two duplicated keys counts. This module scans the text token by token
(strings with their escapes, numbers, literals, punctuation) and builds the tree of
values with their character spans. For an object, a key given twice keeps its last
value, as ``json.loads`` does (a ``dict`` assignment), and the earlier value's
subtree is gone with it: nothing under it can be found or edited.

Paths are written as :mod:`shapelint.locate.config_keys` writes them: ``vocab_size``,
``text_config.hidden_size``, ``hidden_sizes[2]``.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

#: JSON tokens (Python's json also takes NaN, Infinity and -Infinity as values)
_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"')
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_LITERAL = re.compile(r"true|false|null|NaN|Infinity|-Infinity")
_SPACE = re.compile(r"[ \t\n\r]*")
#: deepest nesting scanned (a config is a few levels deep; this keeps the recursion bounded)
MAX_DEPTH = 200


@dataclass
class Value:
    """One JSON value: its text is ``text[start:end]``; an object's ``members`` (last
    duplicate wins) or an array's ``items``."""

    start: int
    end: int
    kind: str  # "object" | "array" | "number" | "string" | "literal"
    members: dict[str, Value] = field(default_factory=dict)
    items: list[Value] = field(default_factory=list)

    def integer(self, text: str) -> int | None:
        """The value as an int when it is an integer token (``12``, not ``12.0`` or ``1e3``)."""
        token = text[self.start:self.end]
        if self.kind != "number" or any(c in token for c in ".eE"):
            return None
        return int(token)


class _Invalid(Exception):
    """The text is not one JSON document."""


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def space(self) -> None:
        m = _SPACE.match(self.text, self.pos)
        self.pos = m.end() if m else self.pos

    def expect(self, char: str) -> None:
        self.space()
        if not self.text.startswith(char, self.pos):
            raise _Invalid(f"expected {char!r} at {self.pos}")
        self.pos += 1

    def peek(self) -> str:
        self.space()
        return self.text[self.pos:self.pos + 1]

    def value(self, depth: int) -> Value:
        if depth > MAX_DEPTH:
            raise _Invalid("nested too deeply")
        first = self.peek()
        if first == "{":
            return self.obj(depth)
        if first == "[":
            return self.array(depth)
        for kind, pattern in (("string", _STRING), ("literal", _LITERAL), ("number", _NUMBER)):
            m = pattern.match(self.text, self.pos)
            if m and m.end() > self.pos:
                self.pos = m.end()
                return Value(m.start(), m.end(), kind)
        raise _Invalid(f"no value at {self.pos}")

    def obj(self, depth: int) -> Value:
        start = self.pos
        self.expect("{")
        out = Value(start, start, "object")
        first = True
        while self.peek() != "}":
            if not first:
                self.expect(",")
            first = False
            self.space()
            m = _STRING.match(self.text, self.pos)
            if m is None:
                raise _Invalid(f"expected a key at {self.pos}")
            self.pos = m.end()
            key = json.loads(m.group())
            self.expect(":")
            out.members.pop(key, None)  # the last duplicate wins, as in json.loads
            out.members[key] = self.value(depth + 1)
        self.expect("}")
        out.end = self.pos
        return out

    def array(self, depth: int) -> Value:
        start = self.pos
        self.expect("[")
        out = Value(start, start, "array")
        while self.peek() != "]":
            if out.items:
                self.expect(",")
            out.items.append(self.value(depth + 1))
        self.expect("]")
        out.end = self.pos
        return out


def scan(text: str) -> Value | None:
    """The document's top-level value with every span, or None when ``text`` is not
    one JSON value (trailing text, a syntax error)."""
    s = _Scanner(text)
    try:
        root = s.value(0)
        s.space()
    except (_Invalid, ValueError, RecursionError):
        return None
    return root if s.pos == len(text) else None


def leaves(root: Value, path: str = "") -> Iterator[tuple[str, Value]]:
    """(path, value) of every value under ``root``, in document order."""
    if root.kind == "object":
        for key, child in root.members.items():
            sub = f"{path}.{key}" if path else key
            yield sub, child
            yield from leaves(child, sub)
    elif root.kind == "array":
        for i, child in enumerate(root.items):
            sub = f"{path}[{i}]"
            yield sub, child
            yield from leaves(child, sub)


def paths(root: Value) -> dict[str, Value]:
    """Path -> value; a path two values share (a key with a ``.`` or ``[`` in it can
    spell another key's path) names neither."""
    out: dict[str, Value] = {}
    clash: set[str] = set()
    for path, value in leaves(root):
        if path in out:
            clash.add(path)
        out[path] = value
    for path in clash:
        del out[path]
    return out


def int_keys(text: str) -> dict[str, tuple[int, int]] | None:
    """Path -> (value, line) of every integer of a JSON object (``json.loads``'s view:
    the last of duplicated keys), None when ``text`` is not one JSON object."""
    root = scan(text)
    if root is None or root.kind != "object":
        return None
    starts = [m.end() for m in re.finditer("\n", text)]
    out = {}
    for path, value in paths(root).items():
        number = value.integer(text)
        if number is not None:
            out[path] = (number, bisect.bisect_right(starts, value.start) + 1)
    return out


__all__ = ["Value", "int_keys", "leaves", "paths", "scan"]
