"""``--format json``: the machine-readable document. Its keys are a public contract
(users' CI parses them): extend, never rename.

Top level: ``version`` (shapelint's), ``versions`` (shapelint, Python, torch and
transformers: what the trace ran on), ``gemms`` (left out with ``--no-gemms``), ``findings`` (each with its ``fix``:
the edits ``--fix`` would make, or null), ``summary`` (and ``targets``, one summary
each), ``errors``: the targets that could not be linted, ``{"target": ..., "message": ...}``
each (the run then exits 2; the other targets are reported as usual). The schema is
``docs/schema/report.schema.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from shapelint.physics.kernels import scan_note
from shapelint.pipeline.result import Result, TargetError
from shapelint.report.parallel import summary_keys
from shapelint.report.versions import versions
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
        **summary_keys(r),
        **({"step_verification": r.step_verification.to_json()} if r.step_verification is not None else {}),
        **({"ssm_kernels": note} if (note := scan_note(op.name for op in r.capture.ops)) else {}),
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
        "step_ms_range": [round(v, 4) for v in before.ms_range],
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


#: a finding's fix as JSON (``shapelint.fix.preview.Fix.to_json``), by (target, index in ``Result.findings``)
Fixes = Mapping[tuple[str, int], dict[str, Any]]


def document(results: Sequence[Result], *, show_suppressed: bool = False,
             errors: Sequence[TargetError] = (), gemms: bool = True, fixes: Fixes | None = None) -> dict[str, Any]:
    """Suppressed findings appear (with ``"suppressed": true``) only with ``show_suppressed``;
    ``gemms`` False (``--no-gemms``) leaves the ``gemms`` key out (the summaries still count them);
    with ``fixes``, each finding has a ``fix``: its edits, or null when ``--fix`` cannot make one."""
    many = len(results) > 1
    records = [{**g.to_json(), **({"target": r.target} if many else {})} for r in results for g in r.capture.gemms] \
        if gemms else None
    findings = [{**f.to_json(), "target": r.target, **({"fix": fixes.get((r.target, i))} if fixes is not None else {})}
                for r in results for i, f in enumerate(r.findings) if show_suppressed or not f.suppressed]
    per = [summary(r) for r in results]
    total = dict(per[0]) if len(per) == 1 else _total(per)
    return {"version": __version__, "versions": versions(),
            **({"gemms": records} if records is not None else {}), "findings": findings, "summary": total,
            "targets": per, "errors": [{"target": e.target, "message": e.message} for e in errors]}


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
        **_parallel_total(per),
    }
    if per and all("step_ms" in s for s in per):
        total.update(_step_total(per))
    return total


def _parallel_total(per: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Of several targets: the largest ``world_size`` (each target is priced on its own
    layout), their exposed communication ``comm_ms`` summed as their steps are, their
    per-GPU steps summed where every target has one, and every ``host_reads`` entry
    with the ``target`` whose trace answered it."""
    out: dict[str, Any] = {
        "world_size": max((s.get("world_size", 1) for s in per), default=1),
        "comm_ms": round(sum(s.get("comm_ms", 0.0) for s in per), 4),
        "host_reads": [{**read, "target": s["target"]} for s in per for read in s.get("host_reads", ())],
    }
    if per and all("step_ms_per_gpu" in s for s in per):
        out["step_ms_per_gpu"] = round(sum(s["step_ms_per_gpu"] for s in per), 4)
    return out


def _step_total(per: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The whole steps of several targets: their times summed, and their mode (or ``mixed``)."""
    step, step_after = sum(s["step_ms"] for s in per), sum(s["step_ms_after"] for s in per)
    modes = {s["mode"] for s in per}
    low, high = (sum(s["step_ms_range"][i] for s in per) for i in (0, 1))
    return {"step_ms": round(step, 4), "step_ms_after": round(step_after, 4),
            "step_speedup": round(step / step_after, 4) if step_after else 1.0,
            "step_ms_range": [round(low, 4), round(high, 4)],
            "mode": modes.pop() if len(modes) == 1 else "mixed"}


def render(results: Sequence[Result], *, show_suppressed: bool = False, errors: Sequence[TargetError] = (),
           gemms: bool = True, fixes: Fixes | None = None) -> str:
    doc = document(results, show_suppressed=show_suppressed, errors=errors, gemms=gemms, fixes=fixes)
    return json.dumps(doc, indent=2) + "\n"
