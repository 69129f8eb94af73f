"""Where a size in Python code provably comes from: the one integer literal ``--fix`` may edit.

A layer's argument is often a name (``nn.Linear(D, 1024)``, ``nn.Embedding(config.vocab_size,
...)``). Editing every literal of that value bound to a name of that spelling anywhere
in the file changed another function's ``D = 1023`` and a tokenizer's
``vocab_size=``. Here a name is followed the way Python evaluates it, and only while
each step is certain:

- a name is looked up in the scope chain of the place that reads it (the function,
  the enclosing functions, the module; a class body only for code directly in it),
  and must be bound exactly once in the scope that binds it, by an assignment;
- a function's parameter takes the argument of the function's only call in the file
  (a class's ``__init__``: of the class's only construction), or its default when
  that call does not pass it; ``shapelint_model``'s defaults are what shapelint
  calls it with (it passes only ``batch`` and ``seq``);
- ``self.x`` is the one assignment of ``self.x`` in the class; ``obj.x`` follows
  ``obj`` to the construction of a class of this file and takes the argument that
  sets ``x`` (a dataclass field by keyword or position, else its default; a class
  with ``__init__``: its one ``self.x = ...`` with the construction's arguments).

Anything else (a loop variable, an import, a name bound twice, a function called
from several places or passed around, a computed value) ends the search with the
reason, and the finding is not fixed.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shapelint.fix.files import NotFixed

#: the function a Python target defines; shapelint calls it with these arguments only
ENTRY = "shapelint_model"
RUN_PARAMETERS = ("batch", "seq")
#: how many names, parameters and attributes one search may follow
MAX_STEPS = 32

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_SCOPES = (ast.Module, ast.ClassDef, ast.Lambda, *_FUNCTIONS, *_COMPREHENSIONS)

#: what a binding is, for the reason a name cannot be followed
_KINDS = {
    "loop": "a loop variable", "import": "imported", "def": "a function or class", "with": "bound by `with`",
    "augmented": "changed in place (`+=`)", "unpack": "unpacked from a value", "except": "an exception",
    "del": "deleted", "match": "bound by `match`", "walrus": "bound by `:=`",
}


@dataclass(frozen=True)
class Binding:
    """One place a scope binds a name: ``kind`` ``assign`` (with its ``value``),
    ``param`` (``node`` the function, ``arg`` the parameter) or another (see ``_KINDS``)."""

    kind: str
    node: ast.AST
    value: ast.expr | None = None
    arg: ast.arg | None = None


def _names_in(target: ast.expr) -> Iterator[str]:
    for n in ast.walk(target):
        if isinstance(n, ast.Name):
            yield n.id


def _assigned(node: ast.Assign | ast.AnnAssign | ast.NamedExpr, name: str) -> Iterator[Binding]:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    for target in targets:
        if isinstance(target, ast.Name) and target.id == name:
            yield Binding("assign", node, node.value)
        elif isinstance(target, (ast.Tuple, ast.List)) and name in _names_in(target):
            yield _unpacked(node, target, name)


def _unpacked(node: ast.AST, target: ast.Tuple | ast.List, name: str) -> Binding:
    """``a, b = 1, 2``: the element of the value at the name's place."""
    value = getattr(node, "value", None)
    plain = all(isinstance(t, ast.Name) for t in target.elts)
    if plain and isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) \
            and not any(isinstance(e, ast.Starred) for e in value.elts):
        i = next(i for i, t in enumerate(target.elts) if isinstance(t, ast.Name) and t.id == name)
        return Binding("assign", node, value.elts[i])
    return Binding("unpack", node)


def _bindings_of(node: ast.AST, name: str) -> Iterator[Binding]:
    """The bindings of ``name`` that ``node`` itself makes (not its children)."""
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        if node.value is not None:
            yield from _assigned(node, name)
    elif isinstance(node, ast.NamedExpr):
        if node.target.id == name:
            yield Binding("walrus", node, node.value)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        yield from (Binding("import", node) for a in node.names if (a.asname or a.name.split(".")[0]) == name)
    else:
        kind = _binding_kind(node, name)
        if kind is not None:
            yield Binding(kind, node)


#: the statements that bind a name without a value shapelint follows: (node types,
#: whether the node binds the name, the kind of binding; see ``_KINDS``)
_VALUELESS: tuple[tuple[tuple[type, ...], Callable[[Any, str], bool], str], ...] = (
    ((ast.AugAssign,), lambda n, name: isinstance(n.target, ast.Name) and n.target.id == name, "augmented"),
    ((ast.For, ast.AsyncFor, ast.comprehension), lambda n, name: name in _names_in(n.target), "loop"),
    ((ast.withitem,), lambda n, name: n.optional_vars is not None and name in _names_in(n.optional_vars), "with"),
    ((*_FUNCTIONS, ast.ClassDef), lambda n, name: n.name == name, "def"),
    ((ast.ExceptHandler,), lambda n, name: n.name == name, "except"),
    ((ast.Delete,), lambda n, name: any(isinstance(t, ast.Name) and t.id == name for t in n.targets), "del"),
    ((ast.MatchAs, ast.MatchStar), lambda n, name: n.name == name, "match"),
)


def _binding_kind(node: ast.AST, name: str) -> str | None:
    """The kind of binding of ``name`` that ``node`` makes without a value, or None."""
    for types, binds, kind in _VALUELESS:
        if isinstance(node, types):
            return kind if binds(node, name) else None
    return None


def _params(fn: ast.AST) -> list[ast.arg]:
    a = fn.args  # type: ignore[attr-defined]
    return [*a.posonlyargs, *a.args, *([a.vararg] if a.vararg else []), *a.kwonlyargs, *([a.kwarg] if a.kwarg else [])]


def own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes that belong to ``scope`` itself, not to a scope nested in it (a
    nested function's or class's name and decorators do belong to it)."""
    if isinstance(scope, _COMPREHENSIONS):
        stack: list[ast.AST] = list(scope.generators)
    elif isinstance(scope, ast.Lambda):
        stack = [scope.body]
    else:
        stack = list(scope.body)  # type: ignore[attr-defined]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (*_FUNCTIONS, ast.ClassDef)):
            stack.extend(node.decorator_list)
        elif not isinstance(node, (ast.Lambda, *_COMPREHENSIONS)):
            stack.extend(ast.iter_child_nodes(node))


class Module:
    """One parsed file and what following its names needs: parents, scopes, calls."""

    def __init__(self, tree: ast.Module, path: Path, text: str, *, entry: bool) -> None:
        self.tree, self.path, self.text, self.entry = tree, path, text, entry
        self.parent: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node

    def where(self, node: ast.AST) -> str:
        return f"{self.path}:{getattr(node, 'lineno', '?')}"

    # -- scopes --------------------------------------------------------------------------

    def scope(self, node: ast.AST) -> ast.AST:
        """The scope ``node`` is evaluated in: a function's defaults and decorators, a
        class's bases and a comprehension's first iterable belong to the scope around it."""
        path = [node]
        while path[-1] in self.parent:
            path.append(self.parent[path[-1]])
        for i in range(1, len(path)):
            up, child = path[i], path[i - 1]
            if isinstance(up, ast.Module):
                return up
            if isinstance(up, ast.Lambda):
                inside = child is up.body
            elif isinstance(up, _COMPREHENSIONS):
                first = up.generators[0]
                inside = not (child is first and i >= 2 and path[i - 2] is first.iter)
            elif isinstance(up, (*_FUNCTIONS, ast.ClassDef)):
                inside = _in_body(up, child)
            else:
                continue
            if inside:
                return up
        return self.tree

    def chain(self, node: ast.AST) -> list[ast.AST]:
        """The scopes a name read at ``node`` is looked up in, innermost first."""
        inner = self.scope(node)
        out = [inner]
        up = inner
        while up is not self.tree:
            up = self.scope(up)
            if not isinstance(up, ast.ClassDef):
                out.append(up)
        return out

    def bindings(self, scope: ast.AST, name: str) -> list[Binding]:
        found = [b for n in own_nodes(scope) for b in _bindings_of(n, name)]
        if isinstance(scope, (*_FUNCTIONS, ast.Lambda)):
            found += [Binding("param", scope, arg=a) for a in _params(scope) if a.arg == name]
        return found

    def declared(self, scope: ast.AST, name: str) -> str | None:
        """``global`` or ``nonlocal`` when ``scope`` declares ``name`` so."""
        for n in own_nodes(scope):
            if isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names:
                return "global" if isinstance(n, ast.Global) else "nonlocal"
        return None

    def lookup(self, at: ast.AST, name: str) -> tuple[ast.AST, list[Binding]]:
        """The scope whose binding of ``name`` a read at ``at`` sees, and every binding of
        ``name`` in it (none: the name is not set in the file, or only by a ``global``
        declaration elsewhere)."""
        for scope in self.chain(at):
            declared = self.declared(scope, name) if scope is not self.tree else None
            if declared == "global":
                return self.tree, self.bindings(self.tree, name)
            if declared == "nonlocal":
                continue
            found = self.bindings(scope, name)
            if found:
                return scope, found
        return self.tree, []

    def binding(self, at: ast.AST, name: str) -> Binding:
        """The one binding of ``name`` read at ``at``, or :class:`NotFixed`."""
        scope, found = self.lookup(at, name)
        if found:
            return self._one(found, scope, name, at)
        if any(self.declared(s, name) == "global" for s in self.chain(at) if s is not self.tree):
            raise NotFixed(f"`{name}` read at {self.where(at)} is not set in {self.path}")
        raise NotFixed(f"`{name}` read at {self.where(at)} is not set in {self.path} (a builtin, or set elsewhere)")

    def binding_in(self, scope: ast.AST, name: str, at: ast.AST) -> Binding:
        found = self.bindings(scope, name)
        if not found:
            raise NotFixed(f"`{name}` read at {self.where(at)} is not set in {self.path}")
        return self._one(found, scope, name, at)

    def _one(self, found: list[Binding], scope: ast.AST, name: str, at: ast.AST) -> Binding:
        if len(found) > 1:
            lines = ", ".join(sorted({str(getattr(b.node if b.kind != "param" else b.arg, "lineno", "?"))
                                      for b in found}))
            raise NotFixed(f"`{name}` is set {len(found)} times in {self._describe(scope)} (lines {lines}): "
                           f"shapelint cannot tell which one reaches {self.where(at)}")
        b = found[0]
        if b.kind in ("assign", "walrus", "param", "def"):
            return b
        raise NotFixed(f"`{name}` read at {self.where(at)} is {_KINDS[b.kind]} at {self.where(b.node)}, "
                       f"not a literal shapelint can follow")

    def _describe(self, scope: ast.AST) -> str:
        if isinstance(scope, ast.Module):
            return f"the module {self.path}"
        kind = "class" if isinstance(scope, ast.ClassDef) else "function"
        return f"{kind} {getattr(scope, 'name', '<lambda>')} ({self.where(scope)})"

    # -- definitions and their calls -----------------------------------------------------

    def definition(self, func: ast.expr) -> ast.AST | None:
        """The class or function of this file a call's ``func`` names, else None."""
        if not isinstance(func, ast.Name):
            return None
        try:
            b = self.binding(func, func.id)
        except NotFixed:
            return None
        return b.node if b.kind == "def" else None

    def only_call(self, defn: ast.AST) -> ast.Call:
        """The one call of ``defn`` (a function, or a class: its construction) in the file."""
        name = getattr(defn, "name", "")
        calls = [n for n in ast.walk(self.tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                 and n.func.id == name]
        if len(self._references(name)) != len(calls):
            raise NotFixed(f"{name} ({self.where(defn)}) is used other than by a call (passed on, or subclassed): "
                           f"shapelint cannot tell what it is called with")
        if len(calls) != 1:
            how = "never called in this file" if not calls else f"called {len(calls)} times"
            raise NotFixed(f"{name} ({self.where(defn)}) is {how}: shapelint cannot tell what it is called with")
        if self.definition(calls[0].func) is not defn:
            raise NotFixed(f"{name} names several things in {self.path}")
        return calls[0]

    def _references(self, name: str) -> list[ast.Name]:
        """Where the file reads ``name``, type annotations apart (``-> GPT`` calls nothing)."""
        hints = {id(n) for a in _annotations(self.tree) for n in ast.walk(a)}
        return [n for n in ast.walk(self.tree) if isinstance(n, ast.Name) and n.id == name
                and isinstance(n.ctx, ast.Load) and id(n) not in hints]


def _annotations(tree: ast.AST) -> Iterator[ast.expr]:
    for n in ast.walk(tree):
        if isinstance(n, ast.arg) and n.annotation is not None:
            yield n.annotation
        elif isinstance(n, _FUNCTIONS) and n.returns is not None:
            yield n.returns
        elif isinstance(n, ast.AnnAssign):
            yield n.annotation


def _in_body(scope: ast.AST, child: ast.AST) -> bool:
    body = getattr(scope, "body", None)
    return isinstance(body, list) and any(child is s for s in body)


def is_dataclass(cls: ast.ClassDef) -> bool:
    def name(d: ast.expr) -> str:
        d = d.func if isinstance(d, ast.Call) else d
        return d.attr if isinstance(d, ast.Attribute) else d.id if isinstance(d, ast.Name) else ""

    return any(name(d) == "dataclass" for d in cls.decorator_list)


def method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    return next((n for n in cls.body if isinstance(n, _FUNCTIONS) and n.name == name), None)


def fields(cls: ast.ClassDef) -> list[ast.AnnAssign]:
    """A dataclass's fields, in order."""
    return [n for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            and "ClassVar" not in ast.unparse(n.annotation)]


__all__ = ["ENTRY", "MAX_STEPS", "RUN_PARAMETERS", "Binding", "Module", "fields", "is_dataclass", "method",
           "own_nodes"]
