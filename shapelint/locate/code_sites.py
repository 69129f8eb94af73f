"""Point findings of a Python target at the line of the user's file that set the size.

Two cases where the line shapelint recorded is not that line:

- **A library model built in the user's file** (``GPT2LMHeadModel(GPT2Config(
  vocab_size=50257, ...))``): the layer is constructed in installed code
  (transformers' ``modeling_gpt2.py``), which the user does not edit. The size came
  from a keyword of a call in the target file, the config class's: the finding moves
  to that keyword (``model.py:6:40``), its suggestion names it (``vocab_size: 50257 →
  50264``) and the library line is kept as context (``details.library_source``), as
  for a ``config.json`` (:mod:`shapelint.locate.config_keys` ranks the keywords the
  same way it ranks a config's keys).
- **A layer built first and wrapped later** (``head = nn.Linear(768, 50257)``, then
  ``nn.Sequential(body, head)``): the module is registered in its parent when it is
  wrapped, so the recorded line is the ``Sequential``'s. When no call on that line takes
  the size as a literal, a name passed there (``head``, ``self.head``) is followed back
  to its assignment from a call that does (the constructor), and the finding moves
  there.

- **A size of installed code that no literal of the user's file gives** (perceiver-pytorch's
  ``in_features`` 29, computed from ``num_freq_bands``; a hand-written attention in an
  installed package): the finding says so, and is shown at the user's first call of a
  name imported from that package (``Perceiver(...)``, where a suppression comment
  goes), the installed line kept as context.

Only the target file is read, and only its literals count: ``--fix`` edits a literal the
finding points at, and says why where there is none.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from shapelint.locate.config_keys import NOT_CONFIG_KEYS, at_key, explain, is_library
from shapelint.model.locations import ConfigLocation, Source
from shapelint.model.records import Finding, Gemm


@dataclass(frozen=True)
class Keyword:
    """An integer literal passed by keyword (``vocab_size=50257``) or as a string key of
    a dict literal (``{"vocab_size": 50257}``): its name, value and 1-based position."""

    name: str
    value: int
    line: int
    column: int


def _int(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def keywords(tree: ast.AST) -> list[Keyword]:
    """Every integer keyword argument and string-keyed dict entry of the file, in order."""
    out: list[Keyword] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                value = _int(kw.value)
                if kw.arg is not None and value is not None:
                    out.append(Keyword(kw.arg, value, kw.lineno, kw.col_offset + 1))
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                value = _int(v)
                if isinstance(k, ast.Constant) and isinstance(k.value, str) and value is not None:
                    out.append(Keyword(k.value, value, k.lineno, k.col_offset + 1))
    return sorted(out, key=lambda k: (k.line, k.column))


def _parse(file: str) -> ast.Module | None:
    try:
        return ast.parse(Path(file).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None


def at_keyword(f: Finding, found: Sequence[Keyword], file: str, tp: int = 1) -> Finding:
    """``f`` (recorded in library code) at the keyword of ``file`` that sets its size, if one does."""
    s = f.suggestion
    if s is None or not isinstance(s.from_, int) or s.parameter in NOT_CONFIG_KEYS:
        return f
    keys: dict[str, tuple[int, int]] = {}
    where: dict[str, Keyword] = {}
    for k in found:  # a keyword given twice: its first literal
        if k.name not in keys:
            keys[k.name], where[k.name] = (k.value, k.line), k
    exp = explain(s.from_, s.parameter, f.code, f.module, keys, tp)
    if exp is None:
        return replace(f, message=f"{f.message}; {s.parameter} = {s.from_} is set in installed code, and no "
                                  f"literal of {Path(file).name} gives it (a library default, or computed from "
                                  f"what it passes): change the arguments it comes from, and where none reaches "
                                  f"it the change is the library's (--fix cannot)")
    moved = at_key(f, exp, keys, file, tp, f.source)
    k = where[exp.keys[0]]
    return replace(moved, source=Source(file, k.line, k.column))


# -- a layer built first and wrapped later --------------------------------------------

def _calls_on(tree: ast.AST, line: int) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno <= line <= (n.end_lineno or n.lineno)]


def _constants(tree: ast.AST) -> dict[str, int]:
    """Names bound exactly once in the file, to an integer literal (``VOCAB = 50257``)."""
    bound: dict[str, list[int | None]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    bound.setdefault(t.id, []).append(_int(node.value))
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)) and isinstance(node.target, ast.Name):
            bound.setdefault(node.target.id, []).append(None)
    return {name: vs[0] for name, vs in bound.items() if len(vs) == 1 and vs[0] is not None}


def _literals(call: ast.Call, constants: dict[str, int] | None = None) -> Iterator[int]:
    """The integers a call passes: literals, and names bound once to one (``constants``)."""
    for a in [*call.args, *(kw.value for kw in call.keywords)]:
        value = _int(a) if not isinstance(a, ast.Name) else (constants or {}).get(a.id)
        if value is not None:
            yield value


def _scope_of(tree: ast.AST, line: int) -> ast.AST:
    """The innermost function whose body holds ``line`` (else the module)."""
    best: ast.AST = tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.lineno <= line <= (node.end_lineno or node.lineno):
            if best is tree or node.lineno >= getattr(best, "lineno", 0):
                best = node
    return best


def constructor_of(tree: ast.AST, line: int, value: int) -> tuple[int, int] | None:
    """Where the layer wrapped on ``line`` was constructed with the literal ``value``:
    (line, 1-based column) of the call assigned to a name passed on ``line``; None when
    a call on ``line`` takes ``value`` itself, or nothing can be followed."""
    calls = _calls_on(tree, line)
    constants = _constants(tree)
    if any(value in _literals(c, constants) for c in calls):
        return None
    names = {ast.unparse(a) for c in calls for a in [*c.args, *(kw.value for kw in c.keywords)]
             if isinstance(a, (ast.Name, ast.Attribute))}
    candidates = []
    for node in ast.walk(_scope_of(tree, line)):
        if isinstance(node, ast.Assign) and node.lineno < line and isinstance(node.value, ast.Call) \
                and any(ast.unparse(t) in names for t in node.targets) and value in _literals(node.value, constants):
            candidates.append((node.value.lineno, node.value.col_offset + 1))
    return max(candidates) if candidates else None


def package_of(file: str) -> str | None:
    """The top-level package an installed file belongs to (``.../site-packages/timm/x.py`` → ``timm``)."""
    parts = Path(file).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts[:-1]:
            return Path(parts[parts.index(marker) + 1]).stem
    return None


def imported_from(tree: ast.AST) -> dict[str, str]:
    """The names the file binds by importing, and the top-level package of each."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                names[a.asname or a.name] = node.module.split(".")[0]
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def library_call(tree: ast.AST, packages: Sequence[str]) -> tuple[int, int] | None:
    """(line, 1-based column) of the file's first call of a name imported from one of
    ``packages``: where the user builds the installed model a finding was recorded in."""
    names = {n for n, pkg in imported_from(tree).items() if pkg in packages}
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _root(n.func) in names]
    return min(((c.lineno, c.col_offset + 1) for c in calls), default=None)


def at_library_call(f: Finding, tree: ast.AST, target: str, gemms: dict[int, Gemm]) -> Finding:
    """``f``, recorded in installed code no literal of ``target`` explains, at the call of
    ``target`` that builds that package's model (suppression comments go there), with the
    installed line kept as context (``details.library_source``)."""
    if f.source is None:
        return f
    sources = [f.source, *(g.defined_at for i in f.gemms if (g := gemms.get(i)) and g.defined_at)]
    imported = set(imported_from(tree).values())
    # the line of the package the user imports: einops ran perceiver-pytorch's matmul, perceiver built the layer
    lib = next((src for src in sources if package_of(src.file) in imported), None)
    site = library_call(tree, [p for p in map(package_of, (src.file for src in sources)) if p is not None])
    if site is None or lib is None:
        return f
    s = f.suggestion
    parameter = s.parameter if s is not None and isinstance(s.from_, int) else None
    where = ConfigLocation(None, code_parameter=parameter, library_source=lib)
    return replace(f, source=Source(target, *site), location=where)


def locate_in_code(findings: Sequence[Finding], target: str, *, tp: int = 1,
                   gemms: Sequence[Gemm] = ()) -> list[Finding]:
    """The findings of the Python target ``target``, each at the line of ``target`` that
    set its size where shapelint can tell (see the module's docstring)."""
    tree = _parse(target)
    if tree is None:
        return list(findings)
    found = keywords(tree)
    real = Path(target).resolve()
    by_index = {g.index: g for g in gemms}
    out = []
    for f in findings:
        s = f.suggestion
        sized = s is not None and isinstance(s.from_, int)
        if f.source is None or s is None:
            out.append(f)
        elif is_library(f.source.file):
            keyed = at_keyword(f, found, target, tp) if sized else f
            out.append(keyed if keyed.location is not None else at_library_call(keyed, tree, target, by_index))
        elif sized and Path(f.source.file).resolve() == real:
            site = constructor_of(tree, f.source.line, int(s.from_))
            out.append(f if site is None else replace(f, source=Source(f.source.file, *site)))
        else:
            out.append(f)
    return out


__all__ = ["Keyword", "at_keyword", "constructor_of", "keywords", "library_call", "locate_in_code", "package_of"]
