"""The checks that a copy of records equals what a trace gives: two real calls made
the same records once their serials and module paths are taken relative to each call,
nothing outside a call used a tensor it made, and a call's output is one a replayed
layer can stand for."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from shapelint.capture.recorder import Recorder
from shapelint.capture.replay.calls import same_tensors
from shapelint.capture.replay.state import Call
from shapelint.capture.rows import OpRow, ShapeRow


def relative(path: str, c: Call) -> Any:
    """A module path relative to the call's layer ("" is the layer), or the path itself outside it."""
    src = c.member.path
    if path == src or path.startswith(src + "."):
        return path[len(src):]
    return ("outside", path)


def normal_ops(c: Call, ops: list[OpRow], backward: bool) -> list[OpRow]:
    """The call's ops with serials and owners as the call sees them, to compare two calls."""
    tokens: dict[int, str] = {c.x_serial: "input"}
    if backward:
        tokens.update({c.out_grad: "output grad", c.in_grad: "input grad"})
    bwd = c.bwd if backward else None

    def norm(s: int) -> Any:
        if s in tokens:
            return tokens[s]
        if c.fwd.has(s):
            return ("fwd", s - c.fwd.start.serial)
        if bwd is not None and bwd.has(s):
            return ("bwd", s - bwd.start.serial)
        return s

    return [op._replace(reads=tuple((norm(s), b) for s, b in op.reads),
                        writes=tuple((norm(s), b) for s, b in op.writes), owner=relative(op.owner, c))
            for op in ops]


def normal_shapes(c: Call, shapes: list[ShapeRow]) -> list[tuple[Any, ...]] | None:
    """The call's GEMM records with owners relative to it; None if it recomputed anything."""
    out = []
    for s, phase, owner, role, dtype in shapes:
        if phase == "recompute":
            return None
        who = None if owner is None else (relative(owner.module.path, c), owner.module.type,
                                          owner.source, owner.param_operand)
        out.append((s, phase, who, role, dtype))
    return out


def same_forward(rec: Recorder, a: Call, b: Call) -> str:
    """How the forwards of two real calls differ ("" where they made the same records)."""
    if a.sig.key != b.sig.key or a.site != b.site or not same_tensors(a.sig, b.sig):
        return "called differently"
    if _outputs(a) != _outputs(b):
        return "outputs differ"
    na = normal_shapes(a, a.fwd.shapes(rec))
    if na is None or na != normal_shapes(b, b.fwd.shapes(rec)):
        return "forward GEMMs differ"
    if normal_ops(a, a.fwd.ops(rec), False) != normal_ops(b, b.fwd.ops(rec), False):
        return "forward ops differ"
    if (a.fwd.syncs(rec), a.fwd.breaks(rec)) != (b.fwd.syncs(rec), b.fwd.breaks(rec)):
        return "their forwards read the host or break the graph at different places"
    return ""


def _outputs(c: Call) -> tuple[Any, ...]:
    """The call's output form, serials made, and outputs with serials relative to the call."""
    return c.form, c.fwd.made, [dataclasses.replace(o, serial=o.serial - c.fwd.start.serial) for o in c.outs]


def same_backward(rec: Recorder, a: Call, b: Call) -> str:
    """How the backwards of two real calls differ ("" where they made the same records)."""
    assert a.bwd is not None and b.bwd is not None
    if (a.out_grad_meta, a.in_grad_meta, a.bwd.made) != (b.out_grad_meta, b.in_grad_meta, b.bwd.made):
        return "backward gradients differ"
    na = normal_shapes(a, a.bwd.shapes(rec))
    if na is None or na != normal_shapes(b, b.bwd.shapes(rec)):
        return "backward GEMMs differ, or it recomputes"
    if normal_ops(a, a.bwd.ops(rec), True) != normal_ops(b, b.bwd.ops(rec), True):
        return "backward ops differ"
    if any(c.bwd.syncs(rec) or c.bwd.breaks(rec) for c in (a, b) if c.bwd is not None):
        # a placeholder's copy is inserted after backward, where no mark can be added
        return "the backward reads the host or breaks the graph (replay copies only the forward's)"
    return ""


def escapes(rec: Recorder, calls: list[Call]) -> str:
    """Whether anything outside a real call's spans touched a tensor the call made
    (other than its output): a replayed copy would not have made it."""
    inside: list[tuple[Call, range, range]] = []
    for c in calls:
        assert c.bwd is not None
        inside.append((c, range(c.fwd.start.ops, c.fwd.end.ops), range(c.bwd.start.ops, c.bwd.end.ops)))
    for i, op in enumerate(rec.ops):
        for c, fwd, bwd in inside:
            if i in fwd or i in bwd:
                continue
            for s, _ in op.reads + op.writes:
                if c.fwd.has(s) and s != c.outs[0].serial:
                    return f"{op[0]} outside {c.member.path} uses a tensor made inside it"
    return ""


def output_problem(rec: Recorder, call: Call, ys: list[torch.Tensor], x: torch.Tensor, xm: torch.Tensor) -> str:
    """Why a real call's output is not one a replayed layer can stand for ("" where it is):
    it must require grad, be made by the call's own ops, and share memory with nothing."""
    if not ys[0].requires_grad:
        return "its output does not require grad"
    for y in ys:
        if y is xm or y is x or y._base is xm or y._base is x or y.storage_offset() != 0:
            return "its output is its input or a view of it"
        serial = rec.known_serial(y)
        if serial is None or not call.fwd.has(serial) or rec.is_param_like(y):
            return "its output was not made by its own ops"
    if len({rec.known_serial(y) for y in ys}) != len(ys):
        return "its output tensors share memory"
    return ""
