from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# the result cache stays off unless a test turns it on (tests/test_cache.py): a test that
# patches shapelint's internals must never be answered from another test's entry
os.environ["SHAPELINT_NO_CACHE"] = "1"
# the cache's key lives in the user's cache home: the suite's own, never the machine user's
if "SHAPELINT_TEST_KEEP_HOME" not in os.environ:
    import tempfile

    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="shapelint-test-cache-home-")

# pytest-xdist runs one worker per core (pyproject.toml's addopts): each worker's torch
# computes on one thread, not on every core against the other workers
if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="module", autouse=True)
def _collector_skips_earlier_modules() -> Iterator[None]:
    """What earlier test modules left alive (torch, transformers, cached captures) is
    moved out of the cyclic collector's reach, after one collection that frees their
    garbage. A full collection then walks only what this module creates, as in the
    CLI's one-lint process: --verify --step's gc.collect() after each variant walked
    the whole suite's heap (9 of its 25 s) and every automatic collection did too.
    Objects this module creates are collected as ever."""
    gc.collect()
    gc.freeze()
    yield


@pytest.fixture(autouse=True)
def _one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Targets are linted in this process (capsys sees what user code prints) unless a
    test asks for --jobs."""
    monkeypatch.setattr("shapelint.app.parallel.cores", lambda: 1)


@pytest.fixture
def examples() -> Path:
    return EXAMPLES


@pytest.fixture(scope="session")
def small_corpus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """tests/corpus's configs at 2 layers, written once per session (per xdist worker):
    tests/test_models_corpus.py and tests/test_models_tp.py trace the same files."""
    from test_models_corpus import write_small

    return write_small(tmp_path_factory.mktemp("corpus"))


#: the test files whose tests take several seconds each (a real pre-commit in a git
#: repository, the benchmark's smoke run): started first
SLOW_FILES = ("test_precommit.py", "test_corpus_findings_bench.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest single tests first (a stable sort: the rest keep their order).
    pytest-xdist hands tests out in this order, so a slow one started last does not keep
    one worker busy after the other has finished. Order only: no test depends on another."""
    items.sort(key=lambda item: item.path.name not in SLOW_FILES)
