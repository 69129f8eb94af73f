"""One ``shapelint`` run, from its :class:`~shapelint.app.request.Request` to an
:class:`Outcome` that :func:`shapelint.app.render.render` prints and whose
``exit_code()`` the command returns.

The run decides in this order, so that what needs no torch imports none: ``--list-rules``
lists the rules; otherwise the cache session (:mod:`shapelint.app.cached`) finds the
targets, ends a ``--hook`` run that touches none, checks every output path, and
replays an earlier run with the same key. Only then are the rules loaded and the
targets linted (from the cache where it can), each result passed through the run's
:class:`~shapelint.app.suppression.Suppression`, then ``--fix``/``--diff``,
``--verify`` and ``--verify --step``.

A target that fails is one error line on stderr, printed when it fails, and the run
goes on with the others (exit 2 at the end).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from shapelint.app import cached, outputs, parallel, verification
from shapelint.app.lint_plan import Job, LintPlan, RuleSet, select_infos, select_rules
from shapelint.app.request import Request
from shapelint.errors import ShapelintError

if TYPE_CHECKING:
    from shapelint.app.cache import Replay
    from shapelint.app.cached import Session
    from shapelint.app.rule_index import RuleInfo
    from shapelint.app.suppression import Suppression
    from shapelint.check.rule_api import Rule
    from shapelint.fix.run import Outcome as Fixing
    from shapelint.hardware import Hardware
    from shapelint.pipeline.result import Result, TargetError


@dataclass(frozen=True)
class RuleList:
    """``--list-rules``: the selected rules (:class:`~shapelint.app.rule_index.RuleInfo`)."""

    rules: list[RuleInfo]

    def exit_code(self) -> int:
        return 0


@dataclass(frozen=True)
class SettingsShown:
    """``--show-settings``: the run's settings and selected rules, nothing linted."""

    request: Request
    rules: list[RuleInfo]

    def exit_code(self) -> int:
        return 0


@dataclass(frozen=True)
class NothingToLint:
    """A ``--hook`` run whose changed files no target depends on."""

    def exit_code(self) -> int:
        return 0


@dataclass(frozen=True)
class Replayed:
    """An earlier run with the same key, printed again (and its ``--output`` written)."""

    replay: Replay
    output: str | None

    def exit_code(self) -> int:
        return self.replay.rc


@dataclass
class Linted:
    """The targets linted: their results (after suppression, ``--fix``, ``--verify``),
    the targets that failed, the selected rules, and the fixes (``--fix``/``--diff``)."""

    request: Request
    session: Session
    rules: list[Rule]
    results: list[Result] = field(default_factory=list)
    errors: list[TargetError] = field(default_factory=list)
    fixing: Fixing | None = None

    @property
    def findings(self) -> int:
        """The findings that fail the run: unsuppressed and, under ``--verify``, confirmed."""
        from shapelint.measure.verify import confirmed

        return sum(1 for r in self.results for f in r.findings if not f.suppressed and confirmed(f))

    def exit_code(self) -> int:
        """2 when a target failed; else 1 for findings (0 with ``exit-zero``), after
        the cache keeps what the run printed for a replay (call it once, after rendering)."""
        if self.errors:
            return 2
        count, exit_zero = self.findings, self.request.exit_zero
        return self.session.done(1 if count and not exit_zero else 0, count, exit_zero)


Outcome = RuleList | SettingsShown | NothingToLint | Replayed | Linted


def run(request: Request) -> Outcome:
    """Carry out ``request`` up to its report (see the module docstring)."""
    if request.list_rules or request.show_settings:  # no targets, no cache, no torch
        infos = select_infos(request.settings, request.config, request.rules_dirs)
        return RuleList(infos) if request.list_rules else SettingsShown(request, infos)
    # before the rules: loading them imports torch, a replay does not
    session = cached.start(request)
    if session.nothing_to_lint:
        return NothingToLint()
    check_outputs(request, session.paths)  # a replay writes where a fresh run would, or nowhere
    if session.replay is not None:
        check_outputs_over(request, session.replayed_inputs())
        return Replayed(session.replay, request.output)
    return lint(request, session)


def lint(request: Request, session: Session) -> Linted:
    """Lint the session's targets, then fix and verify as ``request`` asks."""
    rules = select_rules(request.settings, request.config, request.rules_dirs)
    if not session.named:
        raise ShapelintError("no target given (try: shapelint examples/mlp.py, or targets = [...] in the "
                             "configuration)")
    if request.plot:
        from shapelint.report import plot

        plot.check_path(request.plot)
        plot.require_matplotlib()
    plan = LintPlan(request.flags, rules, request.config, *command_line_gpus(request))
    jobs = target_jobs(plan, session.paths, request.dump_graph)
    suppression = plan.suppression()
    outcome = Linted(request, session, rules.selected)
    outcome.results, outcome.errors = lint_all(jobs, rules, suppression, session, request)
    check_outputs_over(request, [file for r in outcome.results for file, _ in r.inputs])
    if request.fix or request.diff:
        outcome.fixing = fix(outcome.results, jobs, plan, suppression, request)
        outcome.results = outcome.fixing.results
    if request.verify:
        outcome.results = verification.verify(outcome.results)
    if request.step:
        outcome.results, failed = verification.verify_steps(outcome.results)
        outcome.errors += [target_failed(Path(target), ShapelintError(message)) for target, message in failed]
    return outcome


def command_line_gpus(request: Request) -> tuple[Hardware | None, Hardware | None]:
    """The GPU every target is linted for (``--gpu-profile``, else ``--gpu``; None:
    each target's own ``gpu``), and the configuration's (for targets that name none)."""
    from shapelint import hardware

    flags = request.flags
    given = hardware.load_profile_file(request.gpu_profile) if request.gpu_profile else (
        hardware.resolve(flags.gpu) if flags.gpu is not None else None)
    configured = hardware.resolve(request.config.gpu) if request.config.gpu else None
    return given, configured


def target_jobs(plan: LintPlan, paths: list[Path], dump_graph: str | None) -> list[Job]:
    """Each target's job, with its own ``--dump-graph`` file."""
    graphs = outputs.graph_paths(dump_graph, paths) if dump_graph else [None] * len(paths)
    return [plan.job(path, None if graph is None else str(graph)) for path, graph in zip(paths, graphs)]


def lint_all(jobs: list[Job], rules: RuleSet, suppression: Suppression, session: Session,
             request: Request) -> tuple[list[Result], list[TargetError]]:
    """Every job's result through ``suppression``, and the targets that failed (a
    malformed or unknown ignore comment fails its target too)."""
    workers = 1 if request.dump_graph or request.debug else request.jobs or parallel.cores()
    results, errors = [], []
    for (path, _, _), got in zip(jobs, session.lint_all(jobs, rules.selected, workers, debug=request.debug)):
        if isinstance(got, Exception):
            errors.append(target_failed(path, got))
            continue
        result = suppression.apply(got)
        results.append(result)
        errors += [target_failed(path, ShapelintError(str(problem))) for problem in suppression.problems(result)]
    return results, errors


def fix(results: list[Result], jobs: list[Job], plan: LintPlan, suppression: Suppression,
        request: Request) -> Fixing:
    """``--fix`` (edit the files, then lint the edited targets again) or ``--diff``
    (the edits, written nowhere)."""
    from shapelint.app import project
    from shapelint.fix import run as fixes
    from shapelint.fix.relint import Relinter

    # the re-lint runs in a fresh process (a module imported here would stay stale), with
    # these options, GPU profiles and rules; the edited files are read afresh
    relinter = Relinter({str(path): (opts, hw) for path, opts, hw in jobs},
                        tuple(r.code for r in plan.rules.selected), request.rules_dirs)

    def relint(targets: list[str]) -> list[Result]:
        return [suppression.afresh().apply(r) for r in relinter(targets)]

    return fixes.run(results, relint, write=request.fix and not request.diff, unsafe=request.unsafe_fixes,
                     root=project.root(request.config))


def check_outputs(request: Request, paths: list[Path]) -> None:
    """No output may replace a file the run reads (a target, a builder, the
    configuration, a rule module, the GPU profile), nor another output, nor be led out
    of the project by a link, before anything is linted."""
    from shapelint.app import project

    protected = outputs.protected_paths(paths, request.config.file, request.rules_dirs)
    if request.gpu_profile:
        protected.append(Path(request.gpu_profile))
    inside = [project.root(request.config), Path.cwd()]
    given: list[tuple[str, str]] = []
    if request.output is not None:
        given.append(("--output", request.output))
    if request.plot is not None:
        given.append(("--plot", request.plot))
    if request.dump_graph is not None:
        outputs.check_file_name(request.dump_graph, "--dump-graph")
        given += [("--dump-graph", str(graph)) for graph in outputs.graph_paths(request.dump_graph, paths)]
    for flag, path in given:
        outputs.check_output_path(path, protected, flag, inside)
    outputs.check_distinct(given)


def check_outputs_over(request: Request, inputs: list[str]) -> None:
    """No ``--output`` or ``--plot`` may replace a file the lint read (a module the model
    imported, a YAML builder's package): known once the targets are linted, or from a
    replayed run's records."""
    for flag, path in (("--output", request.output), ("--plot", request.plot)):
        if path is not None:
            outputs.check_output_path(path, [Path(f) for f in inputs], flag)


def target_failed(path: Path, exc: Exception) -> TargetError:
    """One target's failure: a one-line message (naming the target), printed now."""
    from shapelint.errors import describe
    from shapelint.pipeline.result import TargetError

    text = describe(exc)
    if str(path) not in text:
        text = f"{path}: {text}"
    print(f"shapelint: error: {text}", file=sys.stderr)
    return TargetError(str(path), text)


__all__ = ["Linted", "NothingToLint", "Outcome", "Replayed", "RuleList", "SettingsShown", "check_outputs", "lint", "run"]
