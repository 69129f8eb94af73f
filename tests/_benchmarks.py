"""A script under ``benchmarks/`` loaded as a module, for the tests of its pure parts
(benchmarks are scripts, not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_benchmark(script: str, name: str | None = None) -> ModuleType:
    """``benchmarks/<script>.py`` as a module named ``name`` (default: the script's)."""
    spec = importlib.util.spec_from_file_location(name or script, BENCHMARKS / f"{script}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass of the script looks its module up there
    spec.loader.exec_module(module)
    return module
