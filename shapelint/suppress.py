"""In-source suppression: ``# shapelint: ignore[SL101]`` comments.

A finding is suppressed when the source line it points at (``Finding.source``: the
line that constructs the layer, or the config key's line in a YAML target) carries

- ``# shapelint: ignore[SL101]`` or ``# shapelint: ignore[SL101, SL201]``: those
  codes (a rule's name, e.g. ``misaligned-leading-dim``, works too);
- ``# shapelint: ignore``: every rule.

Suppressed findings stay in the results (``suppressed=True``) so that
``--show-suppressed`` can show them, but they do not count for the exit code or the
estimated speedup. Files are only read, never written.

JSON has no comments, so a Hugging Face ``config.json`` cannot carry one: use
``per-module-ignores`` in the configuration or ``--ignore`` there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from shapelint.records import Finding

#: the comment; group "codes" is None for a bare ``# shapelint: ignore``
PATTERN = re.compile(r"#\s*shapelint\s*:\s*ignore(?![\w-])(?:\s*\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)

ALL = frozenset({"*"})


def codes_on_line(line: str) -> frozenset[str] | None:
    """The codes a line suppresses: None when it has no comment, ``ALL`` for a bare one."""
    matches = list(PATTERN.finditer(line))
    if not matches:
        return None
    found: set[str] = set()
    for m in matches:
        codes = m.group("codes")
        if codes is None:
            return ALL
        found.update(c.strip() for c in codes.split(",") if c.strip())
    return frozenset(found)  # ``ignore[]`` suppresses nothing


class LineReader:
    """Reads source files once each (read-only); unreadable files have no lines."""

    def __init__(self) -> None:
        self._cache: dict[str, list[str]] = {}

    def line(self, file: str, no: int) -> str | None:
        lines = self._cache.get(file)
        if lines is None:
            try:
                text = Path(file).read_text(encoding="utf-8", errors="replace")
            except OSError:
                text = ""
            lines = self._cache[file] = text.splitlines()
        return lines[no - 1] if 1 <= no <= len(lines) else None


def is_suppressed(f: Finding, reader: LineReader) -> bool:
    if f.source is None:
        return False
    line = reader.line(f.source.file, f.source.line)
    if line is None:
        return False
    codes = codes_on_line(line)
    if codes is None:
        return False
    return codes is ALL or f.code in codes or f.name in codes


def apply(findings: Sequence[Finding], reader: LineReader | None = None) -> list[Finding]:
    """Mark the findings whose source line suppresses them."""
    reader = reader or LineReader()
    return [replace(f, suppressed=True) if not f.suppressed and is_suppressed(f, reader) else f
            for f in findings]


def unsuppressed(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if not f.suppressed]


__all__ = ["PATTERN", "apply", "codes_on_line", "is_suppressed", "unsuppressed"]
