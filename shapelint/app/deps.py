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
import hashlib
import importlib.util
import os
import site
import sys
import sysconfig
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from shapelint.files import PACKAGE_DIR

_SHAPELINT_DIR = str(PACKAGE_DIR)

#: the files opened for reading while a recording runs, each with the digest of its
#: bytes when it was first opened (None: not recording)
_opened: dict[str, str | None] | None = None
_hooked = False
#: set while the hook itself reads a file (its own open must not be recorded)
_in_hook = threading.local()


def _audit(event: str, args: tuple[object, ...]) -> None:
    if _opened is None or event != "open" or getattr(_in_hook, "active", False):
        return
    path, mode = args[0], args[1] if len(args) > 1 else "r"
    if not isinstance(path, str) or (mode is not None and any(c in str(mode) for c in "wax+")):
        return
    path = _source(os.path.abspath(path))  # now: user code may change the working directory
    if path is None or path in _opened:
        return
    _in_hook.active = True
    try:
        _opened[path] = _digest(path) if not _is_system(path, _system_dirs()) else None
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


def _digest(path: str) -> str | None:
    """SHA-256 of a regular file's bytes, as the lint is about to read them."""
    try:
        if not os.path.isfile(path):
            return None
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


@contextlib.contextmanager
def recording() -> Iterator[dict[str, str | None]]:
    """Collect the paths opened for reading inside the ``with`` body (raw: filter
    them with :func:`user_files`), each user file with the digest of its bytes when
    the body first opened it (:func:`shapelint.app.cache.unchanged` compares them with the
    files after the lint: an edit in between stores nothing)."""
    global _opened, _hooked
    if not _hooked:
        sys.addaudithook(_audit)
        _hooked = True
    outer, _opened = _opened, {}
    seen = _opened
    try:
        yield seen
    finally:
        _opened = outer
        if outer is not None:
            for path, sha in seen.items():
                outer.setdefault(path, sha)


@functools.cache
def _system_dirs() -> tuple[str, ...]:
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, _SHAPELINT_DIR,
            *sysconfig.get_paths().values(), *site.getsitepackages(), site.getusersitepackages()}
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


__all__ = ["project_modules", "recording", "user_files"]
