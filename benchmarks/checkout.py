"""The repository's ``rules/`` folder as ``shapelint.rules``, for benchmarks run from a
checkout: the package's install maps it there, a bare checkout (the GPU machine gets a
copy of the tree) does not."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def map_rules() -> None:
    """Import ``ROOT/rules`` as ``shapelint.rules`` (``shapelint`` itself imported first)."""
    import shapelint

    spec = importlib.util.spec_from_file_location("shapelint.rules", ROOT / "rules" / "__init__.py",
                                                  submodule_search_locations=[str(ROOT / "rules")])
    assert spec is not None and spec.loader is not None
    rules = importlib.util.module_from_spec(spec)
    sys.modules["shapelint.rules"] = rules
    spec.loader.exec_module(rules)
    shapelint.rules = rules  # type: ignore[attr-defined]
