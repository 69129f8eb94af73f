"""The literals a Python fix edits: the size at the call the finding points at, and the
companions the code proves must grow with it.

The finding's source line is where the layer is built. The call on that line that
takes the finding's parameter (``nn.Linear(768, 50257)``: ``out_features``) is the
layer; its argument is followed to the one literal that sets it
(:mod:`shapelint.fix.follow`), then the companions are added
(:mod:`shapelint.fix.chain`). Anything uncertain is refused with the reason.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path

from shapelint.fix.callee import doubt
from shapelint.fix.chain import argument, companions, vocabulary
from shapelint.fix.edits import Span
from shapelint.fix.files import Doc, NotFixed
from shapelint.fix.flow import Module
from shapelint.fix.follow import Follower


def line_starts(text: str) -> list[int]:
    """Where each line begins (``\\r\\n``, ``\\r`` and ``\\n`` end lines, as for Python's parser)."""
    starts = [0]
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\r" and text.startswith("\r\n", i):
            i += 1
        if c in "\r\n":
            starts.append(i + 1)
        i += 1
    return starts


def span(text: str, starts: list[int], node: ast.AST) -> Span:
    """A node's characters in ``text`` (ast columns are UTF-8 byte offsets into the line)."""

    def offset(line: int, col: int) -> int:
        start = starts[line - 1]
        return start + len(text[start:start + col].encode("utf-8")[:col].decode("utf-8", errors="ignore"))

    lineno, col = getattr(node, "lineno"), getattr(node, "col_offset")
    return offset(lineno, col), offset(getattr(node, "end_lineno", None) or lineno, getattr(node, "end_col_offset", 0))


def _calls_on(tree: ast.Module, line: int) -> list[ast.Call]:
    """The calls spanning ``line``, innermost first."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno <= line <= (n.end_lineno or n.lineno)]
    return sorted(calls, key=lambda n: ((n.end_lineno or n.lineno) - n.lineno, (n.end_col_offset or 0) - n.col_offset))


def python_spans(doc: Doc, shown: Path, line: int, names: Sequence[str], value: int, *, vocab: bool,
                 entry: bool) -> list[Span]:
    """The spans of ``doc`` to replace by the new size: the literal that sets ``names[0]``
    (or ``names[1]``) of the layer built on ``line``, and its proven companions;
    ``shown``: the file as the finding names it, for the reasons."""
    try:
        tree = ast.parse(doc.text)
    except SyntaxError as exc:
        raise NotFixed(f"{shown}: cannot parse it ({exc.msg})") from None
    mod = Module(tree, shown, doc.text, entry=entry)
    starts = line_starts(doc.text)
    call, arg = _layer_call(mod, tree, line, names, value)
    follow = Follower(mod)
    primary = follow.literal(arg, value)
    nodes = [primary, *companions(mod, follow, call, names[0], value, primary)]
    if vocab:
        nodes += vocabulary(mod, follow, call, value, primary)
    return list(dict.fromkeys(span(doc.text, starts, n) for n in nodes))


def _taking(mod: Module, calls: Sequence[ast.Call], names: Sequence[str], value: int,
            guess: bool) -> list[tuple[ast.Call, ast.expr]]:
    """The calls that pass ``names`` (a literal only when it is ``value``), each with that argument."""
    found = [(c, a) for c in calls if (a := argument(mod, c, tuple(names), guess=guess)) is not None]
    return [(c, a) for c, a in found if not isinstance(a, ast.Constant) or a.value == value]


def _layer_call(mod: Module, tree: ast.Module, line: int, names: Sequence[str],
                value: int) -> tuple[ast.Call, ast.expr]:
    """The one call on ``line`` that passes the size, with the argument that is it. A
    call whose positions are read only by the name it spells (``Linear(1023)`` after
    ``Linear = functools.partial(nn.Linear, 1023)``) counts against certainty (two
    candidates: refused) but is never the one edited."""
    calls = _calls_on(tree, line)
    found = _taking(mod, calls, names, value, guess=False)
    maybe = _taking(mod, calls, names, value, guess=True)
    where = f"{mod.path}:{line}"
    taking = {id(a) for _, a in found + maybe}
    if len(taking) > 1:
        raise NotFixed(f"{len(taking)} calls at {where} take {names[0]}: shapelint cannot tell which is the layer")
    if found:
        return found[0]
    if maybe:
        raise NotFixed(doubt(mod, maybe[0][0]))
    raise NotFixed(_elsewhere(tree, mod.text, line_starts(mod.text), names[0], value, where))


def _elsewhere(tree: ast.Module, text: str, starts: list[int], name: str, value: int, where: str) -> str:
    """The reason when no call on the line takes the parameter (built in a loop, a helper)."""
    line = int(where.rsplit(":", 1)[1])
    end = starts[line] if line < len(starts) else len(text)
    shown = text[starts[line - 1]:end].strip()
    path = where.rsplit(":", 1)[0]
    elsewhere = sorted({n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) is int
                        and n.value == value}, key=int)
    maybe = (f"; the literal {value} at {', '.join(f'{path}:{n}' for n in elsewhere)} may be it, but shapelint "
             f"cannot tell") if elsewhere else ""
    return f"{name} = {value} reaches {where} (`{shown}`) from elsewhere, not as a literal{maybe}"


__all__ = ["line_starts", "python_spans", "span"]
