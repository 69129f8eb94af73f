"""What is a shapelint target, decided by reading (never importing) a file, and which
targets a directory holds.

One test serves ``--skip-other-files`` (what pre-commit passes) and directory
discovery: a Python file that defines or imports ``shapelint_model``, a JSON file
with a ``"model_type"`` key (a Hugging Face config), a YAML file with a top-level
``model:`` or ``hf_config:`` key. A directory is walked for JSON and YAML targets
only (a directory scan never picks a Python file: importing one runs it); files that
are not targets are passed over and returned with the reason, so ``--verbose`` can
list them. Hidden folders, ``node_modules``, ``__pycache__``, ``site-packages`` and
virtual environments (any folder holding ``pyvenv.cfg``) are not entered.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from shapelint.errors import ShapelintError
from shapelint.files import MAX_BYTES, check_regular, read_bytes

PY_SUFFIX = ".py"
JSON_SUFFIX = ".json"
YAML_SUFFIXES = (".yaml", ".yml")

#: folders a directory walk never enters (besides hidden ones and virtual environments)
SKIPPED_DIRS = frozenset({"node_modules", "__pycache__", "site-packages", "dist-packages"})
VENV_MARKER = "pyvenv.cfg"

_PY_TARGET = re.compile(
    r"^\s*(?:async\s+)?def\s+shapelint_model\b|^\s*shapelint_model\s*=|^\s*from\s+\S+\s+import\b.*\bshapelint_model\b",
    re.MULTILINE)
_JSON_TARGET = re.compile(r'"model_type"\s*:')
_YAML_TARGET = re.compile(r"^[\"']?(?:model|hf_config)[\"']?\s*:", re.MULTILINE)


@dataclass
class Discovery:
    """The targets found, in order, and the files passed over with the reason."""

    targets: list[Path] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)


def why_not_target(path: Path) -> str | None:
    """None when ``path`` could be a shapelint target; else why it is not. Unreadable
    files count as targets (the loader then says what is wrong with them)."""
    if path.is_dir():
        return None
    suffix = path.suffix.lower()
    if suffix not in (PY_SUFFIX, JSON_SUFFIX, *YAML_SUFFIXES):
        return "not a .py, .json, .yaml or .yml file"
    try:
        text = read_bytes(path, str(path), MAX_BYTES).decode("utf-8", errors="replace")
    except ShapelintError:
        return None
    if suffix == PY_SUFFIX:
        return None if _PY_TARGET.search(text) else "defines no shapelint_model"
    if suffix == JSON_SUFFIX:
        return None if _JSON_TARGET.search(text) else "a JSON file without \"model_type\""
    return None if _YAML_TARGET.search(text) else "a YAML file without a top-level model: or hf_config: key"


def target_kind(path: Path) -> str:
    """Which loader reads ``path``: ``python``, ``hf-config`` (a config.json, or a
    directory holding one) or ``yaml``, by its name alone."""
    if path.is_dir():
        if (path / "config.json").is_file():
            return "hf-config"
        raise ShapelintError(f"{path}: a directory without config.json (lint a directory of configs with its files)")
    if path.suffix == PY_SUFFIX:
        return "python"
    if path.suffix == JSON_SUFFIX:
        return "hf-config"
    if path.suffix in YAML_SUFFIXES:
        return "yaml"
    raise ShapelintError(f"{path}: not a Python file, a config.json, a shapelint YAML or a directory")


def looks_like_target(path: Path) -> bool:
    """For ``--skip-other-files``: could this file be a shapelint target?"""
    return why_not_target(path) is None


def chosen(names: Iterable[str], skip_other_files: bool = False, verbose: bool = False) -> list[Path]:
    """The run's targets: :func:`discover`'s, with ``skip_other_files`` only the
    files that can be targets; ``verbose`` lists what was passed over, and why, on
    stderr."""
    found = discover(names)
    paths, skipped = found.targets, list(found.skipped)
    if skip_other_files:
        reasons = [(p, why_not_target(p)) for p in paths]
        paths = [p for p, why in reasons if why is None]
        skipped += [(p, why) for p, why in reasons if why is not None]
    if verbose:
        for p, why in skipped:
            print(f"shapelint: skipped {p}: {why}", file=sys.stderr)
    return paths


def discover(paths: Iterable[str]) -> Discovery:
    """Files named on the command line are targets as given (the loader reports what
    is wrong with them); directories are walked for the JSON and YAML targets under
    them. A directory holding none is an error (linting nothing must not pass)."""
    found = Discovery()
    for name in paths:
        path = Path(name)
        if not path.exists():
            raise ShapelintError(f"{name}: no such file or directory")
        if not path.is_dir():
            found.targets.append(path)
            continue
        before = len(found.targets)
        _walk(path, found)
        if len(found.targets) == before:
            raise ShapelintError(f"{name}: no config.json or shapelint YAML under this directory")
    return found


def _walk(top: Path, found: Discovery) -> None:
    for folder, dirs, files in os.walk(top):
        here = Path(folder)
        kept = []
        for d in sorted(dirs):
            reason = _skipped_dir(here / d)
            if reason:
                found.skipped.append((here / d, reason))
            else:
                kept.append(d)
        dirs[:] = kept
        for f in sorted(files):
            file = here / f
            if file.suffix.lower() not in (JSON_SUFFIX, *YAML_SUFFIXES):
                continue
            reason = _unreadable(file) or why_not_target(file)
            if reason is None:
                found.targets.append(file)
            else:
                found.skipped.append((file, reason))


def _unreadable(file: Path) -> str | None:
    """Why a file met in a directory walk cannot be a target: hidden, not a regular
    file (a FIFO, a device, a dangling link) or too large."""
    if file.name.startswith("."):
        return "a hidden file"
    try:
        check_regular(file)
    except ShapelintError as exc:
        return str(exc).removeprefix(f"{file}: ")
    return None


def _skipped_dir(path: Path) -> str | None:
    if path.name.startswith("."):
        return "a hidden folder"
    if path.name in SKIPPED_DIRS:
        return f"a {path.name} folder"
    if (path / VENV_MARKER).is_file():
        return "a virtual environment"
    if path.is_symlink():
        return "a symbolic link to a folder"
    return None


__all__ = ["SKIPPED_DIRS", "Discovery", "discover", "looks_like_target", "why_not_target"]
