"""What decides a cached result or a replayed run besides the user's files and
options: the environment (shapelint's version and sources, every installed
distribution, ``sys.path``, Python, the local GPUs) and, for a replay, the terminal.

Upgrading any package or changing ``PYTHONPATH`` changes :func:`environment`, and
with it every key: the cache misses rather than answer for another environment.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

from shapelint.app.seal import SCHEMA
from shapelint.files import PACKAGE_DIR
from shapelint.version import __version__

#: the environment variables that decide how the text report looks on a terminal
TERMINAL_VARS = ("NO_COLOR", "FORCE_COLOR", "TERM", "COLORTERM", "COLUMNS", "LINES", "TTY_COMPATIBLE",
                 "TTY_INTERACTIVE", "CLICOLOR", "CLICOLOR_FORCE")


def digest(value: Any) -> str:
    """SHA-256 of a JSON-able value (anything else by its ``repr``)."""
    text = json.dumps(value, sort_keys=True, default=repr, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


#: a file larger than this is not hashed (None, as an unreadable one): a dependency of
#: a lint is a source or configuration file, never a checkpoint
MAX_DIGEST_BYTES = 256 * 2**20


def file_digest(path: str | Path) -> str | None:
    """SHA-256 of a regular file's bytes; None when it cannot be read, is not a
    regular file (a FIFO, a device: opened without blocking, never read) or is larger
    than :data:`MAX_DIGEST_BYTES`."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_DIGEST_BYTES:
            return None
        h = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


def source_digest() -> str:
    """SHA-256 over shapelint's own files (code, rules, GPU profiles): a development
    install changes them without changing the version."""
    import importlib.util

    h = hashlib.sha256()
    folders = [PACKAGE_DIR]
    rules = importlib.util.find_spec("shapelint.rules")
    folders += [Path(p) for p in (rules.submodule_search_locations or [])] if rules else []
    for folder in folders:
        for file in sorted(folder.rglob("*")):
            if file.suffix in (".py", ".yaml", ".yml") and "__pycache__" not in file.parts:
                h.update(str(file.relative_to(folder)).encode())
                h.update(file.read_bytes())
    return h.hexdigest()


def distributions() -> list[tuple[str, str]]:
    """Every installed distribution on ``sys.path``, by the folder of its metadata
    (``torch-2.13.0+cpu.dist-info``: name and version) and where it lies. Read from the
    folder names alone, nothing opened: a replay asks this before anything else, and
    ``importlib.metadata`` took 40-190 ms to say the same."""
    out: set[tuple[str, str]] = set()
    for entry in sys.path:
        with contextlib.suppress(OSError):
            with os.scandir(entry or ".") as found:
                out.update((os.path.abspath(entry or "."), e.name) for e in found
                           if e.name.endswith((".dist-info", ".egg-info")))
    return sorted(out)


def local_gpus() -> list[str]:
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
        "sources": source_digest(),
        "distributions": distributions(),
        "sys_path": list(sys.path),
        "python": [sys.version, sys.executable],
        "gpus": local_gpus(),
    })


def terminal() -> dict[str, Any]:
    """How the text report will look: a terminal or not, the colour settings, and on
    a terminal its size (elsewhere the report is 120 columns wide)."""
    tty = sys.stdout.isatty()
    names = TERMINAL_VARS if tty else tuple(v for v in TERMINAL_VARS if v not in ("COLUMNS", "LINES"))
    size = None
    if tty:
        with contextlib.suppress(OSError):
            size = tuple(os.get_terminal_size(sys.stdout.fileno()))
    return {"tty": tty, "size": size, "env": {v: os.environ.get(v) for v in names}}


__all__ = ["TERMINAL_VARS", "digest", "distributions", "environment", "file_digest", "local_gpus", "source_digest",
           "terminal"]
