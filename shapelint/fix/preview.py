"""The edit each fixable finding's fix makes, as data, for the machine outputs (the JSON
report's ``fix``, SARIF's ``fixes``): what a reviewer bot or GitHub code scanning needs
to offer the fix as a one-click suggestion. Nothing is written.

The edits are :func:`shapelint.fix.plan.plan`'s, the very plan ``--fix`` applies: the
same files, the same spans, the same conflicts dropped, the same ``--unsafe-fixes``
rule. Applying every edit of a report to a copy of the files therefore gives what
``--fix`` writes (``tests/test_fix_preview.py`` checks it on a config and a Python file).

Positions are 1-based lines and columns counted in characters (Unicode code points) of
the file as read, its byte-order mark left out; the end is exclusive, as ruff's JSON
and SARIF's regions have it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shapelint.fix.edits import Edit
from shapelint.fix.plan import Planned, plan
from shapelint.pipeline.result import Result


@dataclass(frozen=True)
class Position:
    """A place in a file: 1-based ``row`` (line) and ``column`` (characters)."""

    row: int
    column: int

    @classmethod
    def at(cls, text: str, offset: int) -> Position:
        line_start = text.rfind("\n", 0, offset) + 1
        return cls(text.count("\n", 0, offset) + 1, offset - line_start + 1)

    def to_json(self) -> dict[str, int]:
        return {"row": self.row, "column": self.column}


@dataclass(frozen=True)
class TextEdit:
    """Replace the characters from ``start`` up to (not including) ``end`` of ``file``
    by ``content``."""

    file: str
    start: Position
    end: Position
    content: str

    @classmethod
    def of(cls, edit: Edit) -> TextEdit:
        text = edit.doc.text
        return cls(str(edit.file), Position.at(text, edit.start), Position.at(text, edit.end), edit.new)

    def to_json(self) -> dict[str, Any]:
        """ruff's JSON edit (``content``, ``location``, ``end_location``), with the file."""
        return {"file": self.file, "content": self.content, "location": self.start.to_json(),
                "end_location": self.end.to_json()}


@dataclass(frozen=True)
class Fix:
    """One finding's fix: its edits, ``applicability`` ``safe`` or ``unsafe`` (applied
    only with ``--unsafe-fixes``), and a one-line ``message``."""

    edits: tuple[TextEdit, ...]
    applicability: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"applicability": self.applicability, "message": self.message,
                "edits": [e.to_json() for e in self.edits]}


#: a finding's place in a run's results: (its target, its index in ``Result.findings``)
Key = tuple[str, int]


def fixes(results: Sequence[Result], *, unsafe: bool = False, root: Path | None = None) -> dict[Key, Fix]:
    """The fix of each reported finding ``--fix`` would apply (``--fix --unsafe-fixes``
    with ``unsafe``), by :data:`Key`; ``root`` the project, as ``--fix`` is given it."""
    planned = plan(results, unsafe=unsafe, root=root)
    keys = [(r.target, i) for r in results for i, f in enumerate(r.findings) if not f.suppressed]
    # plan() gives one entry per reported finding, in this order
    return {key: _fix(p) for key, p in zip(keys, planned) if p.fixable}


def _fix(p: Planned) -> Fix:
    s = p.finding.suggestion
    what = f"{s.parameter}: {s.from_} → {s.to}" if s is not None else "apply the suggestion"
    return Fix(tuple(TextEdit.of(e) for e in p.edits), "unsafe" if p.unsafe else "safe",
               f"{what}" + (f" ({p.caveat})" if p.caveat else ""))


__all__ = ["Fix", "Key", "Position", "TextEdit", "fixes"]
