"""Attention heads under tensor parallelism: which head counts a degree shards, and
the head count to propose when it does not (SL602, and the capture's sharding)."""

from __future__ import annotations

from shapelint.physics.attention import MAX_FUSED_HEAD_DIM


def divides_heads(heads: int, kv_heads: int, tp: int) -> bool:
    """``tp`` shards an attention of ``heads`` query and ``kv_heads`` key/value heads:
    it divides the heads, and divides the key/value heads or is a multiple of them
    (each key/value head then replicated on ``tp / kv_heads`` ranks, as Megatron-LM
    and vLLM replicate grouped-query attention's few key/value heads)."""
    return heads % tp == 0 and (kv_heads % tp == 0 or tp % kv_heads == 0)


def sharded_heads(heads: int, kv_heads: int, head_dim: int, tp: int, align: int) -> tuple[int, int, int] | None:
    """(heads, key/value heads, head_dim) that ``tp`` shards with the same hidden size
    ``heads × head_dim``: a head_dim that is a multiple of ``align`` and at most
    ``MAX_FUSED_HEAD_DIM`` (the one nearest the current, the larger on a tie), and
    key/value heads as many as the heads (multi-head attention) or else the count
    nearest the current that divides the heads and that ``tp`` shards or replicates;
    None where no head_dim fits."""
    hidden = heads * head_dim
    options = []
    for d in range(align, MAX_FUSED_HEAD_DIM + 1, align):
        h = hidden // d
        if hidden % d or h % tp:
            continue
        kv = h if kv_heads == heads else _kv_heads(h, kv_heads, tp)
        if kv:
            options.append((abs(d - head_dim), -d, h, kv))
    if not options:
        return None
    _, d, h, kv = min(options)
    return h, kv, -d


def _kv_heads(heads: int, kv: int, tp: int) -> int:
    fits = [c for c in range(1, heads + 1) if heads % c == 0 and divides_heads(heads, c, tp)]
    return min(fits, key=lambda c: (abs(c - kv), -c), default=0)


__all__ = ["divides_heads", "sharded_heads"]
