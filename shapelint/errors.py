"""The one error type users see: a clear one-line message and exit code 2."""

from __future__ import annotations

#: the longest message :func:`one_line` gives (a 9,800-character transformers error
#: helps nobody on one terminal line)
MESSAGE_CAP = 300

_ELLIPSIS = " …"


class ShapelintError(Exception):
    """Bad input or an untraceable model. The CLI prints ``shapelint: error: <msg>``
    on one line and exits with code 2 (a traceback only with ``--debug``)."""


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


__all__ = ["MESSAGE_CAP", "ShapelintError", "cap_length", "one_line"]
