"""The result cache, ``.shapelint_cache/`` at the project root (like ``.ruff_cache``).

**What it holds.** Two kinds of record, each one file written whole (a temporary file,
then a rename), each inert JSON data (:mod:`shapelint.model.serial`; nothing in it is ever
run, imported or unpickled):

- ``results/<target>-<options>.json``, one per target and set of options: the
  target's ``Result`` as ``lint_target`` returned it (before per-module ignores and
  ``# shapelint: ignore`` comments, applied on every run), the digest of the
  environment (:func:`shapelint.app.fingerprint.environment`) and every file the lint
  depended on (:mod:`shapelint.app.deps`) with the SHA-256 of its content. It is used
  only when the environment and every dependency still match.
- ``runs/<key>.json``: what a whole run printed (stdout, stderr, the ``--output``
  file) and its exit code, keyed by the command line, the configuration, the
  terminal, the working directory and every target's valid record. A re-run with
  nothing changed replays it without importing torch.

**Why it can be trusted.** Every record carries an HMAC-SHA256 of its bytes under a
key that lives outside the work tree, in the user's cache home
(:mod:`shapelint.app.seal`): a record committed to a repository, restored from a
shared CI cache, written by another machine or user, or edited, does not verify and
is a miss, never a result. A record that verifies still has to decode as exactly the
types it should hold, and a replayed exit code must be 0, 1 or 2 and agree with the
findings and errors it replays. Without a usable key the cache is off for the run.

**What it covers.** The environment digest (:mod:`shapelint.app.fingerprint`) holds
shapelint's version and sources, every installed distribution's name and version,
``sys.path``, Python's version and the local GPUs: upgrading any package, or a
``PYTHONPATH`` change, is a miss.

**What it deletes.** ``shapelint clean`` removes only a folder carrying shapelint's
``CACHEDIR.TAG``, and in it only the files of its own layout; whatever else the
folder holds stays, and so does the folder (:meth:`Store.clear`). A folder that exists
and is not a shapelint cache is never used (:meth:`Store.check`), nor is the project
root, a folder above it or above the working directory, or the home folder.

Clear it with ``shapelint clean``. ``--no-cache`` neither reads nor writes it;
``--cache-dir DIR`` puts it elsewhere.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shapelint.app import fingerprint, seal
from shapelint.app.fingerprint import digest, file_digest
from shapelint.errors import ShapelintError

if TYPE_CHECKING:
    from shapelint.pipeline.result import Result

DIR_NAME = ".shapelint_cache"
GITIGNORE = "# Automatically created by shapelint.\n*\n"
CACHEDIR_TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
                "# This file is a cache directory tag created by shapelint.\n")
#: the files a shapelint cache folder holds, by sub-folder (``""``: the folder itself);
#: ``.entry`` files are schema 1's, ``.tmp-`` files an interrupted write's
_LAYOUT: dict[str, re.Pattern[str]] = {
    "results": re.compile(r"[0-9a-f]{24}-[0-9a-f]{24}\.(json|entry)|\.tmp-\w+"),
    "runs": re.compile(r"[0-9a-f]{64}\.json|\.tmp-\w+"),
}
#: the largest record read (a 50-target run's output is a few MB)
_MAX_RECORD = 256 * 2**20


# -- the store ------------------------------------------------------------------------


@dataclass
class Replay:
    """What a run printed, to print again, and what decided its exit code."""

    stdout: str
    stderr: str
    output: str | None  # the --output file's text
    rc: int
    #: unsuppressed, confirmed findings and failed targets of the run
    findings: int = 0
    errors: int = 0
    exit_zero: bool = False

    def consistent(self) -> bool:
        """The exit code is the one these findings and errors give (0, 1 or 2)."""
        expected = 2 if self.errors else 1 if self.findings and not self.exit_zero else 0
        return self.rc == expected and self.findings >= 0 and self.errors >= 0


def default_dir(project_root: Path) -> Path:
    return project_root / DIR_NAME


def is_cache(folder: Path) -> bool:
    """``folder`` is a shapelint cache: a real folder holding shapelint's own tag, whose
    record folders (where they exist) are real folders too, not links out of it."""
    try:
        if folder.is_symlink() or not folder.is_dir():
            return False
        if any((folder / sub).is_symlink() or (folder / sub).exists() and not (folder / sub).is_dir()
               for sub in ("results", "runs")):
            return False
        tag = folder / "CACHEDIR.TAG"
        if not _is_file(tag):
            return False
        with open(tag, "rb") as f:  # the tag's size, no more: a planted huge file is not read whole
            return f.read(len(CACHEDIR_TAG) + 1) == CACHEDIR_TAG.encode()
    except OSError:
        return False


def forbidden(folder: Path, project_root: Path) -> str | None:
    """Why ``folder`` can never be a cache folder (the project root, a folder above it
    or above the working directory, the home folder), else None."""
    try:
        where = folder.resolve()
    except (OSError, RuntimeError):
        return "cannot be resolved"
    roots = {"the project root": project_root.resolve(), "the working directory": Path.cwd().resolve()}
    for name, root in roots.items():
        if where == root:
            return f"is {name}"
        if root.is_relative_to(where):
            return f"holds {name}"
    if where == Path.home().resolve():
        return "is the home folder"
    return None


class Store:
    """One cache folder. Every read that fails (missing, corrupt, foreign, forged) is a miss."""

    def __init__(self, folder: Path, key: bytes | None = None) -> None:
        self.folder = folder
        self.key = key

    @classmethod
    def open(cls, folder: Path, project_root: Path, flag: str) -> Store | None:
        """The store in ``folder``, after :meth:`check`; None when no key can be had."""
        store = cls(folder)
        store.check(project_root, flag)
        if _inside(seal.key_file(), (project_root, Path.cwd(), folder)):
            return None  # a key the work tree (a pull request) could supply signs nothing
        key = seal.key()
        return None if key is None else cls(folder, key)

    def check(self, project_root: Path, flag: str) -> None:
        """Refuse a folder shapelint must not use: one :func:`forbidden` names, or one
        that exists and is neither empty nor a shapelint cache."""
        why = forbidden(self.folder, project_root)
        if why is None and (self.folder.is_symlink() or self.folder.exists()) and not is_cache(self.folder):
            empty = self.folder.is_dir() and not self.folder.is_symlink() and not any(self.folder.iterdir())
            why = None if empty else "exists and is not a shapelint cache (no CACHEDIR.TAG of shapelint's)"
        if why:
            raise ShapelintError(f"{flag} {self.folder}: {why}; give the cache a folder of its own (--cache-dir, "
                                 "SHAPELINT_CACHE_DIR) or --no-cache")

    # -- files
    def _results(self) -> Path:
        return self.folder / "results"

    def _entry(self, target: Path, options: str) -> Path:
        return self._results() / f"{_target_id(target)}-{options[:24]}.json"

    def _prepare(self) -> None:
        """Make the folder (only a new or empty one: :meth:`check` ran) and its layout."""
        fresh = not is_cache(self.folder)
        for sub in (self._results(), self.folder / "runs"):
            sub.mkdir(parents=True, exist_ok=True)
        if fresh:
            for name, text in ((".gitignore", GITIGNORE), ("CACHEDIR.TAG", CACHEDIR_TAG)):
                _write_new(self.folder / name, text.encode())

    def _write(self, path: Path, doc: dict[str, Any]) -> None:
        """Write a record whole or not at all (a cache that cannot be written is no error)."""
        if self.key is None:
            return
        tmp = None
        try:
            self._prepare()
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(seal.seal(self.key, _address(path), doc))
            os.replace(tmp, path)
        except OSError:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    def _read(self, path: Path) -> dict[str, Any] | None:
        """A record's body when it verifies under this store's key."""
        if self.key is None:
            return None
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    return None
                data = f.read(_MAX_RECORD + 1)
        except OSError:
            return None
        return None if len(data) > _MAX_RECORD else seal.unseal(self.key, _address(path), data)

    # -- per-target results
    def _header(self, path: Path) -> dict[str, Any] | None:
        """The record when it is valid now: this environment, every dependency unchanged."""
        doc = self._read(path)
        if doc is None or doc.get("env") != fingerprint.environment():
            return None
        deps = doc.get("deps")
        if not isinstance(deps, dict) or "result" not in doc:
            return None
        # a digest per file read; None for a file that must still not exist (one an import
        # looked for and did not find, which would now shadow what it found instead)
        if any(not (sha is None or isinstance(sha, str)) or file_digest(file) != sha for file, sha in deps.items()):
            return None
        return doc

    def valid(self, target: Path, options: str) -> str | None:
        """A digest of the target's record for ``options`` if it can be used now."""
        doc = self._header(self._entry(target, options))
        return None if doc is None else digest(doc)

    def load(self, target: Path, options: str) -> Result | None:
        doc = self._header(self._entry(target, options))
        if doc is None or doc.get("target") != str(target.resolve()):
            return None
        from shapelint.model import serial
        from shapelint.pipeline.result import result_from_data

        try:
            result = result_from_data(doc["result"])
        except serial.DecodeError:
            return None
        return replace(result, inputs=tuple((f, sha) for f, sha in doc["deps"].items() if sha is not None))

    def save(self, target: Path, options: str, result: Result, deps: dict[str, str | None]) -> None:
        """Store ``result`` with its dependencies' digests (taken before the lint read them)."""
        from shapelint.pipeline.result import result_to_data

        doc = {"env": fingerprint.environment(), "target": str(target.resolve()), "deps": deps,
               "result": result_to_data(result)}
        self._write(self._entry(target, options), doc)

    def dependencies(self, target: Path) -> set[str] | None:
        """The files any valid record of ``target`` recorded (None: never linted here)."""
        found: set[str] | None = None
        if not self._results().is_dir():
            return None
        for entry in self._results().glob(f"{_target_id(target)}-*.json"):
            doc = self._read(entry)
            if doc is not None and isinstance(doc.get("deps"), dict):
                found = (found or set()) | {str(d) for d in doc["deps"]}
        return found

    # -- whole runs
    def _run(self, key: str) -> Path:
        return self.folder / "runs" / f"{key}.json"

    def replay(self, key: str) -> Replay | None:
        doc = self._read(self._run(key))
        if doc is None or doc.get("env") != fingerprint.environment():
            return None
        from shapelint.model import serial

        try:
            replay: Replay = serial.decode(Replay, doc.get("run"))
        except serial.DecodeError:
            return None
        return replay if replay.consistent() else None

    def save_run(self, key: str, replay: Replay) -> None:
        from shapelint.model import serial

        if replay.consistent():
            self._write(self._run(key), {"env": fingerprint.environment(), "run": serial.encode(replay)})

    def clear(self) -> list[Path]:
        """Delete what shapelint made here: the files of its layout, then each folder
        left empty, the tag last. Returns what stays (anything shapelint did not make);
        while something stays, so do the folder and its tag."""
        if not is_cache(self.folder):
            return [self.folder]
        stays = [kept for sub in ("results", "runs") for kept in self._clear_sub(sub)]
        for entry in self.folder.iterdir():
            if entry.name in ("results", "runs", "CACHEDIR.TAG"):
                continue
            if entry.name == ".gitignore" and _is_file(entry) and entry.read_bytes() == GITIGNORE.encode():
                entry.unlink()
            else:
                stays.append(entry)
        if not stays:
            (self.folder / "CACHEDIR.TAG").unlink()
            self.folder.rmdir()
        return stays

    def _clear_sub(self, sub: str) -> list[Path]:
        """Delete the files of ``sub``'s layout and ``sub`` itself once empty; what stays."""
        folder = self.folder / sub
        if not folder.exists() and not folder.is_symlink():
            return []
        if folder.is_symlink() or not folder.is_dir():
            return [folder]
        stays = _remove_layout(folder, _LAYOUT[sub])
        if not stays:
            folder.rmdir()
        return stays


def _is_file(path: Path) -> bool:
    """A regular file, not a link to one."""
    return not path.is_symlink() and path.is_file()


def _remove_layout(folder: Path, names: re.Pattern[str]) -> list[Path]:
    """Delete the files of ``folder`` whose names ``names`` matches (regular files, no
    links); the rest stays and is returned."""
    stays = []
    for entry in sorted(folder.iterdir()):
        if names.fullmatch(entry.name) and _is_file(entry):
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
        else:
            stays.append(entry)
    return stays


def _write_new(path: Path, data: bytes) -> None:
    """Create ``path`` with ``data``; an existing file (or link) is left alone."""
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


def _address(path: Path) -> str:
    """A record's place in the cache (``results/<id>-<options>``, ``runs/<key>``), which
    its seal covers: a record copied to another's name does not verify."""
    return f"{path.parent.name}/{path.stem}"


def _inside(path: Path, folders: Iterable[Path]) -> bool:
    """``path`` (resolved) lies in one of ``folders``."""
    try:
        where = path.resolve()
        return any(where.is_relative_to(folder.resolve()) for folder in folders)
    except (OSError, RuntimeError):
        return True


def _target_id(target: Path) -> str:
    return hashlib.sha256(str(target.resolve()).encode()).hexdigest()[:24]


def run_key(parts: dict[str, Any], entries: Sequence[str]) -> str:
    """The key of a whole run: its command line and settings (``parts``), the terminal,
    the working directory and each target's record digest, in order."""
    return digest({"parts": parts, "entries": list(entries), "terminal": fingerprint.terminal(),
                   "cwd": os.getcwd(), "env": fingerprint.environment()})


def unchanged(before: dict[str, str | None], files: Iterable[str]) -> dict[str, str] | None:
    """Each of ``files`` with its digest now, when every file ``before`` knows still has
    the digest it had then (None: one changed during the lint, so nothing is stored)."""
    now: dict[str, str] = {}
    for file in files:
        sha = file_digest(file)
        if sha is None:
            continue
        if file in before and before[file] != sha:
            return None
        now[file] = sha
    return now


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


__all__ = ["CACHEDIR_TAG", "DIR_NAME", "GITIGNORE", "Replay", "Store", "Tee", "default_dir", "forbidden", "is_cache",
           "run_key", "unchanged"]
