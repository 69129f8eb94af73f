"""shapelint: find the layer shapes that waste your GPU, before you train.

The Python API: ``shapelint.lint(model, example_inputs)`` for a model you hold,
``shapelint.lint_target(path)`` for a target file; both return a ``Report``.
"""

__version__ = "0.1.0"

from shapelint.api import Report, lint, lint_target  # noqa: E402 - after __version__, which the reporters read
from shapelint.records import Finding, Gemm, Source, Suggestion  # noqa: E402

__all__ = ["Finding", "Gemm", "Report", "Source", "Suggestion", "__version__", "lint", "lint_target"]
