"""``--output-format concise``: one line per finding, ``path:line:col: CODE message``, as
ruff's concise format (and every editor's problem matcher) reads it.

The line is the one the finding points at (the layer's construction, or the config key
that sets the size); a finding that points at no line is reported on the target's first
line. The column is 1: shapelint points at lines, and ``--fix``'s exact span is in the
JSON and SARIF reports (:mod:`shapelint.fix.preview`). Ends with ``Found N findings.``
(``All checks passed!`` for none) unless ``quiet``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO

from shapelint.model.records import Finding
from shapelint.pipeline.result import Result


def where(r: Result, f: Finding) -> str:
    """``path:line:col`` of a finding."""
    if f.source is not None:
        return f"{f.source.file}:{f.source.line}:1"
    return f"{r.config_file or r.target}:1:1"


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


def render(results: Sequence[Result], out: IO[str], *, show_suppressed: bool = False, quiet: bool = False) -> None:
    count = 0
    for r in results:
        for f in r.findings:
            if f.suppressed and not show_suppressed:
                continue
            out.write(f"{where(r, f)}: {f.code} {message(f)}\n")
            count += not f.suppressed
    if not quiet:
        out.write(f"Found {count} finding{'s' if count != 1 else ''}.\n" if count else "All checks passed!\n")


__all__ = ["message", "render", "where"]
