"""Following a layer's argument to the one literal that sets it (see :mod:`shapelint.fix.flow`).

:class:`Follower` walks from an expression to the expression that gives its value:
a name to its one assignment, a parameter to the argument of its function's only
call (or to ``shapelint_model``'s default), ``self.x`` to the class's one
``self.x = ...``, ``obj.x`` to the field or ``__init__`` argument of ``obj``'s
construction. It stops at anything else; :meth:`Follower.literal` then requires an
integer literal of the finding's value there.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from shapelint.fix.callee import rewrapping
from shapelint.fix.files import NotFixed
from shapelint.fix.flow import ENTRY, MAX_STEPS, RUN_PARAMETERS, Module, fields, is_dataclass, method

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class Frame:
    """A call being followed into: ``fn`` runs with ``call``'s arguments, which are
    read in the frames ``outer``."""

    fn: ast.AST
    call: ast.Call
    outer: tuple[Frame, ...] = ()


Frames = tuple[Frame, ...]


def default_of(fn: ast.AST, arg: ast.arg) -> ast.expr | None:
    a = fn.args  # type: ignore[attr-defined]
    positional = [*a.posonlyargs, *a.args]
    if arg in positional:
        i = positional.index(arg) - (len(positional) - len(a.defaults))
        return a.defaults[i] if i >= 0 else None
    if arg in a.kwonlyargs:
        return a.kw_defaults[a.kwonlyargs.index(arg)]
    return None


def _self_targets(node: ast.AST, attr: str) -> Iterator[tuple[ast.AST, ast.expr | None]]:
    """(assignment, value) for each ``self.<attr> = value`` that ``node`` makes (value
    None: changed in place, or unpacked from a value shapelint does not follow)."""
    if isinstance(node, ast.AugAssign) and _is_self_attr(node.target, attr):
        yield node, None
    if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
        return
    for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
        if _is_self_attr(target, attr):
            yield node, node.value
        elif isinstance(target, (ast.Tuple, ast.List)) and any(_is_self_attr(t, attr) for t in target.elts):
            yield node, _unpacked(target, node.value, attr)


def _unpacked(target: ast.Tuple | ast.List, value: ast.expr, attr: str) -> ast.expr | None:
    """``self.a, self.b = 1, 2``: the element of ``value`` at ``self.<attr>``'s place (None
    when the value is not a tuple or list of as many plain elements)."""
    i = next(i for i, t in enumerate(target.elts) if _is_self_attr(t, attr))
    if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) \
            and not any(isinstance(e, ast.Starred) for e in [*value.elts, *target.elts]):
        return value.elts[i]
    return None


def _is_self_attr(node: ast.AST, attr: str) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name) \
        and node.value.id == "self"


class Follower:
    """Follows expressions of one :class:`~shapelint.fix.flow.Module`."""

    def __init__(self, mod: Module) -> None:
        self.mod = mod

    def literal(self, expr: ast.expr, value: int) -> ast.Constant:
        """The integer literal ``value`` that ``expr`` provably is, or :class:`NotFixed`."""
        end, _ = self.follow(expr, ())
        where = self.mod.where
        if isinstance(end, ast.Constant) and type(end.value) is int:
            if end.value != value:
                raise NotFixed(f"`{ast.unparse(expr)}` at {where(expr)} is the literal {end.value} at {where(end)}, "
                               f"not {value}")
            return end
        came = "" if end is expr else f" (from `{ast.unparse(end)}` at {where(end)})"
        raise NotFixed(f"`{ast.unparse(expr)}` at {where(expr)} is computed{came}, not a literal: change what it "
                       f"is computed from")

    def follow(self, expr: ast.expr, frames: Frames) -> tuple[ast.expr, Frames]:
        """The expression that gives ``expr``'s value, and the frames it is read in."""
        for _ in range(MAX_STEPS):
            if isinstance(expr, ast.Name):
                expr, frames = self._name(expr, frames)
            elif isinstance(expr, ast.Attribute):
                expr, frames = self._attribute(expr, frames)
            else:
                return expr, frames
        raise NotFixed(f"{self.mod.where(expr)}: the value passes through more than {MAX_STEPS} names")

    # -- names and parameters -------------------------------------------------------------

    def _name(self, expr: ast.Name, frames: Frames) -> tuple[ast.expr, Frames]:
        b = self.mod.binding(expr, expr.id)
        if b.kind in ("assign", "walrus") and b.value is not None:
            return b.value, frames
        if b.kind == "param" and b.arg is not None:
            return self._param(b.node, b.arg, frames)
        raise NotFixed(f"`{expr.id}` at {self.mod.where(expr)} names a function or class, not a size")

    def _param(self, fn: ast.AST, arg: ast.arg, frames: Frames) -> tuple[ast.expr, Frames]:
        for frame in reversed(frames):
            if frame.fn is fn:
                return self._argument(fn, arg, frame.call, frame.outer)
        where = self.mod.where(arg)
        owner = self.mod.parent.get(fn)
        name = getattr(fn, "name", "<lambda>")
        if isinstance(fn, ast.Lambda) or (isinstance(owner, ast.ClassDef) and name != "__init__"):
            raise NotFixed(f"`{arg.arg}` is a parameter of {name} ({where}): shapelint cannot tell what it is "
                           f"called with")
        if name == ENTRY and isinstance(owner, ast.Module) and self.mod.entry:
            if arg.arg in RUN_PARAMETERS:
                raise NotFixed(f"`{arg.arg}` ({where}) is set by --{arg.arg}, not in the file")
            default = default_of(fn, arg)
            if default is None:
                raise NotFixed(f"`{arg.arg}` is a parameter of {ENTRY} without a default ({where})")
            return default, ()
        call = self.mod.only_call(owner if isinstance(owner, ast.ClassDef) else fn)
        return self._argument(fn, arg, call, ())

    def _argument(self, fn: ast.AST, arg: ast.arg, call: ast.Call, outer: Frames) -> tuple[ast.expr, Frames]:
        """What ``call`` passes to ``fn``'s parameter ``arg`` (its default if nothing)."""
        where = self.mod.where(call)
        wrapper = rewrapping(self.mod, fn)
        if wrapper is not None:
            owner = self.mod.parent.get(fn)
            shown = owner if isinstance(owner, ast.ClassDef) else fn
            raise NotFixed(f"{getattr(shown, 'name', '<lambda>')} ({self.mod.where(shown)}) is wrapped by @{wrapper}: "
                           f"shapelint cannot tell what the call at {where} passes to `{arg.arg}`")
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            raise NotFixed(f"the call at {where} passes *args or **kwargs: shapelint cannot tell what "
                           f"`{arg.arg}` is")
        kw = next((k for k in call.keywords if k.arg == arg.arg), None)
        if kw is not None:
            return kw.value, outer
        a = fn.args  # type: ignore[attr-defined]
        positional = [*a.posonlyargs, *a.args]
        if arg in positional:
            i = positional.index(arg) - (1 if isinstance(self.mod.parent.get(fn), ast.ClassDef) else 0)
            if 0 <= i < len(call.args):
                return call.args[i], outer
        default = default_of(fn, arg)
        if default is None:
            raise NotFixed(f"the call at {where} does not pass `{arg.arg}`")
        return default, outer

    # -- attributes ---------------------------------------------------------------------

    def _attribute(self, expr: ast.Attribute, frames: Frames) -> tuple[ast.expr, Frames]:
        obj = expr.value
        cls = self._self_class(obj)
        if cls is not None:
            return self._member(cls, expr, frames)
        self._unmutated(expr.attr, expr)
        inst, inst_frames = self.follow(obj, frames)
        defn = self.mod.definition(inst.func) if isinstance(inst, ast.Call) else None
        if isinstance(inst, ast.Call) and isinstance(defn, ast.ClassDef):
            return self._field(defn, expr.attr, inst, inst_frames, expr)
        raise NotFixed(f"`{ast.unparse(expr)}` at {self.mod.where(expr)}: shapelint cannot tell which object "
                       f"`{ast.unparse(obj)}` is (it is not built by a class of this file)")

    def _self_class(self, obj: ast.expr) -> ast.ClassDef | None:
        """The class whose method reads ``self`` at ``obj``, if ``obj`` is that ``self``."""
        if not (isinstance(obj, ast.Name) and obj.id == "self"):
            return None
        try:
            b = self.mod.binding(obj, "self")
        except NotFixed:
            return None
        fn = b.node
        owner = self.mod.parent.get(fn)
        if b.kind != "param" or not isinstance(owner, ast.ClassDef) or not isinstance(fn, _FUNCTIONS):
            return None
        first = [*fn.args.posonlyargs, *fn.args.args][:1]
        return owner if first and first[0] is b.arg else None

    def _assignments(self, cls: ast.ClassDef, attr: str) -> list[tuple[ast.AST, ast.AST, ast.expr | None]]:
        """(method, assignment, value) of every ``self.<attr> = ...`` in ``cls``'s methods."""
        return [(fn, assignment, value) for fn in cls.body if isinstance(fn, _FUNCTIONS)
                for node in ast.walk(fn) for assignment, value in _self_targets(node, attr)]

    def _member(self, cls: ast.ClassDef, expr: ast.Attribute, frames: Frames) -> tuple[ast.expr, Frames]:
        """``self.<attr>`` in a method of ``cls``."""
        attr, where = expr.attr, self.mod.where(expr)
        sets = self._assignments(cls, attr)
        if len(sets) > 1:
            lines = ", ".join(str(getattr(n, "lineno", "?")) for _, n, _ in sets)
            raise NotFixed(f"`self.{attr}` is set {len(sets)} times in class {cls.name} (lines {lines}): shapelint "
                           f"cannot tell which one reaches {where}")
        self._unmutated(attr, expr)
        if sets:
            _, node, value = sets[0]
            if value is None:
                raise NotFixed(f"`self.{attr}` is unpacked or changed in place at {self.mod.where(node)}")
            return value, frames
        if is_dataclass(cls):
            return self._field(cls, attr, self.mod.only_call(cls), (), expr)
        b = self.mod.binding_in(cls, attr, expr)
        if b.kind != "assign" or b.value is None:
            raise NotFixed(f"`self.{attr}` at {where} is not set by an assignment in class {cls.name}")
        return b.value, frames

    def _unmutated(self, attr: str, at: ast.AST) -> None:
        """Refuse when some object's ``.<attr>`` is assigned other than as ``self.<attr>``
        (an object's field set after its construction)."""
        for node in ast.walk(self.mod.tree):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Attribute) and sub.attr == attr and not _is_self_attr(sub, attr):
                        raise NotFixed(f"`.{attr}` is assigned at {self.mod.where(node)}: shapelint cannot tell "
                                       f"whether that object reaches {self.mod.where(at)}")

    def _field(self, cls: ast.ClassDef, attr: str, call: ast.Call, frames: Frames,
               at: ast.AST) -> tuple[ast.expr, Frames]:
        """``obj.<attr>`` of the object ``call`` builds."""
        wrapper = rewrapping(self.mod, cls)
        if wrapper is not None:  # what the call builds may not be this class, or built from these arguments
            raise NotFixed(f"{cls.name} ({self.mod.where(cls)}) is wrapped by @{wrapper}: shapelint cannot tell "
                           f"what `.{attr}` of the object built at {self.mod.where(call)} is")
        init = method(cls, "__init__")
        if init is not None:
            sets = [(fn, value) for fn, _, value in self._assignments(cls, attr)]
            if len(sets) == 1 and sets[0][0] is init and sets[0][1] is not None:
                return sets[0][1], (*frames, Frame(init, call, frames))
            raise NotFixed(f"`.{attr}` of {cls.name} ({self.mod.where(call)}) is not set once in its __init__")
        if is_dataclass(cls):
            return self._dataclass_field(cls, attr, call, frames)
        b = self.mod.binding_in(cls, attr, at)
        if b.kind != "assign" or b.value is None:
            raise NotFixed(f"`.{attr}` of class {cls.name} is not set by an assignment")
        return b.value, frames

    def _dataclass_field(self, cls: ast.ClassDef, attr: str, call: ast.Call, frames: Frames) -> tuple[ast.expr, Frames]:
        where = self.mod.where(call)
        if cls.bases or method(cls, "__post_init__") is not None:
            raise NotFixed(f"{cls.name} has a base class or __post_init__: shapelint cannot tell its field `{attr}`")
        names = [f.target.id for f in fields(cls) if isinstance(f.target, ast.Name)]
        if attr not in names:
            raise NotFixed(f"`{attr}` is not a field of {cls.name}")
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            raise NotFixed(f"the call at {where} passes *args or **kwargs: shapelint cannot tell `{attr}`")
        kw = next((k for k in call.keywords if k.arg == attr), None)
        if kw is not None:
            return kw.value, frames
        i = names.index(attr)
        if i < len(call.args):
            return call.args[i], frames
        default = fields(cls)[i].value
        if default is None:
            raise NotFixed(f"the call at {where} does not set `{attr}`")
        return default, ()


__all__ = ["Frame", "Frames", "Follower", "default_of"]
