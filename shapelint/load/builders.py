"""Which builders a shapelint YAML may name: only code of its own project.

A YAML target is data, and a pull request may add one without any code; so its
``model:`` may name only

- a function (or class) defined in a ``.py`` file under the YAML's **project**: the
  nearest folder at or above the YAML that holds a ``pyproject.toml``, ``.git`` or
  ``.shapelint.yaml`` (``.yml``), else the YAML's own folder; symbolic links are
  followed before the test, or
- one defined in a module of a package the configuration allow-lists
  (``allow-builders = ["mypkg.models"]`` allows ``mypkg.models`` and its submodules).

``model: shutil:rmtree``, ``model: os:system`` and ``model: ../../elsewhere.py:f`` are
refused before anything is imported; a project module that merely imports
``rmtree`` does not make ``model: utils.py:rmtree`` allowed either (the test is where
the callable is defined, checked after the project module is imported).
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from shapelint.errors import ShapelintError

#: files whose folder is a project's top
PROJECT_MARKERS = ("pyproject.toml", ".git", ".shapelint.yaml", ".shapelint.yml")

#: the configuration key that allow-lists builder packages
ALLOW_KEY = "allow-builders"

_MODULE_NAME = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")
_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")


def project_root(yaml_path: Path) -> Path:
    """The folder a YAML target's builders must live in."""
    start = yaml_path.resolve().parent
    for folder in (start, *start.parents):
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            return folder
    return start


def split_spec(spec: str, where: str) -> tuple[str, str]:
    """``file.py:function`` or ``package.module:function`` -> (where, function)."""
    place, sep, name = spec.rpartition(":")
    if not sep or not place or not _IDENTIFIER.match(name):
        raise ShapelintError(f"{where}: model: {spec!r} must be 'module:function' or 'file.py:function'")
    return place, name


def builder_file(place: str, yaml_path: Path, where: str) -> Path:
    """The ``.py`` file a ``file.py:function`` spec names, when it is in the project."""
    file = Path(place) if os.path.isabs(place) else yaml_path.parent / place
    root = project_root(yaml_path)
    if not _inside(file.resolve(), root):
        raise ShapelintError(f"{where}: model: {place} is outside this YAML's project ({root}); a YAML may "
                             "only name builders in its own project")
    if not file.is_file():
        raise ShapelintError(f"{where}: model: {place}: no such file")
    return file


def check_module(module: str, yaml_path: Path, allow: Sequence[str], where: str) -> None:
    """Refuse, before importing it, a module neither in the project nor allow-listed."""
    if not _MODULE_NAME.match(module):
        raise ShapelintError(f"{where}: model: {module!r} is not a module name")
    if allowed_by(module, allow):
        return
    root = project_root(yaml_path)
    with module_search_path(yaml_path):
        locations = _top_level_locations(module.split(".")[0])
    if not locations or not all(_inside(Path(p).resolve(), root) for p in locations):
        raise ShapelintError(f"{where}: model: {module} is not in this YAML's project ({root}) nor allow-listed "
                             f"({ALLOW_KEY} in the configuration)")


def check_defined_inside(fn: Any, module: str | None, yaml_path: Path, allow: Sequence[str], where: str,
                         spec: str) -> Callable[..., Any]:
    """The builder itself must be defined in the project (or an allow-listed module),
    not merely imported into a project module."""
    if not callable(fn):
        place, _, name = spec.rpartition(":")
        raise ShapelintError(f"{where}: model: {place} has no function {name}")
    root = project_root(yaml_path)
    for candidate in (fn, inspect.unwrap(fn) if inspect.isfunction(fn) else fn):
        file = _defining_file(candidate)
        if file is not None and _inside(Path(file).resolve(), root):
            return fn  # type: ignore[no-any-return]
        if module is not None and allowed_by(getattr(candidate, "__module__", "") or "", allow):
            return fn  # type: ignore[no-any-return]
    origin = getattr(fn, "__module__", None) or "a module outside the project"
    raise ShapelintError(f"{where}: model: {spec} is defined in {origin}, not in this YAML's project ({root}) "
                         f"nor an allow-listed module ({ALLOW_KEY})")


def parse_allow_list(value: Any, where: str) -> list[str]:
    """The configuration's ``allow-builders`` value: a list of dotted module names
    (``["mypkg.models"]``); anything else is a one-line error naming ``where``."""
    if not isinstance(value, list):
        raise ShapelintError(f"{where}: {ALLOW_KEY} must be a list of module names, got {type(value).__name__}")
    for item in value:
        if not (isinstance(item, str) and _MODULE_NAME.match(item)):
            raise ShapelintError(f"{where}: {ALLOW_KEY}: {item!r} is not a module name such as 'mypkg.models'")
        if _is_stdlib(item):
            raise ShapelintError(f"{where}: {ALLOW_KEY}: {item!r} is part of Python itself; allow-list only "
                                 "packages of model builders")
    return list(value)


def allowed_by(module: str, allow: Sequence[str]) -> bool:
    """``mypkg.models`` allows ``mypkg.models`` and ``mypkg.models.mlp``, not ``mypkg``;
    nothing of Python's own library is ever allowed (a configuration file is in the
    pull request too: ``allow-builders = ["shutil"]`` must not open ``shutil:rmtree``)."""
    return not _is_stdlib(module) and any(module == a or module.startswith(a + ".") for a in allow if a)


def _is_stdlib(module: str) -> bool:
    top = module.split(".")[0]
    names: frozenset[str] = getattr(sys, "stdlib_module_names", frozenset())
    return top in names or top in sys.builtin_module_names


def search_folders(yaml_path: Path) -> tuple[Path, ...]:
    """Where a YAML's module builders are imported from: its own folder, then its
    project's top."""
    return tuple(dict.fromkeys((yaml_path.resolve().parent, project_root(yaml_path))))


@contextlib.contextmanager
def module_search_path(yaml_path: Path) -> Iterator[None]:
    """:func:`search_folders` first on ``sys.path`` (to find, not import, a module)."""
    saved = list(sys.path)
    sys.path[:0] = [str(p) for p in search_folders(yaml_path)]
    try:
        yield
    finally:
        sys.path[:] = saved


def _top_level_locations(name: str) -> list[str]:
    """Where a top-level module or package lives, found without running any of it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return list(spec.submodule_search_locations)
    return [spec.origin] if spec.origin and os.path.isabs(spec.origin) else []


def _defining_file(obj: Any) -> str | None:
    if inspect.isfunction(obj):
        return obj.__code__.co_filename
    if inspect.isclass(obj):
        return getattr(sys.modules.get(obj.__module__), "__file__", None)
    return None


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


__all__ = ["ALLOW_KEY", "PROJECT_MARKERS", "allowed_by", "builder_file", "check_defined_inside", "check_module",
           "module_search_path", "parse_allow_list", "project_root", "search_folders", "split_spec"]
