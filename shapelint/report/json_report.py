"""``--format json``: the machine-readable document. Its keys are a public contract
(users' CI parses them): extend, never rename.

Top level: ``gemms``, ``findings``, ``summary`` (and ``targets``, one summary each),
``errors``: the targets that could not be linted, ``{"target": ..., "message": ...}``
each (the run then exits 2; the other targets are reported as usual).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from shapelint.pipeline.result import Result, TargetError
from shapelint.version import __version__


def summary(r: Result) -> dict[str, Any]:
    return {
        "target": r.target,
        "gpu": r.hardware.key,
        "dtype": r.precision,
        "training": r.training,
        "tokens": r.tokens,
        "tp": r.tp,
        "gemm_count": len(r.capture.gemms),
        "forward": r.capture.forward,
        "backward": r.capture.backward,
        "total_flops": sum(g.flops for g in r.capture.gemms),
        "est_ms": round(r.step.ms, 4),
        "est_ms_after": round(r.step.ms_after, 4),
        "est_speedup": round(r.step.speedup, 4),
        "est_scope": "GEMMs only",
        "findings": sum(1 for f in r.findings if not f.suppressed),
        "suppressed": sum(1 for f in r.findings if f.suppressed),
        "host_reads": [read.to_json() for read in r.capture.host_reads],
        "trace_notes": list(r.capture.notes),
        **_step(r),
        **({"step_verification": r.step_verification.to_json()} if r.step_verification is not None else {}),
    }


def _step(r: Result) -> dict[str, Any]:
    """The whole-step estimate: ``step_ms``, ``step_ms_after``, ``step_speedup``, ``mode``."""
    before, after = r.step_time, r.step_time_after
    if before is None or after is None:
        return {}
    return {
        "step_ms": round(before.ms, 4),
        "step_ms_after": round(after.ms, 4),
        "step_speedup": round(before.ms / after.ms, 4) if after.ms else 1.0,
        "mode": before.mode,
        "step": before.to_json(),
        **({"compile_graphs": _graphs(r)} if before.mode == "compile" else {}),
    }


def _graphs(r: Result) -> dict[str, Any] | None:
    """What ``shapelint.load.compile_probe`` found (None: not probed, priced as one graph)."""
    graphs = r.step_model.step.graphs if r.step_model is not None else None
    if graphs is None:
        return None
    host_ms = r.step_time.graphs_host_ms if r.step_time is not None else 0.0
    return {**graphs.to_json(), "host_ms": round(host_ms, 4)}


def document(results: Sequence[Result], *, show_suppressed: bool = False,
             errors: Sequence[TargetError] = ()) -> dict[str, Any]:
    """Suppressed findings appear (with ``"suppressed": true``) only with ``show_suppressed``."""
    many = len(results) > 1
    gemms = [{**g.to_json(), **({"target": r.target} if many else {})} for r in results for g in r.capture.gemms]
    findings = [{**f.to_json(), "target": r.target} for r in results for f in r.findings
                if show_suppressed or not f.suppressed]
    per = [summary(r) for r in results]
    total = dict(per[0]) if len(per) == 1 else _total(per)
    return {"version": __version__, "gemms": gemms, "findings": findings, "summary": total, "targets": per,
            "errors": [{"target": e.target, "message": e.message} for e in errors]}


#: the summary counts that add up over targets
SUMMED = ("gemm_count", "forward", "backward", "total_flops")


def _total(per: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The summary of several targets: counts and GEMM times summed, and the whole-step
    times when every target has them."""
    est = sum(s["est_ms"] for s in per)
    after = sum(s["est_ms_after"] for s in per)
    total: dict[str, Any] = {
        "targets": len(per),
        **{key: sum(s[key] for s in per) for key in SUMMED},
        "est_ms": round(est, 4),
        "est_ms_after": round(after, 4),
        "est_speedup": round(est / after, 4) if after else 1.0,
        "est_scope": "GEMMs only",
        "findings": sum(s["findings"] for s in per),
        "suppressed": sum(s["suppressed"] for s in per),
    }
    if per and all("step_ms" in s for s in per):
        total.update(_step_total(per))
    return total


def _step_total(per: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The whole steps of several targets: their times summed, and their mode (or ``mixed``)."""
    step, step_after = sum(s["step_ms"] for s in per), sum(s["step_ms_after"] for s in per)
    modes = {s["mode"] for s in per}
    return {"step_ms": round(step, 4), "step_ms_after": round(step_after, 4),
            "step_speedup": round(step / step_after, 4) if step_after else 1.0,
            "mode": modes.pop() if len(modes) == 1 else "mixed"}


def render(results: Sequence[Result], *, show_suppressed: bool = False, errors: Sequence[TargetError] = ()) -> str:
    return json.dumps(document(results, show_suppressed=show_suppressed, errors=errors), indent=2) + "\n"
