"""What silences a finding after the lint, for the command line and the Python API
alike: the configuration's ``per-module-ignores`` drop it, a ``# shapelint: ignore``
comment on its source line marks it suppressed. The result cache stores results
before either (:mod:`shapelint.app.cache`), so both apply on every run.

A malformed or unknown ignore comment suppresses nothing; the command reports each
as an error (:meth:`Suppression.problems`)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from shapelint.app.config import module_ignored
from shapelint.load.targets import PY_SUFFIX, YAML_SUFFIXES
from shapelint.locate import suppress
from shapelint.model.records import Finding
from shapelint.pipeline.result import Result
from shapelint.pipeline.run import with_findings

#: the files whose ignore comments are checked (a config.json has no comments)
COMMENTED_SUFFIXES = (PY_SUFFIX, *YAML_SUFFIXES)


class Suppression:
    """The per-module ignores of a run and the rule codes and names an ignore comment
    may name (``known``: every loaded rule's, selected or not). Each source file is
    read once per :class:`Suppression` (:class:`shapelint.locate.suppress.LineReader`)."""

    def __init__(self, per_module_ignores: dict[str, list[str]] | None = None,
                 known: Collection[str] = frozenset(), *, report_unused: bool = False,
                 ran: Collection[str] = frozenset()) -> None:
        self.per_module_ignores = per_module_ignores
        self.known = known
        self.report_unused = report_unused
        self.ran = ran
        self.reader = suppress.LineReader()

    def afresh(self) -> Suppression:
        """The same suppression reading every file again (after ``--fix`` edited them)."""
        return Suppression(self.per_module_ignores, self.known, report_unused=self.report_unused, ran=self.ran)

    def apply(self, result: Result) -> Result:
        """``result`` without the findings a per-module ignore covers, and with those
        an ignore comment covers marked suppressed (the step estimates follow); with
        ``report_unused`` (``SL900`` selected), a finding for each comment that
        suppresses nothing (they change no estimate)."""
        findings = [f for f in result.findings if not module_ignored(f, self.per_module_ignores)]
        out = with_findings(result, suppress.apply(findings, self.reader))
        if not self.report_unused:
            return out
        from shapelint.app.unused import unused

        ran = {code for f in findings for code in (f.code, f.name)} | set(self.ran)
        idle = unused(self._files(result), findings, ran, self.reader)
        # an SL900 finding is suppressed by a comment naming it (``ignore[SL900]``), as ruff's
        # RUF100 by its own code; a bare ignore that suppresses nothing is still reported
        idle = [replace(f, suppressed=True) if self._names_it(f) else f for f in idle]
        return replace(out, findings=[*out.findings, *idle]) if idle else out

    def _names_it(self, f: Finding) -> bool:
        """Whether ``f``'s line has an ignore comment that names its code or name."""
        line = self.reader.line(f.source.file, f.source.line) if f.source else None
        codes = suppress.codes_on_line(line) if line is not None else None
        return codes is not None and codes is not suppress.ALL and bool({f.code, f.name} & codes)

    def _files(self, result: Result) -> list[str]:
        """The commented files of the target and of its findings' sources."""
        files = dict.fromkeys([result.config_file or result.target,
                               *(f.source.file for f in result.findings if f.source)])
        return [file for file in files if Path(file).suffix.lower() in COMMENTED_SUFFIXES]

    def problems(self, result: Result) -> list[suppress.Problem]:
        """Malformed or unknown ignore comments in the target and the files its
        findings point at."""
        return [problem for file in self._files(result) for problem in suppress.problems(file, self.known, self.reader)]


__all__ = ["Suppression"]
