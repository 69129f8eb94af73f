"""Repeated layers as one finding: every block of a transformer proposes the same change
(``h.0.mlp``, ``h.1.mlp``...), and the report lists it once with its modules; and of
two rules that propose the same change on the same modules, the larger saving."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from shapelint.model.parallel import ParallelChange
from shapelint.model.records import Finding

#: a layer index inside a module path: ``h.3.mlp`` → ``h.*.mlp`` (also at the start: ``3.mlp``)
_INDEX = re.compile(r"(?:(?<=\.)|^)\d+(?=\.|$)")


def module_glob(paths: Sequence[str]) -> str:
    """``transformer.h.0.mlp`` + ``transformer.h.1.mlp`` → ``transformer.h.*.mlp``."""
    if len(paths) == 1:
        return paths[0]
    globbed = {_INDEX.sub("*", p) for p in paths}
    return globbed.pop() if len(globbed) == 1 else paths[0]


def group(findings: Sequence[Finding]) -> list[Finding]:
    """One finding per (rule, suggestion, location, message shape): repeated layers
    (every block of a transformer) become one finding listing their modules."""
    groups: dict[object, list[Finding]] = {}
    for f in findings:
        key = (f.code, f.suggestion, f.source, _INDEX.sub("*", f.module), f.message)
        groups.setdefault(key, []).append(f)
    out = []
    for members in groups.values():
        first = members[0]
        modules = tuple(dict.fromkeys(m.module for m in members))
        if len(members) == 1:
            out.append(replace(first, modules=modules))
            continue
        out.append(replace(first, module=module_glob(modules), modules=modules, est_ms=sum(m.est_ms for m in members),
                           est_ms_after=sum(m.est_ms_after for m in members), parallel=_merged_parallel(members),
                           **concatenated(members)))
    return out


def concatenated(members: Sequence[Finding]) -> dict[str, Any]:
    """The per-record fields of findings merged into one, in order: the GEMMs, their
    after-records and after-times, the slices (once each) and the ops fused away."""
    return dict(gemms=tuple(i for m in members for i in m.gemms), after=tuple(a for m in members for a in m.after),
                gemm_ms_after=tuple(x for m in members for x in m.gemm_ms_after),
                slices=tuple(dict.fromkeys(x for m in members for x in m.slices)),
                fuses=tuple(op for m in members for op in m.fuses))


def _merged_parallel(members: Sequence[Finding]) -> ParallelChange | None:
    """The members' parallel changes as one (each layer's sharding, together)."""
    out: ParallelChange | None = None
    for m in members:
        if m.parallel is not None:
            out = m.parallel if out is None else out.merged(m.parallel)
    return out


def deduplicated(findings: Sequence[Finding]) -> list[Finding]:
    """Of the findings that propose the same change on the same modules, the one that
    saves most (two rules can reach the same size for different reasons)."""
    best: dict[object, Finding] = {}
    for f in findings:
        key = (f.suggestion, f.modules)
        if key not in best or f.saved_ms > best[key].saved_ms:
            best[key] = f
    return [f for f in findings if best[(f.suggestion, f.modules)] is f]



__all__ = ["concatenated", "deduplicated", "group", "module_glob"]
