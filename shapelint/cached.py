"""How a run uses the result cache (:mod:`shapelint.cache`): which targets it lints,
a replay when nothing changed, each target's result from the cache or from a lint
whose dependencies are recorded, and the run's output kept for the next replay.

The cache is bypassed (neither read nor written) with ``--no-cache`` or
``SHAPELINT_NO_CACHE=1``, and by runs that do more than report: ``--verify``,
``--plot``, ``--dump-graph``, ``--fix``, ``--diff`` (a replay would claim edits it did not make).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shapelint import deps, project
from shapelint.cache import Replay, Store, Tee, default_dir, digest, file_digest, run_key
from shapelint.targets import chosen, discover

if TYPE_CHECKING:
    from shapelint.config import Config
    from shapelint.hardware import Hardware
    from shapelint.pipeline import Options, Result
    from shapelint.rule_api import Rule
    from shapelint.settings import Settings

#: these settings leave the cache alone: they do more than report
_BYPASS = ("verify", "plot", "dump_graph", "fix", "diff")
#: settings that change how results are reported, not the results (part of a run's key only)
_REPORTING = ("format", "exit_zero", "file", "lines")


def folder(cache_dir: str | None, cfg: Config) -> Path:
    """``--cache-dir``, else ``SHAPELINT_CACHE_DIR``, else ``.shapelint_cache`` at the project root."""
    given = cache_dir or os.environ.get("SHAPELINT_CACHE_DIR")
    return Path(given) if given else default_dir(project.root(cfg))


def _disabled(args: argparse.Namespace) -> bool:
    return bool(args.no_cache or os.environ.get("SHAPELINT_NO_CACHE", "") not in ("", "0")
                or any(getattr(args, a, None) for a in _BYPASS))


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
        #: the exit code when the run is over before linting (a replay, a hook with nothing to lint)
        self.rc: int | None = None
        #: whether the command line or the configuration named any target (filters may leave none)
        self.named = True
        self._replay: Replay | None = None

    def _options(self, path: Path) -> str:
        """The key of what decides ``path``'s result besides its files and the environment."""
        return digest({**self.parts, "target": str(path)})

    def lint_all(self, jobs: Sequence[tuple[Path, Options, Hardware | None]], rules: Sequence[Rule],
                 workers: int, debug: bool = False) -> list[Result | Exception]:
        """Each job's result, from the cache or linted, on up to ``workers`` processes
        (:mod:`shapelint.parallel`), with a progress display on a terminal. A target
        that fails gives its exception in its place (one target's failure does not end
        the run); with ``debug`` it is raised."""
        from shapelint import parallel, progress

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
        """Lint ``path``, recording what it depended on in a new cache entry."""
        from shapelint.pipeline import lint_target

        if self.store is None:
            return lint_target(path, opts, hw, rules)
        key = self._options(path)
        with deps.recording() as opened:
            result = lint_target(path, opts, hw, rules)
        files = set(opened) | {str(path / "config.json") if path.is_dir() else str(path)}
        for g in result.capture.gemms:
            files.update(s.file for s in (g.source, g.defined_at) if s is not None)
        if result.config_file:
            files.add(result.config_file)
        files.update(deps.project_modules(Path(self.parts["root"])))
        self.store.save(path, key, result, deps.user_files(files, exclude=[self.store.folder]))
        return result

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
        self._replay = Replay(out.text(), err.text(), text, 0)

    def done(self, rc: int) -> int:
        """The run's exit code, after storing its output under the key of its entries."""
        if self.store is not None and self._replay is not None:
            entries = [self.store.valid(p, self._options(p)) for p in self.paths]
            if all(entries):
                self._replay.rc = rc
                self.store.save_run(run_key(self.run, [str(e) for e in entries]), self._replay)
        return rc


def _portable(exc: Exception) -> Exception:
    """``exc``, or (when it would not survive the pickling back from a worker process)
    a ``ShapelintError`` with its one-line text; an internal error stays marked as one."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        from shapelint.errors import ShapelintError, one_line

        if isinstance(exc, ShapelintError):
            return ShapelintError(one_line(exc))
        return RuntimeError(one_line(exc))


def start(args: argparse.Namespace, cfg: Config, flags: Settings) -> Session:
    """The run's targets and cache; ``rc`` set when nothing is left to lint."""
    store = None if _disabled(args) else Store(folder(args.cache_dir, cfg))
    parts = {
        "config": {k: v for k, v in asdict(cfg).items() if k not in _REPORTING},
        "flags": {k: v for k, v in asdict(flags).items() if k not in _REPORTING},
        "gpu_profile": file_digest(args.gpu_profile) if args.gpu_profile else None,
        "rules_dir": _files_digest(args.rules_dir),
        "root": str(project.root(cfg)),
        "cwd": os.getcwd(),
    }
    run = {"args": {k: v for k, v in vars(args).items() if k != "targets"},
           "config": {k: v for k, v in asdict(cfg).items() if k != "lines"}}
    configured = project.configured(cfg)
    if args.hook:
        paths = project.affected(args.targets, discover(configured).targets if configured else [], store)
    else:
        paths = chosen(args.targets or configured, args.skip_other_files, args.verbose)
    session = Session(paths, store, parts, run)
    session.named = bool(args.targets or configured)
    if args.hook and not paths:
        session.rc = 0  # the commit touches no target and no target's dependency
    elif store is not None and paths:
        entries = [store.valid(p, session._options(p)) for p in paths]
        replay = store.replay(run_key(session.run, [str(e) for e in entries])) if all(entries) else None
        if replay is not None:
            session.rc = _replay(replay, args.output)
    return session


def _replay(replay: Replay, output: str | None) -> int:
    sys.stdout.write(replay.stdout)
    sys.stderr.write(replay.stderr)
    if output and replay.output is not None:
        from shapelint.errors import ShapelintError

        try:
            Path(output).write_text(replay.output, encoding="utf-8")
        except OSError as exc:
            raise ShapelintError(f"--output {output}: {exc.strerror}") from exc
    return replay.rc


__all__ = ["Session", "folder", "start"]
