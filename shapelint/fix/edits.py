"""What one edit of ``--fix`` is, how the edits of one file apply to its text, and when
two fixes conflict.

Every edit of a file is an offset into the same text, the file as it was read. Applied
from the last to the first, an edit never moves the offsets of the ones still to
apply. Two fixes may propose the very same edit (two findings of one value: the same
span, the same new text), which is applied once; any other pair of edits that touch
the same characters conflicts, and the later fix is dropped rather than applied over
the earlier one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from shapelint.fix.files import Doc

#: (start, end) offsets of the characters an edit replaces
Span = tuple[int, int]


@dataclass(frozen=True)
class Edit:
    """Replace ``doc.text[start:end]`` by ``new``; ``file`` is the file as the finding
    names it, ``doc`` what was read (through a symlink: the file it points to)."""

    file: Path
    start: int
    end: int
    new: str
    doc: Doc = field(compare=False, repr=False)

    @property
    def real(self) -> Path:
        return self.doc.path


def apply_text(text: str, edits: Mapping[Span, str]) -> str:
    """``text`` with each span replaced by its new text, the last span first (so that the
    offsets of the others still hold). The spans must not overlap (`conflicts`)."""
    for (start, end), new in sorted(edits.items(), reverse=True):
        text = text[:start] + new + text[end:]
    return text


#: the edits fixes planned so far: (file as read, start, end) -> new text
Taken = dict[tuple[Path, int, int], str]


def conflicts(edits: Iterable[Edit], taken: Taken) -> bool:
    """Whether any of ``edits`` writes other text over a span already taken, or touches
    part of a taken span (the same span with the same text is the same edit)."""
    return any(taken.get((e.real, e.start, e.end), e.new) != e.new or overlaps(e, taken) for e in edits)


def overlaps(e: Edit, taken: Taken) -> bool:
    """Whether ``e`` shares characters with a taken span of its file other than its own."""
    return any(file == e.real and (start, end) != (e.start, e.end) and start < e.end and e.start < end
               for file, start, end in taken)


def take(edits: Iterable[Edit], taken: Taken) -> None:
    """Record ``edits`` as planned."""
    for e in edits:
        taken[(e.real, e.start, e.end)] = e.new


__all__ = ["Edit", "Span", "Taken", "apply_text", "conflicts", "overlaps", "take"]
