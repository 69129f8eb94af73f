"""In-source suppression: ``# shapelint: ignore[SL101]`` comments.

A finding is suppressed when the source line it points at (``Finding.source``: the
line that constructs the layer, or the config key's line in a YAML target) carries

- ``# shapelint: ignore[SL101]`` or ``# shapelint: ignore[SL101, SL201]``: those
  codes (a rule's name, e.g. ``misaligned-leading-dim``, works too);
- ``# shapelint: ignore``: every rule.

A malformed ``# shapelint: ignore[SL202`` (no ``]``) or an empty ``ignore[]``
suppresses nothing; codes are matched exactly (``sl101`` is not ``SL101``).
:func:`problems` lists such comments and unknown codes, as ruff does for ``noqa``,
so that the CLI can report them instead of ignoring them silently.

Suppressed findings stay in the results (``suppressed=True``) so that
``--show-suppressed`` can show them, but they do not count for the exit code or the
estimated speedup. Files are only read, never written.

JSON has no comments, so a Hugging Face ``config.json`` cannot carry one: use
``per-module-ignores`` in the configuration or ``--ignore`` there.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from shapelint.errors import ShapelintError
from shapelint.files import read_bytes
from shapelint.model.records import Finding

#: the comment, up to the word ``ignore``; what follows decides its scope
PATTERN = re.compile(r"#\s*shapelint\s*:\s*ignore(?![\w-])", re.IGNORECASE)
_BRACKET = re.compile(r"\s*\[")
_SEPARATORS = re.compile(r"[,\s]+")
_CODE_LIKE = re.compile(r"^[A-Za-z]{2}\d+$")

ALL = frozenset({"*"})


@dataclass(frozen=True)
class Comment:
    """One ``# shapelint: ignore`` comment: ``codes`` None for a bare one (every
    rule); ``malformed`` when its ``[`` has no ``]`` (it then suppresses nothing)."""

    codes: tuple[str, ...] | None
    malformed: bool = False


def comments(line: str) -> list[Comment]:
    """The suppression comments on a line, in order."""
    out = []
    for m in PATTERN.finditer(line):
        rest = line[m.end():]
        bracket = _BRACKET.match(rest)
        if bracket is None:
            out.append(Comment(None))
            continue
        inside, closed, _ = rest[bracket.end():].partition("]")
        if not closed:
            out.append(Comment((), malformed=True))
            continue
        out.append(Comment(tuple(c for c in _SEPARATORS.split(inside) if c)))
    return out


def codes_on_line(line: str) -> frozenset[str] | None:
    """The codes a line suppresses: None when it has no comment, ``ALL`` for a bare
    one; a malformed ``ignore[SL101`` (no ``]``) and ``ignore[]`` suppress nothing."""
    found = comments(line)
    if not found:
        return None
    if any(c.codes is None for c in found):
        return ALL
    return frozenset(code for c in found for code in c.codes or ())


@dataclass(frozen=True)
class Problem:
    """A suppression comment that does not say what its author meant."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


def line_problems(line: str, known: Collection[str]) -> list[str]:
    """What is wrong with the comments on one line: a ``[`` without ``]``, an empty
    ``ignore[]``, a code or name no loaded rule has (``known``: every rule's code
    and name, also of rules not selected)."""
    out = []
    for c in comments(line):
        if c.malformed:
            out.append("malformed '# shapelint: ignore[': no closing ']' (it suppresses nothing)")
        elif c.codes == ():
            out.append("'# shapelint: ignore[]' names no rule (it suppresses nothing)")
        for code in c.codes or ():
            if code not in known:
                out.append(_unknown(code, known))
    return out


def _unknown(code: str, known: Collection[str]) -> str:
    if code.upper() in known and _CODE_LIKE.match(code):
        return f"'{code}' in '# shapelint: ignore[...]' is not a rule code: codes are upper case ({code.upper()})"
    return f"unknown rule '{code}' in '# shapelint: ignore[...]' (it suppresses nothing)"


def problems(file: str, known: Collection[str], reader: LineReader | None = None) -> list[Problem]:
    """Every suppression problem in ``file`` (read once through ``reader``)."""
    reader = reader or LineReader()
    return [Problem(file, no, msg) for no, line in enumerate(reader.lines(file), start=1)
            if "shapelint" in line.lower() for msg in line_problems(line, known)]


class LineReader:
    """Reads source files once each (read-only); unreadable files have no lines."""

    def __init__(self) -> None:
        self._cache: dict[str, list[str]] = {}

    def lines(self, file: str) -> list[str]:
        lines = self._cache.get(file)
        if lines is None:
            try:
                text = read_bytes(Path(file)).decode("utf-8", errors="replace")
            except ShapelintError:  # missing, not a regular file, too large
                text = ""
            lines = self._cache[file] = text.splitlines()
        return lines

    def line(self, file: str, no: int) -> str | None:
        lines = self.lines(file)
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


__all__ = ["ALL", "PATTERN", "Comment", "LineReader", "Problem", "apply", "codes_on_line", "comments",
           "is_suppressed", "line_problems", "problems", "unsuppressed"]
