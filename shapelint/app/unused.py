"""``SL900`` unused-suppression: the ``# shapelint: ignore`` comments of a run that
suppress nothing, as findings (opt in: :data:`shapelint.app.rule_index.UNUSED_SUPPRESSION`).

A comment is judged on the findings of the rules that ran, before suppression: a bare
``# shapelint: ignore`` is unused when no finding points at its line; a code (or rule
name) in ``ignore[...]`` is unused when its rule ran and none of its findings points at
that line. A code of a rule that did not run says nothing about this run and is left
alone. Malformed and unknown codes are :meth:`Suppression.problems`' (errors), not this.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from pathlib import Path

from shapelint.app.rule_index import UNUSED_SUPPRESSION
from shapelint.locate import suppress
from shapelint.model.records import Finding, Source


def unused(files: Iterable[str], findings: Sequence[Finding], ran: Collection[str],
           reader: suppress.LineReader) -> list[Finding]:
    """One finding per comment that suppresses nothing, in file and line order.
    ``ran``: the codes and names of the rules that ran."""
    on_line: dict[tuple[str, int], list[Finding]] = {}
    for f in findings:
        if f.source is not None:
            on_line.setdefault((f.source.file, f.source.line), []).append(f)
    out = []
    for file in files:
        for no, line in enumerate(reader.lines(file), start=1):
            if "shapelint" not in line.lower():
                continue
            message = _judge(line, on_line.get((file, no), []), ran)
            if message:
                out.append(_finding(file, no, message))
    return out


def _judge(line: str, here: Sequence[Finding], ran: Collection[str]) -> str | None:
    """What is unused in the comments of ``line`` (None: every one suppresses something)."""
    parts = []
    for c in suppress.comments(line):
        if c.malformed or c.codes == ():
            continue  # an error of its own (Suppression.problems)
        if c.codes is None:
            if not here:
                parts.append("'# shapelint: ignore' suppresses nothing on this line")
            continue
        idle = [code for code in c.codes if code in ran and not any(code in (f.code, f.name) for f in here)]
        if idle:
            parts.append(f"unused code{'s' if len(idle) > 1 else ''} in '# shapelint: ignore[...]': {', '.join(idle)}"
                         " (no finding of it on this line)")
    return "; ".join(parts) or None


def _finding(file: str, line: int, message: str) -> Finding:
    info = UNUSED_SUPPRESSION
    return Finding(info.code, info.name, "warning", Path(file).name, f"{message}: remove it", gemms=(), est_ms=0.0,
                   est_ms_after=0.0, source=Source(file, line))


__all__ = ["unused"]
