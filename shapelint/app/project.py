"""The project around a run: its root (where the cache lives), the targets its
configuration names (``targets = [...]``), and which of them a commit touches
(``--hook``, the pre-commit mode).

Configured targets are files, directories and globs (``**`` included) relative to
the configuration file's folder, as ruff reads its ``include``. A file named
outright is a target as given (the loader says what is wrong with it); a glob keeps
the files that look like targets (:func:`shapelint.load.targets.looks_like_target`) and
must match at least one, so that a configuration never lints nothing in silence.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import TYPE_CHECKING

from shapelint.errors import ShapelintError
from shapelint.load.targets import looks_like_target

if TYPE_CHECKING:
    from shapelint.app.cache import Store
    from shapelint.app.config import Config


def root(cfg: Config) -> Path:
    """The configuration file's folder, else the nearest folder upwards holding
    ``.git``, else the current directory."""
    if cfg.file:
        return Path(cfg.file).resolve().parent
    here = Path.cwd().resolve()
    return next((d for d in (here, *here.parents) if (d / ".git").exists()), here)


def _shown(path: str) -> str:
    rel = os.path.relpath(path)
    return path if rel.startswith("..") and os.path.isabs(path) else rel


def configured(cfg: Config) -> list[str]:
    """The configuration's ``targets``, globs expanded, as paths relative to the
    current directory where they lie below it."""
    if not cfg.targets or not cfg.file:
        return []
    base = Path(cfg.file).parent
    out: list[str] = []
    for pattern in cfg.targets:
        full = os.path.join(base, os.path.expanduser(pattern))
        if not glob.has_magic(pattern):
            out.append(_shown(full))
            continue
        matches = [m for m in sorted(glob.glob(full, recursive=True))
                   if os.path.isdir(m) or looks_like_target(Path(m))]
        if not matches:
            raise ShapelintError(f"{cfg.where('targets')}: targets: {pattern!r} matches no target")
        out.extend(_shown(m) for m in matches)
    return list(dict.fromkeys(out))


def affected(changed: list[str], targets: list[Path], store: Store | None) -> list[Path]:
    """``--hook``: of ``targets`` (the configured ones), those never linted here or
    whose recorded dependencies include a ``changed`` file, then the changed files
    that are targets themselves."""
    # compared by real path: pre-commit names a file by its real path, a dependency is
    # recorded by the path it was imported through (a symlinked folder)
    touched = {os.path.realpath(c) for c in changed}
    out: list[Path] = []
    for t in targets:
        deps = store.dependencies(t) if store is not None else None
        if deps is None or os.path.realpath(t) in touched or {os.path.realpath(d) for d in deps} & touched:
            out.append(t)
    chosen = {os.path.abspath(t) for t in out}
    for c in changed:
        path = Path(c)
        if os.path.abspath(c) not in chosen and path.is_file() and looks_like_target(path):
            out.append(path)
            chosen.add(os.path.abspath(c))
    return out


__all__ = ["affected", "configured", "root"]
