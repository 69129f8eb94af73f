"""The whole lint in a forked child: what no try can contain becomes one line."""

from __future__ import annotations

import io
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from shapelint.app import isolate
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
    from shapelint.app import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text("import os\nos._exit(0)\n")
    with pytest.raises(ShapelintError, match=r"os\._exit\(0\)"):
        _run(lambda: cli.main(["model.py", "--no-config"]))


# -- a too-low --max-memory: one line that says so and names the flag ---------------------

GiB = 2**30


def _raised(capfd: pytest.CaptureFixture[str], fn, **kw) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """The error line of a child that ended without a result, and what reached stderr."""
    with pytest.raises(ShapelintError) as info:
        _run(fn, **kw)
    return str(info.value), capfd.readouterr().err


def test_a_cap_that_aborts_the_child_is_one_line_naming_the_flag(capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 13: under a too-low --max-memory, torch's ``std::bad_alloc`` printed
    ``terminate called...`` (two lines) and then ``crashed with SIGABRT``; OpenBLAS
    printed its complaint and exit(1) read as ``user code ended the process with os._exit(1)``."""
    def bad_alloc() -> int:
        os.write(2, b"terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\n")
        os.abort()

    def openblas() -> int:
        os.write(2, b"OpenBLAS error: Memory allocation still failed after 10 retries, giving up.\n")
        os._exit(1)

    for fn, how in ((bad_alloc, "the lint crashed with SIGABRT: terminate called after throwing an instance "
                                "of 'std::bad_alloc' what(): std::bad_alloc"),
                    (openblas, "the lint ended with exit(1): OpenBLAS error: Memory allocation still failed")):
        message, err = _raised(capfd, fn, max_memory=4 * GiB)
        assert message.startswith("ran out of memory under --max-memory 4G: raise it (e.g. --max-memory 8G) "
                                  f"or leave it out ({how}"), message
        assert err == ""  # its words are in the one line, not on stderr


def test_a_memory_error_under_the_cap_names_the_flag(capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 13: a MemoryError under --max-memory was ``internal error: MemoryError (rerun
    with --debug)``."""
    def fn() -> int:
        raise MemoryError

    assert _run(fn, max_memory=64 * 2**20)[0] == 2
    assert capfd.readouterr().err == ("shapelint: error: ran out of memory under --max-memory 64M: raise it "
                                      "(e.g. --max-memory 1G) or leave it out (MemoryError)\n")


def test_a_crash_under_the_cap_suggests_it(capfd: pytest.CaptureFixture[str]) -> None:
    def fn() -> int:
        print("loading", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
        return 0

    message, err = _raised(capfd, fn, max_memory=3 * GiB)
    assert message == ("the lint crashed with SIGSEGV under --max-memory 3G, which a too low cap also does "
                       "(try --max-memory 6G); nothing was reported (its last output: 'loading')") and err == ""


def test_under_the_cap_stderr_still_comes_through_in_order(capfd: pytest.CaptureFixture[str]) -> None:
    def fn() -> int:
        print("user output", file=sys.stderr, flush=True)
        print("shapelint: error: a.py: bad", file=sys.stderr, flush=True)
        os.write(2, b"more output\nno newline")
        return 2

    assert _run(fn, max_memory=4 * GiB)[0] == 2
    assert capfd.readouterr().err == "user output\nshapelint: error: a.py: bad\nmore output\nno newline\n"
