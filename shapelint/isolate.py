"""Run the whole lint in a forked child process, for what no ``try`` can contain:
``os._exit`` in user code, a segfault or abort in torch or in a C extension, runaway
memory (an address-space cap) and runaway time (a timeout).

The child runs ``fn`` (the real ``main``) and reports its exit code through a pipe;
its stdout goes to an unlinked temporary file, which the parent copies to its own
stdout only when the child reported a result, so a crash never leaves half a JSON
document on stdout. Any other ending becomes one :class:`ShapelintError` line.

POSIX only (``os.fork``); elsewhere :func:`available` is False and the caller runs
``fn`` in-process. Forking before torch is imported costs about a millisecond (see
docs/reliability.md for the measurement).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import select
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from typing import IO

from shapelint.errors import ShapelintError, one_line

#: the child's exit code travels through the pipe as this many bytes; fewer mean the
#: child ended without returning (os._exit, a signal)
_STATUS_BYTES = 4


def available() -> bool:
    """Forking is safe here: POSIX, and not macOS (where forking a process that may
    load system frameworks can abort the child)."""
    return hasattr(os, "fork") and sys.platform != "darwin"


def run_isolated(fn: Callable[[], int], *, timeout: float | None = None, max_memory: int | None = None,
                 stdout: IO[bytes] | None = None) -> int:
    """``fn()`` in a forked child; its exit code, or a ShapelintError saying how the
    child ended otherwise. ``max_memory``: address-space cap of the child, bytes;
    ``stdout``: where the child's standard output goes in the end (the parent's
    binary stdout by default)."""
    if not available():
        raise ShapelintError("running the lint in a child process needs os.fork (Linux or another POSIX system)")
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    with tempfile.TemporaryFile() as captured:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child never returns from here
            os.close(read_end)
            _child(fn, write_end, captured.fileno(), max_memory)
        os.close(write_end)
        try:
            rc = _reap(pid, _wait_for_status(read_end, pid, timeout))
        finally:
            os.close(read_end)
        _copy(captured, stdout if stdout is not None else sys.stdout.buffer)
        return rc


def _child(fn: Callable[[], int], status_fd: int, stdout_fd: int, max_memory: int | None) -> None:
    rc = 2
    try:
        faulthandler.disable()  # the parent reports a crash on one line
        sys.stdout.flush()
        os.dup2(stdout_fd, 1)
        encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
        sys.stdout = open(1, "w", encoding=encoding, closefd=False)  # noqa: SIM115 - lives until os._exit
        if _fileno(sys.stderr) != 2:  # a replaced sys.stderr (pytest's capture) would stay in the child
            sys.stderr = open(2, "w", encoding=encoding, closefd=False)  # noqa: SIM115 - likewise
        if max_memory is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (max_memory, max_memory))
        rc = fn()
    except BaseException as exc:  # noqa: BLE001 - the child must always report and exit here
        print(f"shapelint: error: {one_line(exc)}", file=sys.stderr)
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        with contextlib.suppress(BaseException):
            os.write(status_fd, int(rc).to_bytes(_STATUS_BYTES, "little", signed=True))
        os._exit(rc if isinstance(rc, int) and 0 <= rc < 256 else 2)


def _fileno(stream: IO[str]) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _wait_for_status(fd: int, pid: int, timeout: float | None) -> bytes:
    deadline = None if timeout is None else time.monotonic() + timeout
    data = b""
    try:
        while len(data) < _STATUS_BYTES:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                _kill(pid)
                raise ShapelintError(f"the lint ran past --timeout {timeout:g} s and was stopped")
            chunk = os.read(fd, _STATUS_BYTES - len(data))
            if not chunk:
                break  # the child ended without reporting
            data += chunk
    except KeyboardInterrupt:
        _kill(pid)
        raise
    return data


def _reap(pid: int, status: bytes) -> int:
    _, wait_status = os.waitpid(pid, 0)
    if len(status) == _STATUS_BYTES:
        return int.from_bytes(status, "little", signed=True)
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        raise ShapelintError(f"the lint crashed with {name} (in torch or in user code); nothing was reported")
    code = os.WEXITSTATUS(wait_status)
    raise ShapelintError(f"user code ended the process with os._exit({code}); nothing was reported")


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _copy(src: IO[bytes], dst: IO[bytes]) -> None:
    src.seek(0)
    while chunk := src.read(1 << 16):
        dst.write(chunk)
    dst.flush()


__all__ = ["available", "run_isolated"]
