"""How a run uses the result cache (:mod:`shapelint.app.cache`): which targets it lints,
a replay when nothing changed, each target's result from the cache or from a lint
whose dependencies are recorded, and the run's output kept for the next replay.

The cache is bypassed (neither read nor written) with ``--no-cache`` or
``SHAPELINT_NO_CACHE=1`` (``true``, ``yes``, ``on``; ``0``, ``false``, ``no``, ``off``
and empty leave it on), and by runs that do more than report: ``--verify``,
``--plot``, ``--dump-graph``, ``--fix``, ``--diff`` (a replay would claim edits it did not make).

A target's result is stored only when every file the lint read still has the bytes it
had when the lint read it (or, for the target and its known dependencies, when the
lint began): a file edited during the lint stores nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shapelint.app import deps, project
from shapelint.app.cache import Replay, Store, Tee, default_dir, run_key, unchanged
from shapelint.app.fingerprint import digest, file_digest
from shapelint.errors import ShapelintError
from shapelint.load.targets import chosen, discover

if TYPE_CHECKING:
    from shapelint.app.config import Config
    from shapelint.app.request import Request
    from shapelint.check.rule_api import Rule
    from shapelint.hardware import Hardware
    from shapelint.pipeline.result import Options, Result

#: these settings leave the cache alone: they do more than report
_BYPASS = ("verify", "plot", "dump_graph", "fix", "diff")
#: settings that change how results are reported, not the results (part of a run's key only)
_REPORTING = ("format", "exit_zero", "file", "lines", "gemms")


#: how ``SHAPELINT_NO_CACHE`` is read
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def folder(cache_dir: str | None, cfg: Config) -> tuple[Path, str]:
    """``--cache-dir``, else ``SHAPELINT_CACHE_DIR``, else ``.shapelint_cache`` at the
    project root; and what named it (for an error)."""
    if cache_dir:
        return Path(cache_dir), "--cache-dir"
    given = os.environ.get("SHAPELINT_CACHE_DIR")
    if given:
        return Path(given), "SHAPELINT_CACHE_DIR"
    return default_dir(project.root(cfg)), "the cache folder"


def env_flag(name: str) -> bool:
    """A boolean environment variable (unset or empty: False); anything else is an error."""
    value = os.environ.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ShapelintError(f"{name}={os.environ[name]!r}: expected 1/true/yes/on or 0/false/no/off")


def _disabled(request: Request) -> bool:
    return bool(request.no_cache or env_flag("SHAPELINT_NO_CACHE") or any(getattr(request, a) for a in _BYPASS))


def _files_digest(paths: Sequence[str]) -> list[Any]:
    """Each given file, or each file under a given folder, with its content's digest."""
    out: list[Any] = []
    for p in paths:
        files = sorted(Path(p).rglob("*.py")) if Path(p).is_dir() else [Path(p)]
        out += [(str(f), file_digest(f)) for f in files]
    return out


class Session:
    """One run's use of the cache; with ``store`` None it only lints."""

    def __init__(self, paths: list[Path], store: Store | None, parts: dict[str, Any], run: dict[str, Any]) -> None:
        self.paths = paths
        self.store = store
        #: what decides every target's result besides its files and the environment
        self.parts = parts
        #: the rest of the run's key: every argument and setting
        self.run = {**run, "targets": [str(p) for p in paths]}
        #: a ``--hook`` run whose changed files no target depends on: over before linting
        self.nothing_to_lint = False
        #: whether the command line or the configuration named any target (filters may leave none)
        self.named = True
        #: what an earlier run with the same key printed (to print again), if any
        self.replay: Replay | None = None
        self._recorded: Replay | None = None

    def _options(self, path: Path) -> str:
        """The key of what decides ``path``'s result besides its files and the environment."""
        return digest({**self.parts, "target": str(path)})

    def lint_all(self, jobs: Sequence[tuple[Path, Options, Hardware | None]], rules: Sequence[Rule],
                 workers: int, debug: bool = False) -> list[Result | Exception]:
        """Each job's result, from the cache or linted, on up to ``workers`` processes
        (:mod:`shapelint.app.parallel`), with a progress display on a terminal. A target
        that fails gives its exception in its place (one target's failure does not end
        the run); with ``debug`` it is raised."""
        from shapelint.app import parallel, progress

        def one(path: Path, opts: Options, hw: Hardware | None) -> Result | Exception:
            try:
                return self.lint(path, opts, hw, rules)
            except Exception as exc:
                if debug:
                    raise
                return _portable(exc)

        results: dict[int, Result | Exception] = {}
        for i, (path, _, _) in enumerate(jobs):
            hit = self.store.load(path, self._options(path)) if self.store is not None else None
            if hit is not None:
                results[i] = hit
        todo = [i for i in range(len(jobs)) if i not in results]
        with progress.linting([jobs[i][0] for i in todo]) as done:
            fresh = parallel.run(lambda k: one(*jobs[todo[k]]), len(todo), workers, done)
        results.update(zip(todo, fresh))
        return [results[i] for i in range(len(jobs))]

    def lint(self, path: Path, opts: Options, hw: Hardware | None, rules: Sequence[Rule]) -> Result:
        """Lint ``path``; the result carries the user's files it read (with the digests of
        the bytes read), and with a cache they are stored as a new entry's dependencies."""
        from shapelint.pipeline.run import lint_target

        root = Path(self.parts["root"])
        target_file = str((path / "config.json") if path.is_dir() else path)
        recorded = self.store.dependencies(path) if self.store is not None else None
        before = {os.path.abspath(f): file_digest(f) for f in {target_file, *(recorded or ()), *deps.project_modules(root)}}
        with deps.recording() as reads:
            result = lint_target(path, opts, hw, rules)
        read_at = {**{f: sha for f, sha in reads.opened.items() if sha is not None}, **before}
        users = deps.user_files(_files_read(result, reads, target_file, root),
                                exclude=[self.store.folder] if self.store is not None else [])
        now = unchanged(read_at, users)
        result = replace(result, inputs=tuple((f, sha) for f in users if (sha := read_at.get(f) or file_digest(f))))
        if self.store is not None and now is not None:  # else a file changed while it was linted: store nothing
            # and the module files an import would now find first must still not exist
            absent = reads.absent([root, path if path.is_dir() else path.parent])
            self.store.save(path, self._options(path), result, {**now, **dict.fromkeys(absent)})
        return result

    def replayed_inputs(self) -> list[str]:
        """The files the replayed run's targets read (their records' dependencies)."""
        if self.store is None:
            return []
        return sorted({f for p in self.paths for f in self.store.dependencies(p) or ()})

    @contextlib.contextmanager
    def recording(self, output: str | None) -> Iterator[None]:
        """Keep what the ``with`` body prints (and writes to ``output``) for a replay."""
        if self.store is None:
            yield
            return
        out, err = Tee(sys.stdout), Tee(sys.stderr)
        sys.stdout, sys.stderr = out, err  # type: ignore[assignment]
        try:
            yield
        finally:
            sys.stdout, sys.stderr = out.stream, err.stream
        text = None
        if output:
            with contextlib.suppress(OSError):
                text = Path(output).read_text(encoding="utf-8")
        self._recorded = Replay(out.text(), err.text(), text, 0)

    def done(self, rc: int, findings: int, exit_zero: bool) -> int:
        """The run's exit code (``findings`` reported, no target failed), after storing
        its output under the key of its entries."""
        if self.store is not None and self._recorded is not None:
            entries = [self.store.valid(p, self._options(p)) for p in self.paths]
            if all(entries):
                self._recorded.rc, self._recorded.findings, self._recorded.exit_zero = rc, findings, exit_zero
                self.store.save_run(run_key(self.run, [str(e) for e in entries]), self._recorded)
        return rc


def _files_read(result: Result, reads: deps.Recording, target_file: str, root: Path) -> set[str]:
    """Every file a lint depended on: what it opened, the target, the files its GEMM
    records and config point at, and the project's modules still imported."""
    files = set(reads.opened) | {target_file, *deps.project_modules(root)}
    for g in result.capture.gemms:
        files.update(s.file for s in (g.source, g.defined_at) if s is not None)
    if result.config_file:
        files.add(result.config_file)
    return files


def _portable(exc: Exception) -> ShapelintError:
    """``exc`` as the one line the run prints for it (an internal error stays marked as
    one), in an exception that travels back from a worker process whatever ``exc`` held."""
    from shapelint.errors import describe

    return ShapelintError(describe(exc))


def start(request: Request) -> Session:
    """The run's targets and cache; ``nothing_to_lint`` set when a ``--hook`` run has
    nothing to lint, ``replay`` when an earlier run with the same key can be printed
    again (the caller prints it, through the same checks as a fresh report:
    :func:`print_replay`)."""
    cfg = request.config
    store = None
    if not _disabled(request):
        where, named_by = folder(request.cache_dir, cfg)
        store = Store.open(where, project.root(cfg), named_by)
    configured = project.configured(cfg)
    targets = list(request.targets)
    if request.hook:
        paths = project.affected(targets, discover(configured).targets if configured else [], store)
    else:
        paths = chosen(targets or configured, request.skip_other_files, request.verbose)
    session = Session(paths, store, _result_parts(request), _run_parts(request))
    session.named = bool(targets or configured)
    if request.hook and not paths:
        session.nothing_to_lint = True  # the commit touches no target and no target's dependency
    elif store is not None and paths:
        entries = [store.valid(p, session._options(p)) for p in paths]
        session.replay = store.replay(run_key(session.run, [str(e) for e in entries])) if all(entries) else None
    return session


def _run_parts(request: Request) -> dict[str, Any]:
    """What decides a whole run's output besides its targets' results: every option and setting."""
    return {"request": {k: v for k, v in asdict(request).items() if k not in ("targets", "config")},
            "config": {k: v for k, v in asdict(request.config).items() if k != "lines"}}


def _result_parts(request: Request) -> dict[str, Any]:
    """What decides every target's result besides its files and the environment."""
    return {
        "config": {k: v for k, v in asdict(request.config).items() if k not in _REPORTING},
        "flags": {k: v for k, v in asdict(request.flags).items() if k not in _REPORTING},
        "gpu_profile": file_digest(request.gpu_profile) if request.gpu_profile else None,
        "rules_dir": _files_digest(request.rules_dirs),
        "root": str(project.root(request.config)),
        "cwd": os.getcwd(),
    }


def print_replay(replay: Replay, output: str | None) -> None:
    """Print again what a run printed (the ``--output`` file written as a fresh run
    writes it: :func:`shapelint.files.write_file`); its exit code is ``replay.rc``."""
    from shapelint.app import outputs

    if output and replay.output is not None:
        outputs.write_file(output, replay.output, "--output")
    with outputs.stdout_guard():
        sys.stdout.write(replay.stdout)
    sys.stderr.write(replay.stderr)


__all__ = ["Session", "env_flag", "folder", "print_replay", "start"]
