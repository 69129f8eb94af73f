"""Run the whole lint in a forked child process, for what no ``try`` can contain:
``os._exit`` in user code, a segfault or abort in torch or in a C extension, runaway
memory (an address-space cap) and runaway time (a timeout).

The child runs ``fn`` (the real ``main``) and reports its exit code through a pipe;
its stdout goes to an unlinked temporary file, which the parent copies to its own
stdout only when the child reported a result, so a crash never leaves half a JSON
document on stdout. Any other ending becomes one :class:`ShapelintError` line.

Under ``--max-memory`` the child's stderr comes through a pipe too (:class:`_Relay`):
shapelint's own lines are passed on at once, anything else (user code's prints, a C
library's complaint) is held until the next of them or the end, so that when the cap
ends the child (``std::bad_alloc`` and SIGABRT, OpenBLAS's ``exit(1)``) its last words
go into the one error line, which says the cap was too low and names the flag.

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
from collections.abc import Callable, Iterator
from typing import IO

from shapelint.errors import (
    OUT_OF_MEMORY,
    ShapelintError,
    cap_length,
    describe,
    memory_message,
    raised_cap,
    set_memory_cap,
    size_text,
)
from shapelint.fix import journal

#: the child's exit code travels through the pipe as this many bytes; fewer mean the
#: child ended without returning (os._exit, a signal)
_STATUS_BYTES = 4

#: how much of the child's last held output an error line quotes
_LAST_WORDS = 160

#: the largest address-space cap ``setrlimit`` takes
_MOST_MEMORY = 2**63

#: held output beyond this many bytes is passed on (a chatty child must not fill memory)
_HOLD_BYTES = 1 << 20


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
    if max_memory is not None and not 0 < max_memory < _MOST_MEMORY:  # setrlimit takes a signed 64-bit size
        raise ShapelintError(f"--max-memory {size_text(max_memory)} is more than any address space (2^63 bytes)")
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    edits = journal.open_journal()  # --fix in the child notes its writes here first
    try:
        return _run_child(fn, timeout, max_memory, stdout, edits)
    except (SystemExit, KeyboardInterrupt):  # SIGTERM, SIGHUP, Ctrl-C: the child is already ended
        edits.close()
        note = edits.note().rstrip("; ")
        if note:
            with contextlib.suppress(OSError, ValueError):
                print(f"shapelint: {note}", file=sys.stderr)
        raise
    finally:
        edits.close()  # puts back what a stopped --fix left half done


#: the signals that stop a run from outside (a CI job cancelled, a terminal closed): the
#: parent ends the child with it, since the child has a process group of its own
_STOPPING = ("SIGTERM", "SIGHUP")


@contextlib.contextmanager
def _stopped_by_signals() -> Iterator[None]:
    """While waiting for the child: SIGTERM or SIGHUP raise ``SystemExit(128 + n)`` here
    (where the default was to die on the spot, leaving the child running and a --fix
    half done), so that the child is ended and its edits put back first."""
    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = {}
    for name in _STOPPING:
        sig = getattr(signal, name, None)
        with contextlib.suppress(ValueError, OSError):  # not the main thread
            if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:
                previous[sig] = signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, handler)


def _run_child(fn: Callable[[], int], timeout: float | None, max_memory: int | None, stdout: IO[bytes] | None,
               edits: journal.Journal) -> int:
    with tempfile.TemporaryFile() as captured:
        read_end, write_end = os.pipe()
        err_read, err_write = os.pipe() if max_memory is not None else (None, None)
        pid = os.fork()
        if pid == 0:  # the child never returns from here
            os.close(read_end)
            if err_read is not None:
                os.close(err_read)
            _child(fn, write_end, captured.fileno(), max_memory, err_write)
        os.close(write_end)
        relay = None
        if err_read is not None and err_write is not None:
            os.close(err_write)
            relay = _Relay(err_read)
        try:
            with _stopped_by_signals():
                status = _wait_for_status(read_end, pid, timeout, relay)
            rc = _reap(pid, status, relay, max_memory)
        except ShapelintError as exc:  # the child was stopped or died: undo its unfinished --fix now
            edits.close()
            raise ShapelintError(edits.note() + str(exc)) from None
        finally:
            os.close(read_end)
            if err_read is not None:
                os.close(err_read)
        try:
            _copy(captured, stdout if stdout is not None else sys.stdout.buffer)
        except BrokenPipeError:  # the reader has gone (`| head`): the lint's exit code still stands
            from shapelint.app.outputs import reader_gone

            reader_gone()
        return rc


def _child(fn: Callable[[], int], status_fd: int, stdout_fd: int, max_memory: int | None,
           stderr_fd: int | None) -> None:
    rc = 2
    try:
        # a process group of its own: a timeout ends the processes it started too (the
        # --fix re-lint, compile workers), not only this one
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)
        faulthandler.disable()  # the parent reports a crash on one line
        sys.stdout.flush()
        os.dup2(stdout_fd, 1)
        if stderr_fd is not None:
            sys.stderr.flush()
            os.dup2(stderr_fd, 2)
            os.close(stderr_fd)
        encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
        sys.stdout = open(1, "w", encoding=encoding, closefd=False)  # noqa: SIM115 - lives until os._exit
        if _fileno(sys.stderr) != 2:  # a replaced sys.stderr (pytest's capture) would stay in the child
            sys.stderr = open(2, "w", encoding=encoding, closefd=False)  # noqa: SIM115 - likewise
        if max_memory is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (max_memory, max_memory))
            set_memory_cap(max_memory)
        rc = fn()
    except BaseException as exc:  # noqa: BLE001 - the child must always report and exit here
        print(f"shapelint: error: {describe(exc)}", file=sys.stderr)
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


def _wait_for_status(fd: int, pid: int, timeout: float | None, relay: _Relay | None = None) -> bytes:
    deadline = None if timeout is None else time.monotonic() + timeout
    data = b""
    try:
        while len(data) < _STATUS_BYTES:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            watched = [fd] if relay is None or relay.closed else [fd, relay.fd]
            ready, _, _ = select.select(watched, [], [], left)
            if not ready:
                _kill(pid)
                if relay is not None:
                    relay.drain()
                raise ShapelintError(f"the lint ran past --timeout {timeout:g} s and was stopped"
                                     + _quoted(relay))
            if relay is not None and relay.fd in ready:
                relay.read()
            if fd in ready:
                chunk = os.read(fd, _STATUS_BYTES - len(data))
                if not chunk:
                    break  # the child ended without reporting
                data += chunk
    except (KeyboardInterrupt, SystemExit):  # Ctrl-C, or SIGTERM/SIGHUP (:func:`_stopped_by_signals`)
        _kill(pid)
        if relay is not None:
            relay.drain()
            relay.flush()
        raise
    return data


def _reap(pid: int, status: bytes, relay: _Relay | None = None, max_memory: int | None = None) -> int:
    _, wait_status = os.waitpid(pid, 0)
    if relay is not None:
        relay.drain()  # the child is gone: what it wrote is in the pipe
    if len(status) == _STATUS_BYTES:
        if relay is not None:
            relay.flush()
        return int.from_bytes(status, "little", signed=True)
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        how = f"the lint crashed with {name}"
        text = f"{how} (in torch or in user code); nothing was reported"
    else:
        code = os.WEXITSTATUS(wait_status)
        how = f"the lint ended with exit({code})"
        text = f"user code ended the process with os._exit({code}); nothing was reported"
    if max_memory is None:
        raise ShapelintError(text)
    last = relay.last_words() if relay is not None else ""
    if OUT_OF_MEMORY.search(last):  # the cap, in the words of whatever hit it
        raise ShapelintError(memory_message(f"{how}: {last}", max_memory))
    raise ShapelintError(f"{how} under --max-memory {size_text(max_memory)}, which a too low cap also does "
                         f"(try --max-memory {raised_cap(max_memory)}); nothing was reported" + _quoted(relay))


def _quoted(relay: _Relay | None) -> str:
    last = relay.last_words() if relay is not None else ""
    return f" (its last output: {last!r})" if last else ""


class _Relay:
    """The child's stderr (a pipe), passed on to this process's stderr line by line:
    shapelint's own lines (``shapelint: ...``) at once, any other held until the
    next of them or :meth:`flush`; :meth:`last_words` is what is held, for an error
    line when the child ends without a result."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.closed = False
        self._partial = b""
        self._held: list[bytes] = []
        os.set_blocking(fd, False)

    def read(self) -> None:
        """What is in the pipe now."""
        try:
            chunk = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            self.closed = True
            return
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        for line in lines:
            self._held.append(line)
            if line.startswith(b"shapelint: "):
                self._pass_on(self._held)
                self._held = []
        while sum(len(ln) for ln in self._held) > _HOLD_BYTES:
            self._pass_on([self._held.pop(0)])

    def drain(self) -> None:
        """Everything the pipe holds (the child has ended: nothing more is coming
        from it; a process it started may still hold the pipe, so never wait)."""
        while not self.closed:
            ready, _, _ = select.select([self.fd], [], [], 0)
            if not ready:
                return
            self.read()

    def flush(self) -> None:
        held = self._held + ([self._partial] if self._partial else [])
        self._held, self._partial = [], b""
        self._pass_on(held)

    def last_words(self) -> str:
        held = self._held + ([self._partial] if self._partial else [])
        text = " ".join(ln.decode("utf-8", "replace").strip() for ln in held if ln.strip())
        return cap_length(text[-_LAST_WORDS:] if len(text) > _LAST_WORDS else text)

    @staticmethod
    def _pass_on(lines: list[bytes]) -> None:
        if not lines:
            return
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(b"\n".join(lines).decode("utf-8", "replace") + "\n")
            sys.stderr.flush()


def _kill(pid: int) -> None:
    """End the child and every process of its group (it made its own: :func:`_child`)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
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
