"""Where shapelint writes, and how: never over a file it reads, one graph per target,
whole files or nothing, and a closed pipe or a full disk as one line (or silence).

- :func:`check_output_path`: ``-o``, ``--dump-graph`` and ``--plot`` may not resolve to
  a target, a YAML's builder file, the configuration file or a ``--rules-dir`` module
  (``--dump-graph model.py`` once replaced the model with its graph);
- :func:`protected_paths`: those files, from the targets and the configuration;
- :func:`graph_paths`: ``--dump-graph FILE`` with several targets writes
  ``FILE-1-<target>.py``, ``FILE-2-<target>.py``... (one each; the last no longer wins);
- :func:`check_distinct`: two outputs of one run (``--plot r.svg -o r.svg``) are refused;
- :func:`write_file` (:mod:`shapelint.files`, where the pipeline writes too): a regular
  file is written to a temporary file beside it and renamed over it (a failed write
  leaves the old file whole; a symbolic link stays a link, and the file it points at is
  replaced); a FIFO, a device or a socket is refused with one line (a FIFO with no
  reader would hang the run); every OSError is a one-line ShapelintError naming the flag;
- :func:`stdout_guard`: a reader that closes the pipe early (``shapelint ... | head``)
  ends the output quietly, with the run's own exit code.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from shapelint.errors import ShapelintError
from shapelint.files import refuse_special, write_file
from shapelint.load.targets import YAML_SUFFIXES


def check_file_name(path: str, flag: str) -> None:
    """An empty (or blank) file name is an error, never "not given" (``-o ''`` wrote to stdout)."""
    if not path.strip():
        raise ShapelintError(f"{flag}: the file name is empty")


def check_output_path(path: str, protected: Iterable[Path], flag: str = "--output",
                      inside: Sequence[Path] = ()) -> None:
    """Refuse an output path that is empty, a folder, a FIFO, a device or a socket, one
    of the files shapelint reads (also through a symbolic link), or, given ``inside``
    (the project root, the working directory), a path whose links lead out of them: a
    link committed by a pull request must not aim the report at a file elsewhere."""
    check_file_name(path, flag)
    out = Path(path)
    if out.is_dir():
        raise ShapelintError(f"{flag} {path}: is a directory")
    refuse_special(out, flag)
    for p in protected:
        if _same_file(out, p):
            raise ShapelintError(f"{flag} {path}: is {p}, which shapelint reads; refusing to overwrite it")
    real, plain = Path(os.path.realpath(path)), Path(os.path.abspath(path))
    if inside and real != plain and not any(real.is_relative_to(os.path.realpath(f)) for f in inside):
        raise ShapelintError(f"{flag} {path}: a symbolic link leads it to {real}, outside the project; "
                             "refusing to write there")


def check_distinct(outputs: Sequence[tuple[str, str]]) -> None:
    """Two outputs of one run (``(flag, path)`` each) may not be one file."""
    for i, (flag, path) in enumerate(outputs):
        for other_flag, other in outputs[:i]:
            if _same_file(Path(path), Path(other)):
                raise ShapelintError(f"{flag} {path}: is also {other_flag}'s file; give each output its own file")


def protected_paths(targets: Iterable[Path], config_file: str | None = None,
                    rules_dirs: Sequence[str] = ()) -> list[Path]:
    """The files a run reads: its targets, the builder files their YAML names (read,
    never imported, here), the configuration file and the ``--rules-dir`` modules."""
    out: list[Path] = []
    for target in targets:
        out.append(target)
        if target.suffix.lower() in YAML_SUFFIXES:
            out.extend(_yaml_builder_file(target))
    if config_file:
        out.append(Path(config_file))
    for folder in rules_dirs:
        out.extend(sorted(Path(folder).glob("*.py")))
    return out


def graph_paths(base: str, targets: Sequence[Path]) -> list[Path]:
    """One ``--dump-graph`` file per target: ``base`` itself for one target, else
    ``<stem>-<n>-<target stem><suffix>`` beside ``base`` (n from 1: unique even when two
    targets share a name)."""
    out = Path(base)
    if len(targets) <= 1:
        return [out]
    return [out.with_name(f"{out.stem}-{i}-{_stem(t)}{out.suffix}") for i, t in enumerate(targets, start=1)]


@contextlib.contextmanager
def stdout_guard() -> Iterator[None]:
    """Run the body that writes the report to stdout; when the reader has gone
    (BrokenPipeError), stop writing quietly and point fd 1 at /dev/null so that the
    interpreter's final flush does not fail again."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        reader_gone()


class QuietStderr:
    """``sys.stderr`` that a closed pipe or a full device cannot break: the first write
    that fails points fd 2 at /dev/null and every later one goes nowhere, so that the
    run's report (stdout, ``--output``) and exit code stand (``shapelint m.py 2>&1 |
    true`` exited 2 with no report when the model printed)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return int(self.stream.write(text) or 0)
            except OSError:
                self._lose()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()
            except OSError:
                self._lose()

    def _lose(self) -> None:
        self.gone = True
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def guard_stderr() -> None:
    """Install :class:`QuietStderr` (once)."""
    if not isinstance(sys.stderr, QuietStderr) and sys.stderr is not None:
        sys.stderr = QuietStderr(sys.stderr)  # type: ignore[assignment]


def reader_gone() -> None:
    """The reader of stdout has gone: point fd 1 at /dev/null, so that later writes
    and the interpreter's final flush go nowhere instead of failing again (the run's
    exit code stays the lint's)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


# -- helpers ----------------------------------------------------------------------------


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        return False
    return a.resolve() == b.resolve()


def _yaml_builder_file(target: Path) -> list[Path]:
    """The ``file.py`` a YAML target's ``model: file.py:function`` names, if any."""
    from shapelint.files import parse_yaml, read_text

    try:
        doc = parse_yaml(read_text(target), str(target))
    except ShapelintError:
        return []
    spec = doc.get("model") if isinstance(doc, dict) else None
    if not isinstance(spec, str):
        return []
    place = spec.rpartition(":")[0]
    if not place.endswith(".py"):
        return []
    return [Path(place) if os.path.isabs(place) else target.parent / place]


def _stem(target: Path) -> str:
    name = target.parent.name if target.name == "config.json" and target.parent.name else target.stem
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


__all__ = ["QuietStderr", "check_distinct", "check_file_name", "check_output_path", "graph_paths", "guard_stderr",
           "protected_paths", "reader_gone", "stdout_guard", "write_file"]
