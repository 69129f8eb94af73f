"""What replay keeps while the model runs: each group of alike layers, each member,
each call that ran for real between marks, each replayed call, and the span of
records a call made."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from shapelint.capture.recorder import Recorder
from shapelint.capture.replay.calls import Form, Meta, Out, Signature
from shapelint.capture.rows import OpRow, Position, ShapeRow

#: the end of a span that is still open
_OPEN = Position(-1, -1, -1)


@dataclass
class Span:
    """The records made between two moments of the recording: GEMM records, ops, and
    the serial numbers given (``start.serial``, ``end.serial``]."""

    start: Position
    end: Position = _OPEN
    #: how many host syncs and graph breaks the recording held at the start and at the end
    marks_start: tuple[int, int] = (0, 0)
    marks_end: tuple[int, int] = (0, 0)

    @staticmethod
    def open(rec: Recorder) -> Span:
        return Span(rec.position(), marks_start=_marks(rec))

    def close(self, rec: Recorder) -> None:
        self.end = rec.position()
        self.marks_end = _marks(rec)

    def syncs(self, rec: Recorder) -> tuple[int, ...]:
        """Where the host read a value inside the span (an eager step waits there), as
        positions in the span's ops."""
        return tuple(p - self.start.ops for p in rec.syncs[self.marks_start[0]:self.marks_end[0]])

    def breaks(self, rec: Recorder) -> tuple[int, ...]:
        """Where dynamo breaks the graph inside the span, as positions in the span's ops."""
        return tuple(p - self.start.ops for p in rec.breaks[self.marks_start[1]:self.marks_end[1]])

    @property
    def made(self) -> int:
        """How many serial numbers the span gave."""
        return self.end.serial - self.start.serial

    def has(self, serial: int) -> bool:
        """Whether the tensor of ``serial`` was made inside the span."""
        return self.start.serial < serial <= self.end.serial

    def shapes(self, rec: Recorder) -> list[ShapeRow]:
        return rec.shapes_between(self.start, self.end)

    def ops(self, rec: Recorder) -> list[OpRow]:
        return rec.ops_between(self.start, self.end)


def _marks(rec: Recorder) -> tuple[int, int]:
    return len(rec.syncs), len(rec.breaks)


@dataclass(eq=False)
class Group:
    """Alike children of one stack: the first real call (``proof``), the second
    (``template``, when its records equal the proof's) and why the group stopped
    replaying (``off``)."""

    name: str
    members: int
    proof: Call | None = None
    template: Call | None = None
    off: str = ""


@dataclass(eq=False)
class Member:
    module: torch.nn.Module
    path: str
    group: Group
    called: bool = False


@dataclass(eq=False)
class Call:
    """A member's call that ran for real between marks (a proof or a template)."""

    member: Member
    sig: Signature
    site: Any
    x_serial: int
    fwd: Span
    form: Form | None = None
    outs: tuple[Out, ...] = ()
    marked_out: torch.Tensor | None = None
    out_version: int = 0
    bwd: Span | None = None
    bwd_closed: bool = False
    out_grad: int = 0
    out_grad_meta: Meta = ()
    in_grad: int = 0
    in_grad_meta: Meta = ()
    total_grad: int = -1


@dataclass(eq=False)
class Replayed:
    """A member whose records are the template's: ``base`` is the serial number before
    those its copied forward stands for; ``placeholder`` where its backward's copy goes."""

    member: Member
    template: Call
    x_serial: int
    base: int
    x_meta: Meta
    params: tuple[torch.Tensor, ...]
    placeholder: Position | None = None
    out_grad: int = 0
    out_grad_meta: Meta = ()
    in_grad: int = 0
    in_grad_meta: Meta = ()
    total_grad: int = -1
