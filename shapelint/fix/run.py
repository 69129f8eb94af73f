"""``--diff`` and ``--fix``: turn the findings' suggestions into edits of the files that
set the sizes, as ruff does for its fixes. :mod:`shapelint.fix.plan` says what can be
edited and why the rest is not.

Each file keeps its bytes outside the edited tokens (BOM, encoding, line ends), its
mode and its links (:mod:`shapelint.fix.files`). After writing, the edited targets
are linted again in a fresh process (:mod:`shapelint.fix.relint`); if one no longer
loads, or a write fails, every file written is put back as it was. A finding left as
it is says why in its ``not_fixed``.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from shapelint.errors import ShapelintError
from shapelint.fix.edits import Span, apply_text
from shapelint.fix.files import Doc, Transaction
from shapelint.fix.plan import Planned, plan
from shapelint.model.records import Finding
from shapelint.pipeline.result import Result
from shapelint.pipeline.run import with_findings


@dataclass
class Outcome:
    """The results after fixing (the edited targets linted again), the unified diff of
    the edits, and the lines to print after the report (fixes, reasons, summary)."""

    results: list[Result]
    diff: str
    notes: list[str] = field(default_factory=list)


# -- applying -----------------------------------------------------------------


def _by_file(planned: Sequence[Planned]) -> dict[Path, tuple[Path, Doc, str]]:
    """real file -> (the name it is shown by, what was read, the text after every fixable edit)."""
    edits: dict[Path, tuple[Path, Doc, dict[Span, str]]] = {}
    for p in planned:
        for e in p.edits if p.fixable else ():
            edits.setdefault(e.real, (e.file, e.doc, {}))[2][(e.start, e.end)] = e.new
    return {real: (shown, doc, apply_text(doc.text, spans)) for real, (shown, doc, spans) in edits.items()}


def edited_texts(planned: Sequence[Planned]) -> dict[Path, tuple[str, str]]:
    """file (as the findings name it) -> (text now, text after every fixable entry's edits)."""
    return {shown: (doc.text, new) for shown, doc, new in _by_file(planned).values()}


def unified_diff(texts: dict[Path, tuple[str, str]]) -> str:
    return "".join("".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                                f"a/{file}", f"b/{file}"))
                   for file, (old, new) in texts.items())


def _write(planned: Sequence[Planned]) -> Transaction:
    """Write every edited file; if one write fails, put back those written and raise."""
    tx = Transaction()
    try:
        for real, (_, doc, new) in _by_file(planned).items():
            tx.write(real, doc.raw, doc.encode(new))
    except BaseException as exc:
        failed = tx.undo()
        if not isinstance(exc, Exception):
            raise
        raise ShapelintError(_undone(str(exc), failed)) from exc
    return tx


def _undone(why: str, failed: list[str]) -> str:
    if failed:
        return f"{why}; could not put back {', '.join(failed)}: restore them from version control"
    return f"{why}; every edit was undone"


def run(results: list[Result], relint: Callable[[list[str]], list[Result]], *, write: bool, unsafe: bool,
        root: Path) -> Outcome:
    """Plan the fixes of the files inside the project ``root``; with ``write``, apply
    them and lint the edited targets again with ``relint`` (a fresh process:
    :class:`shapelint.fix.relint.Relinter`), undoing every edit if that fails."""
    planned = plan(results, unsafe=unsafe, root=root)
    texts = edited_texts(planned)
    fixed = [p for p in planned if p.fixable]
    outcome = Outcome(results, unified_diff(texts))
    if write and texts:
        tx = _write(planned)
        outcome.results = _relint(results, relint, tx, fixed)
    outcome.notes = _notes(planned, fixed, write)
    outcome.results = _with_reasons(outcome.results, planned)
    outcome.notes += _summary(outcome.results, planned, len(fixed), write)
    return outcome


def _with_reasons(results: Sequence[Result], planned: Sequence[Planned]) -> list[Result]:
    """Each reported finding no fix was planned for, with the reason (``not_fixed``)."""
    reasons = {_key(p.finding): p.reason for p in planned if not p.fixable}

    def told(f: Finding) -> Finding:
        return replace(f, not_fixed=reasons[_key(f)]) if _key(f) in reasons and not f.suppressed else f

    return [with_findings(r, [told(f) for f in r.findings]) for r in results]


def _summary(results: Sequence[Result], planned: Sequence[Planned], fixed: int, write: bool) -> list[str]:
    """``Fixed 2 findings (1 remaining).``, or what ``--fix`` would do, and the unsafe fixes left."""
    plural = "s" if fixed != 1 else ""
    if write:
        left = sum(1 for r in results for f in r.findings if not f.suppressed)
        notes = [f"Fixed {fixed} finding{plural} ({left} remaining)."]
    else:
        notes = [f"Would fix {fixed} finding{plural} ({len(planned) - fixed} would remain)."]
    hidden = sum(1 for p in planned if p.unsafe and p.edits and not p.fixable)
    if hidden:
        notes.append(f"{hidden} unsafe fix{'es' if hidden != 1 else ''} can be applied with --unsafe-fixes.")
    return notes


def _notes(planned: Sequence[Planned], fixed: Sequence[Planned], write: bool) -> list[str]:
    notes = []
    for p in fixed:
        s = p.finding.suggestion
        files = ", ".join(sorted({str(e.file) for e in p.edits}))
        verb = "fixed" if write else "would fix"
        notes.append(f"{p.finding.source or p.target}: {verb} {p.finding.code} {s} in {files} "
                     f"({'unsafe; ' if p.unsafe else ''}{p.caveat})")
    for p in planned:
        if not p.fixable:
            notes.append(f"{p.finding.source or p.target}: {p.finding.code} {p.finding.suggestion or ''}: "
                         f"not fixed: {p.reason}")
    return notes


def _key(f: Finding) -> tuple[str, str, str]:
    return (f.code, f.module, str(f.suggestion))


def _touched(r: Result, edited: set[str], fixed_targets: set[str]) -> bool:
    """Whether ``r`` may change with the edits: a fix of it, or an edit of its target, its
    config, a file a finding points at or a file a layer of it was built in."""
    files = {r.target, r.config_file or r.target}
    files |= {f.source.file for f in r.findings if f.source is not None}
    files |= {s.file for g in r.capture.gemms for s in (g.source, g.defined_at) if s is not None}
    return r.target in fixed_targets or any(os.path.realpath(f) in edited for f in files)


def _unchanged(fixed: Sequence[Planned], fresh: dict[str, Result]) -> str:
    """The first fix whose finding the re-lint still reports as it was (same rule, layer
    and suggestion): its edit changed nothing the model reads (a dead duplicate, a value
    something else overrides), so the proof it stood on was wrong; "" if none."""
    for p in fixed:
        again = fresh.get(p.target)
        if again is not None and any(_key(f) == _key(p.finding) and not f.suppressed for f in again.findings):
            files = ", ".join(sorted({f"{e.file}" for e in p.edits}))
            return (f"the edit of {files} did not change what it was to fix ({p.finding.code} "
                    f"{p.finding.suggestion} is still reported): the model does not read that value")
    return ""


def _relint(results: list[Result], relint: Callable[[list[str]], list[Result]], tx: Transaction,
            fixed: Sequence[Planned]) -> list[Result]:
    """Lint again, in a fresh process, the targets the edits touch; if that fails, or a
    fixed finding is still there, put back every edited file and say so on one line."""
    edited = {str(w.real) for w in tx.written}
    again = [r.target for r in results if _touched(r, edited, {p.target for p in fixed})]
    restored = f"{len(edited)} file{'s' if len(edited) != 1 else ''} restored"
    try:
        fresh = dict(zip(again, relint(again)))
    except BaseException as exc:
        failed = tx.undo()
        if not isinstance(exc, Exception):
            raise
        if failed:
            raise ShapelintError(_undone(f"the fixes broke the re-lint ({exc})", failed)) from exc
        raise ShapelintError(f"the fixes broke the re-lint, so every edit was undone ({restored}): {exc}") from exc
    wrong = _unchanged(fixed, fresh)
    if wrong:
        failed = tx.undo()
        raise ShapelintError(_undone(wrong, failed) if failed else f"{wrong}; every edit was undone ({restored})")
    tx.commit()
    return [fresh.get(r.target, r) for r in results]


__all__ = ["Outcome", "edited_texts", "plan", "run", "unified_diff"]
