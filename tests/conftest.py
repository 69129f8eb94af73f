from __future__ import annotations

import os
from pathlib import Path

import pytest

# the result cache stays off unless a test turns it on (tests/test_cache.py): a test that
# patches shapelint's internals must never be answered from another test's entry
os.environ["SHAPELINT_NO_CACHE"] = "1"

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture(autouse=True)
def _one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Targets are linted in this process (capsys sees what user code prints) unless a
    test asks for --jobs."""
    monkeypatch.setattr("shapelint.parallel.cores", lambda: 1)


@pytest.fixture
def examples() -> Path:
    return EXAMPLES
