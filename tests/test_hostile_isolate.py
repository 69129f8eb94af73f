"""The whole lint in a forked child: what no try can contain becomes one line."""

from __future__ import annotations

import io
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from shapelint import isolate
from shapelint.errors import ShapelintError

pytestmark = pytest.mark.skipif(not isolate.available(), reason="needs os.fork")


def _run(fn, **kw):  # type: ignore[no-untyped-def]
    out = io.BytesIO()
    rc = isolate.run_isolated(fn, stdout=out, **kw)
    return rc, out.getvalue().decode()


def test_exit_code_and_stdout_come_back() -> None:
    def fn() -> int:
        print('{"findings": []}')
        return 1

    assert _run(fn) == (1, '{"findings": []}\n')


def test_os_exit_is_one_line_and_no_half_report() -> None:
    """Issue 13: ``os._exit`` in user code escaped every boundary."""
    def fn() -> int:
        print('{"half": ')
        os._exit(0)

    with pytest.raises(ShapelintError, match=r"os\._exit\(0\)"):
        _run(fn)


def test_a_segfault_is_one_line() -> None:
    def fn() -> int:
        os.kill(os.getpid(), signal.SIGSEGV)
        return 0

    with pytest.raises(ShapelintError, match="crashed with SIGSEGV"):
        _run(fn)


def test_timeout_stops_the_child() -> None:
    start = time.monotonic()
    with pytest.raises(ShapelintError, match="ran past --timeout 0.5 s"):
        _run(lambda: time.sleep(30) or 0, timeout=0.5)
    assert time.monotonic() - start < 10


def test_memory_cap_turns_runaway_memory_into_an_error() -> None:
    def fn() -> int:
        try:
            bytearray(8 * 2**30)
        except MemoryError:
            print("MemoryError", file=sys.stderr)
            return 2
        return 0

    assert _run(fn, max_memory=2 * 2**30)[0] == 2


def test_user_code_calling_os_exit_through_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from shapelint import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text("import os\nos._exit(0)\n")
    with pytest.raises(ShapelintError, match=r"os\._exit\(0\)"):
        _run(lambda: cli.main(["model.py", "--no-config"]))
