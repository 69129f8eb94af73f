"""What a run prints: the rule list, a replayed run, or the report of the targets
linted (to ``--output`` or stdout), then the ``--fix`` notes, ``--statistics`` and
the ``--plot`` file.

The report goes to ``--output`` whole (a temporary file renamed over it), else to
stdout, where a reader that closes the pipe early ends it quietly. The machine
formats (json, sarif, github) carry the targets that failed; the text report leaves
them to stderr, where each was printed when it failed, and when every target failed
it writes no ``--output`` file (an earlier report there stays whole).
"""

from __future__ import annotations

import io
import os
import sys
from typing import IO, Any

from shapelint.app import cached, outputs
from shapelint.app.request import Request
from shapelint.app.run import Linted, Outcome, Replayed, RuleList, SettingsShown


def render(outcome: Outcome) -> None:
    """Print ``outcome`` (its exit code is ``outcome.exit_code()``, asked afterwards)."""
    if isinstance(outcome, RuleList):
        for rule in outcome.rules:
            print(f"{rule.code}  {rule.name:32} {rule.summary}")
    elif isinstance(outcome, SettingsShown):
        from shapelint.app import show_settings

        show_settings.render(outcome.request, outcome.rules, sys.stdout)
    elif isinstance(outcome, Replayed):
        cached.print_replay(outcome.replay, outcome.output)
    elif isinstance(outcome, Linted):
        with outcome.session.recording(outcome.request.output):  # kept for the next run's replay
            _print(outcome)
        if outcome.request.plot and outcome.results:
            from shapelint.report import plot

            plot.render(outcome.results, outcome.request.plot)


def _print(outcome: Linted) -> None:
    """The report (or ``--diff``'s diff), the ``--fix`` notes and ``--statistics``."""
    request, fixing = outcome.request, outcome.fixing
    fmt = request.format
    if request.diff:  # the diff is the report: to --output when given
        diff = fixing.diff if fixing is not None else ""
        if request.output:
            outputs.write_file(request.output, diff, "--output")
        else:
            sys.stdout.write(diff)
    else:
        write_report(outcome, fmt)
    if fixing is not None and not request.quiet:
        notes_to = sys.stdout if fmt == "text" and not request.output and not request.diff else sys.stderr
        print("\n".join(fixing.notes), file=notes_to)
    if request.statistics:
        from shapelint.report import text

        to_stderr = fmt != "text" and not request.output
        text.statistics(outcome.results, sys.stderr if to_stderr else sys.stdout,
                        show_suppressed=request.show_suppressed)


def write_report(outcome: Linted, fmt: str) -> None:
    """The report in ``fmt``, to ``--output`` or stdout (see the module docstring)."""
    output = outcome.request.output
    if output:
        if fmt == "text" and not outcome.results:  # every target failed (stderr says why): nothing to write
            return
        buffer = io.StringIO()
        report(outcome, fmt, buffer, color=outcome.request.color == "always")
        outputs.write_file(output, buffer.getvalue(), "--output")
        return
    with outputs.stdout_guard():
        try:
            report(outcome, fmt, sys.stdout, color=color(outcome.request))
        except SystemExit:  # rich ends a closed pipe with sys.exit(1): the run's exit code must win
            raise BrokenPipeError from None


def fixes(outcome: Linted) -> dict[tuple[str, int], dict[str, Any]]:
    """Each fixable finding's fix as JSON (:mod:`shapelint.fix.preview`: the edits
    ``--fix`` would make, ``--unsafe-fixes`` included when given), for the machine formats."""
    from shapelint.app import project
    from shapelint.fix import preview

    found = preview.fixes(outcome.results, unsafe=outcome.request.unsafe_fixes, root=project.root(outcome.request.config))
    return {key: fix.to_json() for key, fix in found.items()}


def color(request: Request) -> bool | None:
    """``--color``: True (always), False (never, or auto with ``NO_COLOR`` set), None
    (auto: colour on a terminal)."""
    if request.color == "always":
        return True
    if request.color == "never" or os.environ.get("NO_COLOR"):
        return False
    return None


def report(outcome: Linted, fmt: str, out: IO[str], color: bool | None = False) -> None:
    """Write the report of ``outcome`` in ``fmt`` to ``out``; ``color`` (text only):
    None colours on a terminal, False never."""
    request = outcome.request
    if fmt == "json":
        from shapelint.report import json_report

        out.write(json_report.render(outcome.results, show_suppressed=request.show_suppressed, errors=outcome.errors,
                                     gemms=request.gemms, fixes=fixes(outcome)))
    elif fmt == "sarif":
        from shapelint.app.rule_index import META
        from shapelint.report import sarif

        found = {f.code for r in outcome.results for f in r.findings}
        rules: list[Any] = [*outcome.rules, *(m for m in META if m.code in found)]  # SL900's descriptor, documented
        out.write(sarif.render(outcome.results, rules, show_suppressed=request.show_suppressed, errors=outcome.errors,
                               fixes=fixes(outcome)))
    elif fmt == "github":
        from shapelint.report import github

        out.write(github.render(outcome.results, outcome.errors, fixes=fixes(outcome)))
    elif fmt == "concise":
        from shapelint.report import concise

        concise.render(outcome.results, out, show_suppressed=request.show_suppressed, quiet=request.quiet,
                       fixes=fixes(outcome))
    else:
        from shapelint.report import text

        text.render(outcome.results, out, verbose=request.verbose, color=color, show_suppressed=request.show_suppressed,
                    quiet=request.quiet)


__all__ = ["color", "render", "report", "write_report"]
