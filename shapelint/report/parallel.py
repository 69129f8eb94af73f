"""What the reports say of a parallel layout: the layout and the layers tensor
parallelism leaves whole (header), the communication the pricer assumed (after the
step line), and the JSON summary's ``world_size``, ``comm_ms``, ``step_ms_per_gpu`` and
``parallel``. Everything here renders what the pricer computed."""

from __future__ import annotations

from typing import Any

from shapelint.pipeline.result import Result

#: how many unsharded layers the text names before "and N more"
NAMED = 4


def layout_text(r: Result) -> str:
    """``, DDP 2 × TP 8: 16 GPUs, 2 nodes of 8 (one GPU's shapes)`` for the header."""
    plan = r.parallel
    if plan is None or not plan.layout.parallel:
        return f", tensor parallel {r.tp} (one GPU's shapes)" if r.tp > 1 else ""
    return f", {plan.layout.describe()} (one GPU's shapes)"


def not_sharded_line(r: Result) -> str | None:
    """``not sharded (whole on every tensor-parallel GPU): lm_head, ...``."""
    plan = r.parallel
    if plan is None or plan.layout.tp <= 1 or not plan.not_sharded:
        return None
    names = list(plan.not_sharded)
    more = f" and {len(names) - NAMED} more" if len(names) > NAMED else ""
    return f"not sharded (whole on every tensor-parallel GPU): {', '.join(names[:NAMED])}{more}"


def communication_lines(r: Result) -> list[str]:
    """The collectives of the step and what the step sees of them."""
    t = r.step_time
    comm = t.communication if t is not None else None
    if t is None or comm is None or t.world_size <= 1:
        return []
    lines = [f"communication per step (est., each of {t.world_size} GPUs): {comm.exposed_ms:.1f} ms exposed, "
             f"{comm.copy_ms:.1f} ms of copies, {comm.contention_ms:.1f} ms slower compute beside it, "
             f"{comm.host_ms:.1f} ms more host time"]
    for c in comm.collectives:
        lines.append(f"  {c.engine}: {c.count} × {c.op}, {c.nbytes / 2**20:.0f} MiB in all, {c.ms:.2f} ms "
                     f"({c.exposed_ms:.2f} ms exposed)")
    return lines


def summary_keys(r: Result) -> dict[str, Any]:
    """The JSON summary's parallel keys (one GPU: world_size 1, comm_ms 0)."""
    t = r.step_time
    plan = r.parallel
    out: dict[str, Any] = {"world_size": plan.layout.world_size if plan is not None else 1,
                           "comm_ms": round(t.comm_ms, 4) if t is not None else 0.0}
    if t is not None:
        out["step_ms_per_gpu"] = round(t.ms, 4)
    if plan is not None and plan.layout.parallel:
        comm = t.communication if t is not None else None
        out["parallel"] = {
            **plan.layout.to_json(),
            "not_sharded": list(plan.not_sharded),
            "collectives": [c.to_json() for c in comm.collectives] if comm is not None else [],
            "copy_ms": round(comm.copy_ms, 4) if comm is not None else 0.0,
            "contention_ms": round(comm.contention_ms, 4) if comm is not None else 0.0,
            "host_ms": round(comm.host_ms, 4) if comm is not None else 0.0,
        }
    return out


__all__ = ["communication_lines", "layout_text", "not_sharded_line", "summary_keys"]
