"""``--output-format concise``: one line per finding, ``path:line:col: CODE message``, as
ruff's concise format (and every editor's problem matcher) reads it.

The line is the one the finding points at (the layer's construction, or the config key
that sets the size); a finding that points at no line is reported on the target's first
line. The column is that of the value ``--fix`` edits when it edits one on that line
(:mod:`shapelint.fix.preview`), else the one the locator found, else 1
(:mod:`shapelint.report.columns`); a finding ``--fix`` can fix is marked ``[*]``,
as ruff marks its fixable diagnostics. Ends with ``Found N findings.`` (``All checks
passed!`` for none; with ``[*] N fixable with --fix.``) unless ``quiet``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import IO, Any

from shapelint.model.records import Finding
from shapelint.pipeline.result import Result
from shapelint.report.columns import column


def where(r: Result, f: Finding, fix: dict[str, Any] | None = None) -> str:
    """``path:line:col`` of a finding (:func:`shapelint.report.columns.column`, else 1)."""
    if f.source is None:
        return f"{r.config_file or r.target}:1:1"
    return f"{f.source.file}:{f.source.line}:{column(f, fix) or 1}"


def message(f: Finding) -> str:
    """``vocab-padding: out_features: 50257 → 50264 (est. 6.08× on its GEMMs, 1.395× per step)``."""
    what = str(f.suggestion) if f.suggestion is not None else f.message.split("; ")[0]
    gains = []
    if f.est_speedup is not None:
        gains.append(f"est. {f.est_speedup:.2f}× on its GEMMs")
    if f.step_speedup is not None:
        gains.append(f"{f.step_speedup:.3f}× per step")
    tail = f" ({', '.join(gains)})" if gains else ""
    mark = " (suppressed)" if f.suppressed else ""
    return f"{f.name}: {what}{tail}{mark}"


def render(results: Sequence[Result], out: IO[str], *, show_suppressed: bool = False, quiet: bool = False,
           fixes: Mapping[tuple[str, int], dict[str, Any]] | None = None) -> None:
    """The lines; ``fixes``: each fixable finding's fix, by (target, index in ``Result.findings``)."""
    count = fixable = 0
    for r in results:
        for i, f in enumerate(r.findings):
            if f.suppressed and not show_suppressed:
                continue
            fix = (fixes or {}).get((r.target, i))
            out.write(f"{where(r, f, fix)}: {f.code}{' [*]' if fix else ''} {message(f)}\n")
            count += not f.suppressed
            fixable += fix is not None
    if not quiet:
        out.write(f"Found {count} finding{'s' if count != 1 else ''}.\n" if count else "All checks passed!\n")
        if fixable:
            out.write(f"[*] {fixable} fixable with --fix.\n")


__all__ = ["message", "render", "where"]
