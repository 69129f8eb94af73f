"""A hand-written attention's score chain in the step's op stream: the memory-bound ops
the step runs over its score matrix (scaling, a mask or bias, casts, the softmax,
dropout, and their backward), which a fused kernel keeps on chip, and what the fused
call must do in their place (``shapelint.physics.attention.ChainNeeds``: a mask, one
that needs its gradient, dropout). SL302 prices both sides from them; ``--verify``
replays them (``shapelint.measure.score_chain``).
"""

from __future__ import annotations

from collections.abc import Sequence

from shapelint.model.records import Op
from shapelint.physics.attention import (
    DROPOUT_OPS,
    MASKING_OPS,
    ChainNeeds,
    HandWritten,
    softmax_traffic_bytes,
)
from shapelint.physics.gemm_shapes import ADDS_INPUT
from shapelint.physics.kernels import clone_bytes, launches


def softmax_bytes_of(atts: Sequence[HandWritten]) -> int:
    """Bytes the softmax passes over each attention's scores move (forward, and backward
    where it trains), in the scores' dtype."""
    return sum(softmax_traffic_bytes(a.score_elems, a.pv.dtype_bytes, bool(a.backward)) for a in atts)


def chain_traffic_bytes(atts: Sequence[HandWritten], chain: Sequence[Op]) -> int:
    """Bytes the score chain's ops move, a clone before an op included
    (``shapelint.physics.kernels.clone_bytes``: ``masked_fill``'s); where there is no op
    stream (a chain of none), the softmax's own passes (:func:`softmax_bytes_of`)."""
    moved = sum(op.bytes + clone_bytes(op.name, sum(n for _, n in op.writes)) for op in chain)
    return moved or softmax_bytes_of(atts)


def chain_kernels(chain: Sequence[Op]) -> int:
    """Kernels the score chain's ops launch (``shapelint.physics.kernels.launches``: two
    for an op that clones first)."""
    return sum(launches(op.name) for op in chain)


def chain_names(chain: Sequence[Op]) -> str:
    """The distinct forward ops of a score chain, in order (``mul, _to_copy, _softmax``):
    their backward is implied, and layers whose forwards are alike read alike."""
    return ", ".join(dict.fromkeys(op.name for op in chain if not op.backward))


def chain_needs(chain: Sequence[Op], atts: Sequence[HandWritten] = (), ops: Sequence[Op] = (),
                marker: dict[int, Op] | None = None) -> ChainNeeds:
    """A score chain's mask or bias (an op of the chain adds it, or the QKᵀ ``baddbmm``
    of one of ``atts`` does) and its dropout, by the forward ops it ran; whether the bias
    needs its gradient, where the op stream (``ops``, with ``atts``, the attentions the
    chain belongs to) shows it (:func:`bias_needs_grad`)."""
    names = {op.name for op in chain if not op.backward}
    bias = bool(names & set(MASKING_OPS)) or any(dict(att.qk.extra).get(ADDS_INPUT) for att in atts)
    grad = bias and bool(atts) and bias_needs_grad(atts, chain, ops, marker)
    return ChainNeeds(bias, bool(names & set(DROPOUT_OPS)), grad)


def bias_needs_grad(atts: Sequence[HandWritten], chain: Sequence[Op], ops: Sequence[Op],
                    marker: dict[int, Op] | None = None) -> bool:
    """Autograd computes the gradient of what the chain added to the scores: a backward
    op outside the chain and outside the attentions' own backward GEMMs (dQ, dK) reads
    the gradient the chain's backward wrote (the GEMMs of a bias computed from q, as
    SpeechT5's relative-position term is; the sum of dS to a broadcast bias's shape,
    as T5's learned bias gets). A constant mask's gradient is never computed."""
    backward = [op for op in chain if op.backward]
    if not backward:
        return False
    written = {serial for op in backward for serial, _ in op.writes}
    own = {op.index for op in chain} | _backward_markers(atts, ops, marker)
    readers = (op for op in ops[min(op.index for op in backward):] if op.backward and op.index not in own)
    return any(s in written for op in readers for s, _ in op.reads)


def _backward_markers(atts: Sequence[HandWritten], ops: Sequence[Op], marker: dict[int, Op] | None) -> set[int]:
    """Positions in the op stream of the attentions' own backward GEMMs."""
    marker = gemm_markers(ops) if marker is None else marker
    return {marker[g.index].index for att in atts for g in att.backward if g.index in marker}


#: op-stream kinds that are kernels of their own over the scores (not GEMM markers); a fill
#: is one where it makes a tensor of the scores' size from one of the chain (``new_zeros``
#: in the backward of a ``max`` over the scores, which scatters into it)
_CHAIN_KINDS = ("pointwise", "reduction", "copy", "fill")
#: columns an op over the scores may have beyond the keys: scores concatenated with a few
#: more logits are still the scores (gpt-oss's attention sinks, one per head:
#: ``cat([scores, sinks], -1)``, then max, sub and softmax over Tk + 1 columns, and a
#: slice back to Tk that PV reads)
EXTRA_SCORE_COLUMNS = 8


def score_sized(numel: int, att: HandWritten) -> bool:
    """An op over ``att``'s score matrix: [B·H·Tq, Tk] elements, or up to
    :data:`EXTRA_SCORE_COLUMNS` more columns of each row."""
    rows = att.pv.batch * att.tq
    return numel == att.score_elems or (
        numel % rows == 0 and att.tk < numel // rows <= att.tk + EXTRA_SCORE_COLUMNS)


def gemm_markers(ops: Sequence[Op]) -> dict[int, Op]:
    """Each GEMM record's marker in the op stream, by the record's index."""
    return {i: op for op in ops for i in op.gemms}


def score_chain(att: HandWritten, ops: Sequence[Op], marker: dict[int, Op] | None = None) -> tuple[Op, ...]:
    """The memory-bound ops the step runs over ``att``'s score matrix, which a fused
    kernel keeps on chip: forward, every op from QKᵀ's output to PV's input (scaling,
    a mask or position bias added, casts to fp32 and back, the softmax, dropout);
    backward, every op from dP to the two GEMMs that read dS (dropout's mask, the
    softmax backward, the casts and scaling). An op belongs to the chain when it reads a
    tensor of the chain and iterates over the whole score matrix; a reduction that
    leaves the chain (the sum of dS into a position bias's gradient, which a fused
    kernel writes too) does not. Empty where the op stream does not hold the GEMMs.
    ``marker``: :func:`gemm_markers` of ``ops``, where the caller walks many attentions."""
    marker = gemm_markers(ops) if marker is None else marker
    qk, pv = marker.get(att.qk.index), marker.get(att.pv.index)
    if qk is None or pv is None:
        return ()
    chain = _chain_from(qk, pv.index, ops, att)
    slot = att.recompute_slot()
    if slot is not None and (dp := marker.get(att.backward[slot].index)) is not None:
        # up to the GEMMs that read dS; where dP is the only backward GEMM (q and k need
        # no gradient), to wherever the chain's last op is
        last = max((marker[g.index].index for g in att.backward if g.index in marker), default=dp.index)
        chain += _chain_from(dp, last if last > dp.index else len(ops), ops, att)
    return chain


def _chain_from(start: Op, stop: int, ops: Sequence[Op], att: HandWritten) -> tuple[Op, ...]:
    """The chain ops after ``start`` (a GEMM marker whose output begins it) and before
    position ``stop``, in order. (Dropout is traced as the fused ``native_dropout``, one
    op on the chain: no mask is drawn beside it.)"""
    found = _reached(start, ops[start.index + 1:stop], att)
    read = {s for op in found for s, _ in op.reads}
    # a reduction out of the chain (a bias's gradient) stays: a fused kernel writes it too
    return tuple(op for op in found if score_sized(op.out_numel, att) or _writes_any(op, read))


def _reached(start: Op, window: Sequence[Op], att: HandWritten) -> list[Op]:
    """The score-sized memory-bound ops of ``window`` that read what ``start`` wrote,
    or what such an op wrote."""
    live = {serial for serial, _ in start.writes}
    found: list[Op] = []
    for op in window:
        if op.kind in _CHAIN_KINDS and score_sized(op.numel, att) and any(s in live for s, _ in op.reads):
            found.append(op)
            live.update(serial for serial, _ in op.writes)
    return found


def _writes_any(op: Op, serials: set[int]) -> bool:
    return any(s in serials for s, _ in op.writes)
