"""A template's records copied for a member it stands for: module paths renamed to
the member's (its own ``ModuleInfo``), serial numbers remapped (those the template
made → fresh ones, the template's input and gradients → the member's, anything
older → itself), and after backward each placeholder filled with the copy of the
template's backward."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from shapelint.capture.recorder import Recorder
from shapelint.capture.replay.state import Call, Member, Replayed
from shapelint.capture.replay.stats import STATS
from shapelint.capture.rows import OpRow, Owner, Position, ShapeRow

#: the template's owners (by ``id``) as a member's
Owners = dict[int, Owner]


def rename(path: str, t: Call, m: Member) -> str | None:
    """``path`` inside the template's layer as the same place in ``m`` (None outside it)."""
    src = t.member.path
    if path == src or path.startswith(src + "."):
        return m.path + path[len(src):]
    return None


def owners(rec: Recorder, t: Call, m: Member, shapes: list[ShapeRow]) -> Owners | None:
    """The template's owners as ``m``'s (its own module info: paths, params, definition);
    None where ``m`` has no module like one of them (why goes to :data:`STATS`)."""
    out: Owners = {}
    for row in shapes:
        owner = row.owner
        if owner is None or id(owner) in out:
            continue
        path = rename(owner.module.path, t, m)
        if path is None:
            out[id(owner)] = owner
            continue
        info = rec.module_info(path)
        if info is None or info.type != owner.module.type or info.defined_at != owner.module.defined_at:
            STATS.decline(f"{m.path}: module {path} is not like {owner.module.path}")
            return None
        out[id(owner)] = dataclasses.replace(owner, module=info)
    return out


def serial_map(t: Call, r: Replayed, backward: bool, fresh: int = 0) -> Callable[[int], int]:
    """The template's serial numbers as ``r``'s: its input (and, in backward, its
    gradients) to ``r``'s, those its forward made after ``r.base``, those its backward
    made after ``fresh``, any other to itself."""
    f0, f1, base = t.fwd.start.serial, t.fwd.end.serial, r.base
    explicit = {t.x_serial: r.x_serial}
    b0 = b1 = 0
    if backward:
        assert t.bwd is not None
        explicit.update({t.out_grad: r.out_grad, t.in_grad: r.in_grad})
        b0, b1 = t.bwd.start.serial, t.bwd.end.serial

    def serial(s: int) -> int:
        hit = explicit.get(s)
        if hit is not None:
            return hit
        if f0 < s <= f1:
            return s - f0 + base
        if b0 < s <= b1:
            return s - b0 + fresh
        return s

    return serial


def copy_shapes(shapes: list[ShapeRow], owners: Owners) -> list[ShapeRow]:
    """GEMM records with their owners replaced."""
    return [row._replace(owner=owners.get(id(row.owner), row.owner)) if row.owner is not None else row
            for row in shapes]


def copy_ops(t: Call, m: Member, serial: Callable[[int], int], ops: list[OpRow]) -> list[OpRow]:
    """Ops with their serials remapped and their owners renamed to ``m``'s modules."""
    names: dict[str, str] = {}
    out = []
    for op in ops:
        renamed = names.get(op.owner)
        if renamed is None:
            renamed = names[op.owner] = rename(op.owner, t, m) or op.owner
        out.append(op._replace(reads=tuple((serial(s), b) for s, b in op.reads),
                               writes=tuple((serial(s), b) for s, b in op.writes), owner=renamed))
    return out


def append_forward(rec: Recorder, t: Call, shapes: list[ShapeRow], ops: list[OpRow]) -> None:
    """A copy of the template's forward records, appended with its host reads and graph
    breaks at the same places among its ops: an eager step waits for the GPU at each read
    in every layer (a ``torch.isnan(x).any()`` check per layer is a sync per layer), and
    dynamo breaks the graph in every layer where it breaks the template's."""
    marks = sorted([(p, rec.note_host_sync) for p in t.fwd.syncs(rec)]
                   + [(p, rec.note_graph_break) for p in t.fwd.breaks(rec)], key=lambda m: m[0])
    rec.append(shapes, ())
    done = 0
    for at, note in marks:
        rec.append((), ops[done:at])
        done = at
        note()
    rec.append((), ops[done:])


def expand(rec: Recorder, placeholders: list[Replayed], bwd_owners: dict[int, Owners]) -> None:
    """Put each placeholder's copy of its template's backward records in its place."""
    if not placeholders:
        return
    copies: list[tuple[Position, list[ShapeRow], list[OpRow]]] = []
    for r in placeholders:
        t = r.template
        assert r.placeholder is not None and t.bwd is not None
        shapes = copy_shapes(t.bwd.shapes(rec), bwd_owners[id(r)])
        serial = serial_map(t, r, backward=True, fresh=rec.reserve_serials(t.bwd.made))
        copies.append((r.placeholder, shapes, copy_ops(t, r.member, serial, t.bwd.ops(rec))))
    rec.insert(copies)


def drop_grads_the_template_lacks(replays: list[Replayed]) -> None:
    """Parameters the template's backward left without a gradient have none in a
    full trace either (a replayed backward returned an empty one for each)."""
    for r in replays:
        tparams = dict(r.template.member.module.named_parameters())
        for name, p in r.member.module.named_parameters():
            if p.requires_grad and tparams[name].grad is None:
                p.grad = None
