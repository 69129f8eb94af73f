"""Changes of the parallel layout that move no GEMM (FSDP2 blocks wrapped together into
one ``fully_shard`` group): their finding carries no GEMM time, and the step model
prices it (``StepModel.priced``: it re-plans the communication and picks the size the
change takes)."""

from __future__ import annotations

from shapelint.model.records import Change, Finding, Proposal


def is_layout_change(change: Change) -> bool:
    """``change`` changes the parallel layout and no GEMM."""
    return change.parallel is not None and not change.after and change.parallel.fsdp_blocks_per_group > 1


def layout_finding(p: Proposal, change: Change) -> Finding:
    """The finding of a layout change, before the step model prices it: no GEMM time
    (``est_ms`` 0 and no speedup on GEMMs), pointing at the modules the change groups."""
    return Finding(
        code=p.code, name=p.name, severity=p.severity, module=_common_path([g.module for g in p.gemms]),
        message=change.message, gemms=(), est_ms=0.0, est_ms_after=0.0, suggestion=change.suggestion,
        source=p.source, gain=p.gain, facts=tuple(dict(change.facts).items()), parallel=change.parallel)


def _common_path(modules: list[str]) -> str:
    """``transformer.h`` for ``transformer.h.0.attn.c_attn`` … ``transformer.h.11.mlp.c_proj``."""
    parts = [m.split(".") for m in modules]
    common = []
    for level in zip(*parts):
        if len(set(level)) > 1:
            break
        common.append(level[0])
    return ".".join(common) or (modules[0] if modules else "")


__all__ = ["is_layout_change", "layout_finding"]
