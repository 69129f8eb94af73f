"""The user files a lint depends on: every file the lint opened for reading while it
built and traced the target (the target, the modules it imported, a YAML or JSON it
read), plus the files its GEMM records point at and the project's modules still
imported afterwards, less what belongs to Python, installed packages and shapelint.

Files are seen through ``sys.addaudithook`` (the ``open`` event: ``open()``,
``io.open_code`` of an import), so a module imported from ``__pycache__`` counts as
its source file. An audit hook cannot be removed: one is installed per process, the
first time :func:`recording` runs, and does nothing outside it.

What this cannot see: a file read by a C extension without Python's ``open``, and a
module some earlier code imported before the recording began and that the project's
own folder does not hold. The cache key also covers shapelint's own sources and every
installed distribution's version, which stands for the installed packages.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import site
import sys
import sysconfig
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from shapelint.app.fingerprint import file_digest
from shapelint.files import PACKAGE_DIR

_SHAPELINT_DIR = str(PACKAGE_DIR)

@dataclass
class Recording:
    """What the lint read while a recording ran: each file opened for reading, with the
    digest of its bytes when it was first opened (None for files that are not the
    user's); the top-level names it tried to import; the folders ``sys.path`` held."""

    opened: dict[str, str | None] = field(default_factory=dict)
    imports: set[str] = field(default_factory=set)
    search_path: set[str] = field(default_factory=set)

    def absent(self, folders: Iterable[Path]) -> list[str]:
        """The module files that an import this lint tried would find first if they
        appeared, in the user's ``folders`` that were on ``sys.path`` (a new
        ``override.py`` beside the model shadows an import that failed or found an
        installed module): they must still not exist for a result to hold."""
        roots = tuple(os.path.abspath(f) + os.sep for f in folders)
        searched = [d for d in self.search_path if (d + os.sep).startswith(roots) and os.path.isdir(d)]
        out = set()
        for name in self.imports:
            for folder in searched:
                for candidate in (os.path.join(folder, f"{name}.py"), os.path.join(folder, name, "__init__.py")):
                    if not os.path.exists(candidate):
                        out.add(candidate)
        return sorted(out)


#: the recording running (None: not recording)
_current: Recording | None = None
_hooked = False
#: set while the hook itself reads a file (its own open must not be recorded)
_in_hook = threading.local()


def _audit(event: str, args: tuple[object, ...]) -> None:
    rec = _current
    if rec is None or getattr(_in_hook, "active", False):
        return
    if event == "import":
        _note_import(rec, args)
    elif event == "open":
        _note_open(rec, args)


def _note_import(rec: Recording, args: tuple[object, ...]) -> None:
    """``import`` event: (module, filename, sys.path, sys.meta_path, sys.path_hooks)."""
    name = args[0]
    if isinstance(name, str) and name:
        rec.imports.add(name.partition(".")[0])
    path = args[2] if len(args) > 2 else None
    if isinstance(path, list):
        rec.search_path.update(os.path.abspath(p or ".") for p in path if isinstance(p, str))


def _note_open(rec: Recording, args: tuple[object, ...]) -> None:
    path, mode = args[0], args[1] if len(args) > 1 else "r"
    if not isinstance(path, str) or (mode is not None and any(c in str(mode) for c in "wax+")):
        return
    source = _source(os.path.abspath(path))  # now: user code may change the working directory
    if source is None or source in rec.opened:
        return
    _in_hook.active = True
    try:
        rec.opened[source] = file_digest(source) if not _is_system(source, _system_dirs()) else None
    finally:
        _in_hook.active = False


def _source(path: str) -> str | None:
    """``path``, or for a compiled module (``__pycache__/x.cpython-311.pyc``) its source file."""
    if "__pycache__" in path.split(os.sep) and path.endswith(".pyc"):
        try:
            return importlib.util.source_from_cache(path)
        except ValueError:
            return None
    return path


@contextlib.contextmanager
def recording() -> Iterator[Recording]:
    """Record what the ``with`` body reads (raw: filter the files with
    :func:`user_files`), each user file with the digest of its bytes when the body
    first opened it (:func:`shapelint.app.cache.unchanged` compares them with the
    files after the lint: an edit in between stores nothing)."""
    global _current, _hooked
    if not _hooked:
        sys.addaudithook(_audit)
        _hooked = True
    outer, _current = _current, Recording()
    seen = _current
    try:
        yield seen
    finally:
        _current = outer
        if outer is not None:
            for path, sha in seen.opened.items():
                outer.opened.setdefault(path, sha)
            outer.imports |= seen.imports
            outer.search_path |= seen.search_path


@functools.cache
def _system_dirs() -> tuple[str, ...]:
    """Python's own library and the installed packages, and shapelint: never the user's
    files. Not ``sys.prefix`` itself: a virtual environment at the project root, or a
    project under ``/usr/src`` beside Debian's ``/usr`` prefix, is the user's."""
    paths = sysconfig.get_paths()
    dirs = {_SHAPELINT_DIR, *(paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths),
            *site.getsitepackages(), site.getusersitepackages()}
    rules = importlib.util.find_spec("shapelint.rules")
    dirs.update((rules.submodule_search_locations or []) if rules else [])
    return tuple(os.path.normpath(d) + os.sep for d in dirs if d)


def _is_system(path: str, system: tuple[str, ...]) -> bool:
    parts = path.split(os.sep)
    return (path.startswith(system) or path.startswith(("/proc/", "/sys/", "/dev/"))
            or "site-packages" in parts or "dist-packages" in parts or "__pycache__" in parts)


def user_files(paths: Iterable[str], *, exclude: Iterable[Path] = ()) -> list[str]:
    """The user's files among ``paths``: absolute, existing regular files outside
    Python, installed packages, shapelint and ``exclude`` (the cache folder); a
    compiled module (``__pycache__/x.cpython-311.pyc``) counts as its source."""
    system = _system_dirs() + tuple(os.path.abspath(e) + os.sep for e in exclude)
    out = set()
    for raw in paths:
        path = _source(os.path.abspath(raw))
        if path is not None and not _is_system(path, system) and os.path.isfile(path):
            out.add(path)
    return sorted(out)


def project_modules(root: Path) -> list[str]:
    """Source files of the imported modules that ``root`` holds (a package of the
    project installed in development mode, say, imported before a recording began)."""
    top = os.path.abspath(root) + os.sep
    files = []
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if isinstance(file, str) and os.path.abspath(file).startswith(top):
            files.append(file)
    return files


__all__ = ["Recording", "project_modules", "recording", "user_files"]
