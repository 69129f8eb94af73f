"""The one error type users see: a clear one-line message and exit code 2."""

from __future__ import annotations

import errno
import math
import re

#: the longest message :func:`one_line` gives (a 9,800-character transformers error
#: helps nobody on one terminal line)
MESSAGE_CAP = 300

_ELLIPSIS = " …"


class ShapelintError(Exception):
    """Bad input or an untraceable model. The CLI prints ``shapelint: error: <msg>``
    on one line and exits with code 2 (a traceback only with ``--debug``)."""


#: the ``--max-memory`` cap in force in this process (set in the child that runs the
#: lint, see :mod:`shapelint.app.isolate`), bytes; None when there is none
_memory_cap: int | None = None

#: what running out of memory reads like, from Python, torch, the C++ runtime, the
#: dynamic loader (a shared library that no longer fits) and OpenBLAS
OUT_OF_MEMORY = re.compile(
    r"\bMemoryError\b|bad_alloc|out of memory|can'?t allocate memory|cannot allocate memory"
    r"|memory allocation (?:still )?failed|failed to map segment", re.IGNORECASE)


def set_memory_cap(nbytes: int | None) -> None:
    """Record the ``--max-memory`` cap this process runs under (for the messages)."""
    global _memory_cap
    _memory_cap = nbytes


#: the least ``--max-memory`` a message suggests: importing torch and linting the
#: smallest example took between 700M and 1G of address space (torch 2.13, Linux)
LEAST_SUGGESTED = 2**30


def size_text(nbytes: int) -> str:
    """``8G``, ``1200M``: a size as ``--max-memory`` takes it, in the largest unit that
    divides it, else in megabytes rounded up."""
    for unit, size in (("T", 2**40), ("G", 2**30), ("M", 2**20)):
        if nbytes >= size and nbytes % size == 0:
            return f"{nbytes // size}{unit}"
    return f"{math.ceil(nbytes / 2**20)}M"


def raised_cap(cap: int) -> str:
    """The ``--max-memory`` a message suggests instead of ``cap``: twice it, at least 1G."""
    return size_text(max(2 * cap, LEAST_SUGGESTED))


def out_of_memory(exc: BaseException) -> bool:
    """``exc`` (or what caused it) is the process running out of memory."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, MemoryError) or (isinstance(e, OSError) and e.errno == errno.ENOMEM):
            return True
        if OUT_OF_MEMORY.search(_text(e)):
            return True
        e = e.__cause__ or e.__context__
    return False


def memory_message(detail: str, cap: int | None = None) -> str:
    """One line for running out of memory: under a ``--max-memory`` cap (``cap``,
    default the cap of this process), what to raise it to; ``detail``, what ran out,
    comes last (a long one is cut first)."""
    cap = _memory_cap if cap is None else cap
    if cap is None:
        return f"ran out of memory ({detail})"
    return (f"ran out of memory under --max-memory {size_text(cap)}: raise it (e.g. --max-memory "
            f"{raised_cap(cap)}) or leave it out ({detail})")


def is_internal(exc: BaseException) -> bool:
    """An error that is shapelint's own bug: not bad input, not running out of memory."""
    return not isinstance(exc, ShapelintError) and not out_of_memory(exc)


def describe(exc: BaseException, cap: int = MESSAGE_CAP) -> str:
    """What the command prints after ``shapelint: error:``: :func:`one_line`; running
    out of memory says so first (:func:`memory_message`, wherever it happened: in user
    code, in torch, in shapelint); an internal error is marked as one (with the way to
    its traceback)."""
    text = one_line(exc, cap)
    if out_of_memory(exc):
        return text if text.startswith("ran out of memory") else cap_length(memory_message(text), cap)
    return f"internal error: {text} (rerun with --debug)" if is_internal(exc) else text


def one_line(exc: BaseException, cap: int = MESSAGE_CAP) -> str:
    """``Type: reason`` of an exception on one line, at most ``cap`` characters.

    The reason is the exception's own text up to its first line that does not end in
    ``:`` (validators write ``... validator 'x':`` and give the reason on the next
    line), followed by the innermost ``__cause__`` when that says something the outer
    text does not. A :class:`ShapelintError` is already a message: no type prefix.
    """
    text = _described(exc)
    root = _root_cause(exc)
    if root is not exc:
        reason = _described(root)
        if _text(root) and _text(root) not in text:
            text = f"{text}: {reason}" if _text(exc) else reason
    return cap_length(text, cap)


def cap_length(text: str, cap: int = MESSAGE_CAP) -> str:
    """``text`` on one line (whitespace runs collapsed), cut to ``cap`` characters."""
    flat = " ".join(text.split())
    if len(flat) <= cap:
        return flat
    return flat[: max(0, cap - len(_ELLIPSIS))].rstrip() + _ELLIPSIS


def _described(exc: BaseException) -> str:
    text = _text(exc)
    if isinstance(exc, ShapelintError):
        return text or "error"
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def _text(exc: BaseException) -> str:
    """The lines of ``str(exc)`` up to and including the first that is not a lead-in."""
    try:
        raw = str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not hide the error
        return ""
    kept: list[str] = []
    for line in (ln.strip() for ln in raw.splitlines()):
        if not line:
            continue
        kept.append(line)
        if not line.endswith(":"):
            break
    return " ".join(kept)


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost explicit cause (``raise ... from cause``), cycles guarded."""
    seen = {id(exc)}
    while exc.__cause__ is not None and id(exc.__cause__) not in seen:
        exc = exc.__cause__
        seen.add(id(exc))
    return exc


__all__ = ["MESSAGE_CAP", "OUT_OF_MEMORY", "ShapelintError", "cap_length", "describe", "is_internal", "memory_message",
           "one_line", "out_of_memory", "raised_cap", "set_memory_cap", "size_text"]
