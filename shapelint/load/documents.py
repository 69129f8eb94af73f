"""A target file read as a document: a JSON object or a YAML mapping at the top level
(through the size- and depth-checked parsers of :mod:`shapelint.files`), and the line
of each integer setting, so findings and ``--fix`` can name it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from shapelint.errors import ShapelintError
from shapelint.files import parse_json, parse_yaml, read_text


def read_json(path: Path) -> dict[str, Any]:
    doc = parse_json(read_text(path), str(path))
    if not isinstance(doc, dict):
        raise ShapelintError(f"{path}: expected a JSON object at the top level")
    return doc


def read_yaml(path: Path) -> dict[str, Any]:
    doc = parse_yaml(read_text(path), str(path))
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ShapelintError(f"{path}: expected a mapping at the top level, got {type(doc).__name__}")
    return doc


_INT_LINE = re.compile(r'^\s*"?([A-Za-z_][\w.]*)"?\s*:\s*(-?\d+)\s*,?\s*(#.*)?$')


def int_lines(text: str) -> dict[str, tuple[int, int]]:
    """key -> (value, line) for every ``key: <integer>`` line of a JSON or YAML file
    (the first occurrence of a key wins)."""
    out: dict[str, tuple[int, int]] = {}
    for no, line in enumerate(text.splitlines(), start=1):
        m = _INT_LINE.match(line)
        if m and m.group(1) not in out:
            out[m.group(1)] = (int(m.group(2)), no)
    return out
