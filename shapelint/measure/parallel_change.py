"""What a finding changes in how a parallel layout runs the model, for the *after* step
of ``--verify --step`` under ``torchrun``.

Two findings change the layout rather than (only) a size, and their after-step must
run the changed layout, or it measures the same step twice:

- **SL603** (FSDP2 groups too small) changes the training script's ``fully_shard``
  calls: ``k`` consecutive blocks to a group. No file is edited; the wrapper groups
  the blocks (:func:`shapelint.measure.parallel_wrap.layout_wrap`).
- **SL602** (heads not divisible by TP) edits the head count in the config, as ``--fix``
  does, and the attention it leaves whole today is then sharded: colwise q/k/v,
  rowwise output projection. The parameters keep their shapes (the hidden size stays),
  so the edited copy is told apart by its layout, not by its parameters. Key/value
  heads equal to the heads are edited with them. (A config that states ``head_dim``
  gets no SL602 fix — ``--fix`` leaves it for the user to change both — so its finding
  is listed under ``not_applied``; the code that would edit ``head_dim`` too stays for
  a plan that makes that edit.)

Both come as the finding's :class:`shapelint.model.parallel.ParallelChange` (SL602's head
count as its typed ``heads``): nothing here reads a finding's ``facts``, which are the
report's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from shapelint.model.attention_keys import HEAD_DIM_KEYS, KV_HEAD_KEYS
from shapelint.model.parallel import ParallelChange
from shapelint.model.records import Finding
from shapelint.pipeline.result import Result


def layout_change(findings: Sequence[Finding]) -> ParallelChange | None:
    """The findings' parallel changes together (None: none changes the layout)."""
    out: ParallelChange | None = None
    for f in findings:
        if f.parallel is not None and (f.parallel.tp_styles or f.parallel.fsdp_blocks_per_group > 1):
            out = f.parallel if out is None else out.merged(f.parallel)
    return out


def resizes(findings: Sequence[Finding]) -> bool:
    """Whether an edit of ``findings`` must show in the copy's parameter or input shapes:
    any finding that changes neither the parallel layout nor the memory format (a size).
    A layout change alone may leave them as they were (SL603 edits nothing; SL602's head
    count keeps the hidden size; SL402's channels-last edits no file), so the copy is told
    apart by its layout; beside a size change, the shapes must still move, or the size
    edit did not reach the model."""
    return any(layout_change([f]) is None and f.memory_format is None for f in findings)


def describe(change: ParallelChange) -> str:
    """The changed layout, for the progress line: ``4 blocks per fully_shard group``,
    ``4 more layers sharded``."""
    parts = []
    if change.fsdp_blocks_per_group > 1:
        parts.append(f"{change.fsdp_blocks_per_group} blocks per fully_shard group")
    if change.tp_styles:
        parts.append(f"{len(change.tp_styles)} more layers sharded ("
                     + ", ".join(f"{m} {s}" for m, s in change.tp_styles[:4])
                     + (", ..." if len(change.tp_styles) > 4 else "") + ")")
    return "; ".join(parts)


def wraps_only(r: Result, f: Finding) -> bool:
    """Whether ``f``'s change is in how the layout wraps the model, not in a file
    (SL603's ``fully_shard`` grouping): applied by the wrapper, with nothing to edit."""
    p = f.parallel
    return (r.parallel is not None and r.parallel.layout.fsdp > 1 and p is not None
            and p.fsdp_blocks_per_group > 1 and not p.tp_styles)


def unmeasured(r: Result, f: Finding) -> str:
    """Why the after-step cannot run ``f``'s sharded attention ('' where it can): key/value
    heads fewer than the degree are replicated, which DTensor's colwise style cannot do."""
    tp = r.parallel.layout.tp if r.parallel is not None else 1
    p = f.parallel
    if p is None or not p.tp_styles or p.heads is None or tp <= 1:
        return ""
    kv = p.heads.to_kv_heads
    if kv % tp:
        return (f"{kv} key/value heads at --tp {tp} are replicated, each on {tp // max(kv, 1)} GPUs; DTensor's "
                "colwise style shards them, so the after-step is not built")
    return ""


def with_head_keys(findings: Sequence[Finding], texts: dict[Path, str]) -> dict[Path, str]:
    """``texts`` (the edited files) with each head-count finding's other keys set where a
    JSON config states them: ``head_dim`` to the suggested head dimension, key/value heads
    to the suggested count (``--fix`` edits the head count only)."""
    out = dict(texts)
    for f in findings:
        heads = f.parallel.heads if f.parallel is not None else None
        loc = f.location
        if heads is None or loc is None or loc.key is None:
            continue
        for file in texts:
            if file.suffix != ".json":
                continue
            data = json.loads(out[file])
            changed = False
            for section in _sections_with(data, loc.key, heads.to_heads):
                changed |= _set(section, HEAD_DIM_KEYS, heads.head_dim, heads.to_head_dim)
                changed |= _set(section, KV_HEAD_KEYS, heads.kv_heads, heads.to_kv_heads)
            if changed:
                out[file] = json.dumps(data, indent=2) + "\n"
    return out


def _sections_with(data: Any, key: str, value: Any) -> Iterator[dict[str, Any]]:
    """Every mapping in ``data`` that sets ``key`` to ``value``."""
    if isinstance(data, dict):
        if data.get(key) == value:
            yield data
        for v in data.values():
            yield from _sections_with(v, key, value)
    elif isinstance(data, list):
        for v in data:
            yield from _sections_with(v, key, value)


def _set(section: dict[str, Any], keys: Sequence[str], old: int, new: int) -> bool:
    changed = False
    for k in keys:
        if section.get(k) == old and old != new:
            section[k] = new
            changed = True
    return changed


__all__ = ["HEAD_DIM_KEYS", "KV_HEAD_KEYS", "describe", "layout_change", "resizes", "unmeasured", "with_head_keys",
           "wraps_only"]
