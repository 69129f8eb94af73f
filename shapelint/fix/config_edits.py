"""The value tokens a fix of a ``config.json`` edits (a shapelint YAML's:
:mod:`shapelint.fix.yaml_edits`).

JSON: the value of the exact key path the finding was located at
(``details.config_key``), found by :mod:`shapelint.load.json_tokens` as ``json.loads`` reads
the file (the last of duplicated keys; never the same key of a nested object on the
same line). After the edit the file is parsed again and must differ from before in
those keys only.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from shapelint.fix.edits import Span
from shapelint.fix.files import Doc, NotFixed
from shapelint.load.json_tokens import paths, scan

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


__all__ = ["check_json", "json_spans"]
