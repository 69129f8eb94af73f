"""The result cache, ``.shapelint_cache/`` at the project root (like ``.ruff_cache``).

Two kinds of entry, each one file written whole (a temporary file, then a rename):

- ``results/<target>-<options>.entry``, one per target and set of options: a JSON
  header line, then the target's pickled ``lint.Result`` as ``lint_target`` returned
  it (before per-module ignores and ``# shapelint: ignore`` comments, which are
  applied on every run). The header holds the format ``SCHEMA``, the digest of the
  environment (:func:`environment`: shapelint's version and sources, the versions of
  torch, transformers and Python, the local GPU), and every file the lint depended
  on (:mod:`shapelint.deps`) with the SHA-256 of its content. It is used only when
  all of these still match and the payload's own digest does: an edited dependency,
  a different shapelint or torch, a truncated or foreign file is a miss, and the
  entry is rewritten.
- ``runs/<key>.json``: what a whole run printed (stdout, stderr, the ``--output``
  file) and its exit code, keyed by the command line, the configuration, the
  terminal, the working directory and every target's valid entry. A re-run with
  nothing changed replays it without importing torch; a run that misses renders
  from the per-target results (unpickling them imports torch, but nothing is traced
  again) and stores the new output.

Why rendered output rather than a torch-free form of ``Result``: the reporters read
the GEMM records, findings and GPU profile through the same classes the pipeline
builds, and the summary is still changing; output replayed byte for byte cannot
drift from what the reporters print, and any change to shapelint's sources is a
miss (the environment digest covers them), so a changed result shape is never
trusted.

Clear it with ``shapelint clean`` (or delete the folder). ``--no-cache`` neither
reads nor writes it; ``--cache-dir DIR`` puts it elsewhere.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import pickle
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shapelint import __version__

if TYPE_CHECKING:
    from shapelint.pipeline import Result

#: the layout of an entry: raise it whenever what an entry holds changes meaning
SCHEMA = 1
DIR_NAME = ".shapelint_cache"
_GITIGNORE = "# Automatically created by shapelint.\n*\n"
_CACHEDIR_TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
                 "# This file is a cache directory tag created by shapelint.\n")
#: the environment variables that decide how the text report looks on a terminal
_TERMINAL_VARS = ("NO_COLOR", "FORCE_COLOR", "TERM", "COLORTERM", "COLUMNS", "LINES", "TTY_COMPATIBLE",
                  "TTY_INTERACTIVE", "CLICOLOR", "CLICOLOR_FORCE")


def digest(value: Any) -> str:
    """SHA-256 of a JSON-able value (anything else by its ``repr``)."""
    text = json.dumps(value, sort_keys=True, default=repr, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_digest(path: str | Path) -> str | None:
    """SHA-256 of a file's bytes; None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest() if hasattr(hashlib, "file_digest") \
                else hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


# -- what decides every result ------------------------------------------------------


def _package_version(name: str) -> str | None:
    """An installed package's ``__version__``, read from its files (no import)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent
    for file in (folder / "version.py", Path(spec.origin)):
        try:
            text = file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        m = re.search(r"^__version__\s*(?::\s*str\s*)?=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
        if m:
            return f"{m.group(1)} {folder}"
    return str(folder)


def _source_digest() -> str:
    """SHA-256 over shapelint's own files (code, rules, GPU profiles): a development
    install changes them without changing the version."""
    import importlib.util

    h = hashlib.sha256()
    folders = [Path(__file__).parent]
    rules = importlib.util.find_spec("shapelint.rules")
    folders += [Path(p) for p in (rules.submodule_search_locations or [])] if rules else []
    for folder in folders:
        for file in sorted(folder.rglob("*")):
            if file.suffix in (".py", ".yaml", ".yml") and "__pycache__" not in file.parts:
                h.update(str(file.relative_to(folder)).encode())
                h.update(file.read_bytes())
    return h.hexdigest()


def _local_gpus() -> list[str]:
    """What decides the default GPU profile, read without torch: the NVIDIA driver's
    description of each GPU and which of them CUDA may use."""
    out = [os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")]
    with contextlib.suppress(OSError):
        for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
            out.append(info.read_text(errors="replace"))
    return out


@functools.cache
def environment() -> str:
    """The digest of everything outside the user's files and options that decides a result."""
    return digest({
        "schema": SCHEMA,
        "shapelint": __version__,
        "sources": _source_digest(),
        "torch": _package_version("torch"),
        "transformers": _package_version("transformers"),
        "python": sys.version,
        "gpus": _local_gpus(),
    })


def terminal() -> dict[str, Any]:
    """How the text report will look: a terminal or not, the colour settings, and on
    a terminal its size (elsewhere the report is 120 columns wide)."""
    tty = sys.stdout.isatty()
    names = _TERMINAL_VARS if tty else tuple(v for v in _TERMINAL_VARS if v not in ("COLUMNS", "LINES"))
    size = None
    if tty:
        with contextlib.suppress(OSError):
            size = tuple(os.get_terminal_size(sys.stdout.fileno()))
    return {"tty": tty, "size": size, "env": {v: os.environ.get(v) for v in names}}


# -- the store ------------------------------------------------------------------------


@dataclass
class Replay:
    """What a run printed, to print again."""

    stdout: str
    stderr: str
    output: str | None  # the --output file's text
    rc: int


def default_dir(project_root: Path) -> Path:
    return project_root / DIR_NAME


class Store:
    """One cache folder. Every read that fails (missing, corrupt, foreign) is a miss."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    # -- files
    def _results(self) -> Path:
        return self.folder / "results"

    def _entry(self, target: Path, options: str) -> Path:
        return self._results() / f"{_target_id(target)}-{options[:24]}.entry"

    def _prepare(self) -> None:
        for sub in (self._results(), self.folder / "runs"):
            sub.mkdir(parents=True, exist_ok=True)
        for name, text in ((".gitignore", _GITIGNORE), ("CACHEDIR.TAG", _CACHEDIR_TAG)):
            if not (self.folder / name).is_file():
                (self.folder / name).write_text(text, encoding="utf-8")

    def _write(self, path: Path, data: bytes) -> None:
        """Write ``path`` whole or not at all (a cache that cannot be written is no error)."""
        try:
            self._prepare()
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError, UnboundLocalError):
                os.unlink(tmp)

    # -- per-target results
    def _header(self, path: Path) -> dict[str, Any] | None:
        """The entry's header when it is valid now: this schema and environment, every
        dependency unchanged."""
        try:
            with open(path, "rb") as f:
                header = json.loads(f.readline(1 << 22))
        except (OSError, ValueError):
            return None
        if not isinstance(header, dict) or header.get("schema") != SCHEMA or header.get("env") != environment():
            return None
        deps = header.get("deps")
        if not isinstance(deps, dict) or not isinstance(header.get("payload"), str):
            return None
        if any(file_digest(file) != sha for file, sha in deps.items()):
            return None
        return header

    def valid(self, target: Path, options: str) -> str | None:
        """The digest of the target's entry for ``options`` if it can be used now."""
        header = self._header(self._entry(target, options))
        return None if header is None else str(header["payload"])

    def load(self, target: Path, options: str) -> Result | None:
        path = self._entry(target, options)
        header = self._header(path)
        if header is None:
            return None
        try:
            with open(path, "rb") as f:
                f.readline(1 << 22)
                payload = f.read()
            if hashlib.sha256(payload).hexdigest() != header["payload"]:
                return None
            result = pickle.loads(payload)
        except Exception:  # noqa: BLE001 - a corrupt entry is a miss
            return None
        from shapelint.pipeline import Result

        if not isinstance(result, Result):
            return None
        # Hardware keeps its hash, which is per process (string hashing is salted)
        return replace(result, hardware=replace(result.hardware))

    def save(self, target: Path, options: str, result: Result, deps: Iterable[str]) -> None:
        digests = {file: file_digest(file) for file in sorted(set(deps))}
        payload = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        header = {"schema": SCHEMA, "env": environment(), "target": str(target.resolve()),
                  "deps": {f: d for f, d in digests.items() if d is not None},
                  "payload": hashlib.sha256(payload).hexdigest()}
        self._write(self._entry(target, options), json.dumps(header).encode() + b"\n" + payload)

    def dependencies(self, target: Path) -> set[str] | None:
        """The files any entry of ``target`` recorded (None: never linted here)."""
        found: set[str] | None = None
        for entry in self._results().glob(f"{_target_id(target)}-*.entry"):
            try:
                with open(entry, "rb") as f:
                    header = json.loads(f.readline(1 << 22))
                if header.get("schema") == SCHEMA and isinstance(header.get("deps"), dict):
                    found = (found or set()) | set(header["deps"])
            except (OSError, ValueError, AttributeError):
                continue
        return found

    # -- whole runs
    def _run(self, key: str) -> Path:
        return self.folder / "runs" / f"{key}.json"

    def replay(self, key: str) -> Replay | None:
        try:
            doc = json.loads(self._run(key).read_text(encoding="utf-8"))
            if doc.get("schema") != SCHEMA or doc.get("env") != environment():
                return None
            return Replay(str(doc["stdout"]), str(doc["stderr"]), doc["output"], int(doc["rc"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def save_run(self, key: str, replay: Replay) -> None:
        doc = {"schema": SCHEMA, "env": environment(), "stdout": replay.stdout, "stderr": replay.stderr,
               "output": replay.output, "rc": replay.rc}
        self._write(self._run(key), json.dumps(doc).encode("utf-8"))

    def clear(self) -> bool:
        """Delete the folder (only if it is a shapelint cache). True when there was one."""
        if not (self.folder / "CACHEDIR.TAG").is_file() and not (self.folder / "results").is_dir():
            return False
        shutil.rmtree(self.folder, ignore_errors=True)
        return True


def _target_id(target: Path) -> str:
    return hashlib.sha256(str(target.resolve()).encode()).hexdigest()[:24]


def run_key(parts: dict[str, Any], entries: Sequence[str]) -> str:
    """The key of a whole run: its command line and settings (``parts``), the terminal,
    the working directory and each target's entry digest, in order."""
    return digest({"parts": parts, "entries": list(entries), "terminal": terminal(), "cwd": os.getcwd(),
                   "env": environment()})


class Tee:
    """A text stream that also keeps what is written (for a run's replay); it answers
    ``isatty``/``fileno`` as the stream it wraps, so rich colours it as before."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.kept: list[str] = []

    def write(self, text: str) -> int:
        self.kept.append(text)
        return int(self.stream.write(text) or 0)

    def text(self) -> str:
        return "".join(self.kept)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


__all__ = ["DIR_NAME", "SCHEMA", "Replay", "Store", "Tee", "default_dir", "digest", "environment", "run_key"]
