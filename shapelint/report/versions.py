"""The versions that decide a report's numbers, for the JSON report's ``versions``.

The trace is torch's (which aten ops a layer dispatches to, how a kernel is chosen) and,
for a Hugging Face config, transformers' (which forward code runs, which attention path
it takes): a report is reproduced with the same ones. A cached result was made with the
same installed distributions (the cache's key, ``shapelint.app.fingerprint``), so the
versions of this process are those of the trace.
"""

from __future__ import annotations

import platform
import sys
from importlib import metadata

import torch

from shapelint.version import __version__

#: the libraries whose model code a target may run, reported where installed (null if not)
MODEL_LIBRARIES = ("transformers",)


def library_version(name: str) -> str | None:
    """The version of ``name`` this process runs: the imported module's own, else the
    installed distribution's, else None (not installed)."""
    module = sys.modules.get(name)
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    """``{"shapelint", "python", "torch", "transformers"}``: strings, null for a library
    that is not installed."""
    return {"shapelint": __version__, "python": platform.python_version(), "torch": str(torch.__version__),
            **{name: library_version(name) for name in MODEL_LIBRARIES}}


__all__ = ["MODEL_LIBRARIES", "library_version", "versions"]
