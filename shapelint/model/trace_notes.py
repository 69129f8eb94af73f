"""What the trace assumed where the model's own code asked for a value a fake tensor
does not have: the host reads it answered (``HostRead``), and the changes it made to
the step's inputs (a loss that rejected shapelint's labels). The reporters show both,
so a user can see which branch of the library's code the estimate is for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HostRead:
    """A value the model's code read on the host (``.item()``, ``bool(t)``,
    ``.tolist()``, a boolean mask's ``nonzero``) from a tensor the trace has no values
    for, answered as a healthy training step answers it."""

    #: the library or user file whose code read it (the first frame outside torch,
    #: shapelint, the standard library and transformers' check helpers)
    file: str
    line: int
    #: that line's source text
    source: str
    #: what the read was answered with: ``True`` (a check that holds), ``False`` (no
    #: exceptional element), or ``all selected`` (a mask that keeps every element)
    answer: str

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "source": self.source, "answer": self.answer}

    def describe(self) -> str:
        """``assumed `if not mask.any():` is False (fsmt/modeling_fsmt.py:266)``."""
        return f"assumed `{self.source}` reads {self.answer} ({self.file}:{self.line})"
