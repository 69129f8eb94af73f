"""shapelint: find the layer shapes that waste your GPU, before you train.

The Python API: ``shapelint.lint(model, example_inputs)`` for a model you hold,
``shapelint.lint_target(path)`` for a target file; both return a ``Report``.
The API's names are imported on first use: ``import shapelint`` (and the command
replaying a cached result) imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shapelint.version import __version__

if TYPE_CHECKING:
    from shapelint.app.api import Report, lint, lint_target
    from shapelint.model.records import Finding, Gemm, Source, Suggestion

#: public name → the module that defines it
_PUBLIC = {"Report": "shapelint.app.api", "lint": "shapelint.app.api", "lint_target": "shapelint.app.api",
           "Finding": "shapelint.model.records", "Gemm": "shapelint.model.records", "Source": "shapelint.model.records",
           "Suggestion": "shapelint.model.records"}


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'shapelint' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_PUBLIC[name]), name)
    globals()[name] = value
    return value


__all__ = ["Finding", "Gemm", "Report", "Source", "Suggestion", "__version__", "lint", "lint_target"]
