"""The other sizes a Python fix must change with the one the finding names, each proven.

Widening a layer's output (``out_features``, ``out_channels``) widens the input of the
layer it feeds and of the norms between; widening a layer's input (``in_features``)
widens the output of the layer that feeds it, or the example input when it is the
first layer. The old fix changed every literal of that value among the layer sizes
of the function, which also changed unrelated layers that happened to share it.
Here a companion is changed only when the code shows that it is the same chain:

- consecutive elements of one ``nn.Sequential(...)`` (width-keeping layers such as
  activations, dropout and norms between them; pools only after a convolution);
- a class's ``self.a`` and ``self.b`` where ``forward`` feeds ``self.a``'s output, and
  only it, to every call of ``self.b`` (:mod:`shapelint.fix.forward`);
- the first layer of the model that ``shapelint_model`` returns, and the example
  input it returns beside it (``torch.randn(4096, 1023)``: the last size).

A vocabulary finding also changes the ``nn.Embedding`` of the same vocabulary in the
same function (an LM's input embedding and its head; tied weights must agree).

Any literal of that value that could be a companion (an input width of a layer
beside it, an example input's last size) but is not proven one makes the finding
not fixed, with the reason: changing one side alone would break the model.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator

from shapelint.fix.callee import rewrapping, torch_class
from shapelint.fix.files import NotFixed
from shapelint.fix.flow import ENTRY, Module, fields, is_dataclass, method, own_nodes
from shapelint.fix.follow import Follower
from shapelint.fix.forward import (
    INPUT,
    KEEP_LAYERS,
    NORM_LAYERS,
    POOL_LAYERS,
    Forward,
    analyse,
    layer_class,
    pool_to_one,
)

IN_PARAMETERS = ("in_features", "in_channels")
OUT_PARAMETERS = ("out_features", "out_channels")
#: torch functions that make example inputs: their last size is the features a first layer takes
INPUT_MAKERS = ("randn", "rand", "zeros", "ones", "empty")


# -- a call's arguments by parameter name ------------------------------------------------


def parameter_names(mod: Module, call: ast.Call, *, guess: bool = False) -> list[str]:
    """The positional parameter names of what ``call`` builds: a class or function of
    this file, else the ``torch.nn`` class it provably is (:mod:`shapelint.fix.callee`;
    ``functools.partial(nn.Linear, 1023)`` bound to ``Linear`` is not ``nn.Linear``).
    ``guess``: else the ``torch.nn`` class its name spells, for the literals a fix must
    not leave behind unseen (:func:`candidates`), never for the one it edits."""
    defn = mod.definition(call.func)
    if defn is not None and rewrapping(mod, defn) is not None:
        return []  # a decorator may pass the call's arguments on in another order
    if isinstance(defn, ast.ClassDef):
        init = method(defn, "__init__")
        if init is not None:
            return [a.arg for a in [*init.args.posonlyargs, *init.args.args][1:]]
        return [f.target.id for f in fields(defn) if isinstance(f.target, ast.Name)] if is_dataclass(defn) else []
    if isinstance(defn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [a.arg for a in [*defn.args.posonlyargs, *defn.args.args]]
    if defn is not None:
        return []
    return _torch_parameters(torch_class(mod, call) or (layer_class(call) if guess else ""))


def _torch_layer(name: str) -> type | None:
    """torch's own class ``name``: ``torch.nn.<name>``, else (user code that ran in this
    process replaced that attribute: ``nn.Linear = functools.partial(...)``) the class of
    that name defined in a ``torch.nn.modules`` submodule."""
    import sys

    import torch

    cls = getattr(torch.nn, name, None)
    if isinstance(cls, type) and cls.__name__ == name and cls.__module__.startswith("torch.nn."):
        return cls
    for modname, module in list(sys.modules.items()):
        if modname.startswith("torch.nn.modules.") and module is not None:
            cls = vars(module).get(name)
            if isinstance(cls, type) and cls.__name__ == name and cls.__module__ == modname:
                return cls
    return None


def _torch_parameters(name: str) -> list[str]:
    cls = _torch_layer(name) if name else None
    if cls is None:
        return []
    try:
        return [p for p in inspect.signature(cls).parameters if p not in ("args", "kwargs")]
    except (TypeError, ValueError):
        return []


def arguments(mod: Module, call: ast.Call, *, guess: bool = False) -> Iterator[tuple[str, ast.expr]]:
    """(parameter name, argument) of every argument ``call`` passes (up to a ``*args``);
    positions only where the callee is known (``guess``: see :func:`parameter_names`)."""
    for name, arg in zip(parameter_names(mod, call, guess=guess), call.args):
        if isinstance(arg, ast.Starred):
            break
        yield name, arg
    for kw in call.keywords:
        if kw.arg is not None:
            yield kw.arg, kw.value


def argument(mod: Module, call: ast.Call, names: tuple[str, ...], *, guess: bool = False) -> ast.expr | None:
    return next((arg for name, arg in arguments(mod, call, guess=guess) if name in names), None)


def _is_int(node: ast.AST | None, value: int) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int and node.value == value


def _norm_size(mod: Module, call: ast.Call, *, guess: bool = False) -> ast.expr | None:
    param = NORM_LAYERS.get(layer_class(call))
    return next((a for name, a in arguments(mod, call, guess=guess) if name == param), None) if param else None


def _maker_size(call: ast.AST, conv: bool) -> ast.expr | None:
    """The feature size of an example input: the last size of ``torch.randn(4096, 1023)``,
    the channels (second size) of ``torch.randn(8, 3, 224, 224)`` for a convolution."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in INPUT_MAKERS
            and isinstance(call.func.value, ast.Name) and call.func.value.id == "torch" and call.args):
        return None
    sizes = call.args[0].elts if len(call.args) == 1 and isinstance(call.args[0], (ast.Tuple, ast.List)) \
        else call.args
    if any(isinstance(a, ast.Starred) for a in sizes) or len(sizes) < (3 if conv else 1):
        return None
    return sizes[1] if conv else sizes[-1]


# -- what could be a companion -------------------------------------------------------------


def candidates(mod: Module, call: ast.Call, side: str, value: int, conv: bool) -> list[ast.expr]:
    """Literals ``value`` that a fix of ``call``'s ``side`` (``in``/``out``) might have to
    change: the other side's layer sizes and the norms of the same function, and, for
    an input width, example inputs' last sizes anywhere in the file."""
    other = OUT_PARAMETERS if side == "in" else IN_PARAMETERS
    found: list[ast.expr] = []
    for node in own_nodes(mod.scope(call)):
        if not isinstance(node, ast.Call) or node is call:
            continue
        found += [a for name, a in arguments(mod, node, guess=True) if name in other and _is_int(a, value)]
        norm = _norm_size(mod, node, guess=True)
        found += [norm] if norm is not None and _is_int(norm, value) else []
    if side == "in":
        found += [s for n in ast.walk(mod.tree) if (s := _maker_size(n, conv)) is not None and _is_int(s, value)]
    return list({id(n): n for n in found}.values())


# -- proofs --------------------------------------------------------------------------------


def _sequential(mod: Module, call: ast.Call) -> tuple[ast.Call, int] | None:
    up = mod.parent.get(call)
    if isinstance(up, ast.Call) and layer_class(up) == "Sequential" and any(a is call for a in up.args):
        return up, next(i for i, a in enumerate(up.args) if a is call)
    return None


def _walk_sequential(mod: Module, seq: ast.Call, index: int, side: str, conv: bool) -> tuple[list[ast.expr], bool]:
    """From element ``index`` of ``seq``, forwards (``out``) or backwards (``in``): the
    sizes that change with it, and whether the walk reached the start of ``seq``."""
    own = OUT_PARAMETERS if side == "in" else IN_PARAMETERS
    order = seq.args[index + 1:] if side == "out" else list(reversed(seq.args[:index]))
    proven: list[ast.expr] = []
    pooled = False
    for element in order:
        kind = layer_class(element)
        if not isinstance(element, ast.Call) or (kind in POOL_LAYERS and not conv) or (kind == "Flatten" and not pooled):
            return proven, False
        if kind in POOL_LAYERS:
            pooled = side == "out" and pool_to_one(element)
            continue
        if kind in KEEP_LAYERS or kind == "Flatten":
            continue
        norm = _norm_size(mod, element)
        if norm is not None:
            proven.append(norm)
            continue
        size = argument(mod, element, own)
        return proven + ([size] if size is not None else []), False
    return proven, True


def _returned_input(mod: Module, model: ast.AST, conv: bool) -> ast.expr | None:
    """The example input's last size when ``shapelint_model`` returns ``model`` (a call,
    a class of this file, or a name bound to one) with one example input."""
    for fn in mod.tree.body:
        if not (isinstance(fn, ast.FunctionDef) and fn.name == ENTRY and mod.entry):
            continue
        rets = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
        if len(rets) != 1 or not isinstance(rets[0].value, ast.Tuple) or len(rets[0].value.elts) != 2:
            return None
        first, second = (_through_names(mod, e) for e in rets[0].value.elts)
        same = first is model or (isinstance(model, ast.ClassDef) and isinstance(first, ast.Call)
                                  and mod.definition(first.func) is model)
        return _maker_size(second, conv) if same else None
    return None


def _through_names(mod: Module, expr: ast.expr) -> ast.expr:
    """A name bound once to an expression: that expression."""
    for _ in range(8):
        if not isinstance(expr, ast.Name):
            return expr
        try:
            b = mod.binding(expr, expr.id)
        except NotFixed:
            return expr
        if b.kind != "assign" or b.value is None:
            return expr
        expr = b.value
    return expr


def _attribute_of(mod: Module, call: ast.Call) -> tuple[ast.ClassDef, str] | None:
    """``self.<attr> = call`` in a method of a class: (the class, ``attr``)."""
    stmt = mod.parent.get(call)
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and stmt.value is call):
        return None
    t = stmt.targets[0]
    if not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"):
        return None
    fn = mod.scope(stmt)
    cls = mod.parent.get(fn)
    return (cls, t.attr) if isinstance(cls, ast.ClassDef) else None


def model_input(mod: Module, node: ast.AST, conv: bool, depth: int = 0) -> ast.expr | None:
    """The example input size that reaches ``node`` (a call building a layer or a
    Sequential) first, if the code shows it; else None."""
    if depth > 8:
        return None
    seq = _sequential(mod, node) if isinstance(node, ast.Call) else None
    if seq is not None:
        _, at_start = _walk_sequential(mod, seq[0], seq[1], "in", conv)
        return model_input(mod, seq[0], conv, depth + 1) if at_start else None
    returned = _returned_input(mod, node, conv)
    if returned is not None or not isinstance(node, ast.Call):
        return returned
    owner = _attribute_of(mod, node)
    if owner is None:
        return None
    cls, attr = owner
    forward = analyse(cls)
    sites = forward.sites.get(attr, []) if forward else []
    if sites and all(f is not None and f.layers == {INPUT} and not f.through for f in sites):
        return _returned_input(mod, cls, conv)
    return None


def _in_forward(mod: Module, call: ast.Call, side: str, conv: bool) -> list[ast.expr]:
    """The sizes proven to change with ``self.<attr> = call`` through the class's forward."""
    owner = _attribute_of(mod, call)
    forward = analyse(owner[0]) if owner else None
    if owner is None or forward is None:
        return []
    if side == "out":
        return _fed(mod, forward, owner[1])
    return _feeding(mod, forward, owner, conv)


def _fed(mod: Module, forward: Forward, attr: str) -> list[ast.expr]:
    """The input sizes of the layers only ``attr``'s output feeds (a norm: its size)."""
    out: list[ast.expr] = []
    for other, sites in forward.sites.items():
        if other != attr and sites and all(f is not None and f.layers == {attr} for f in sites):
            built = forward.modules[other]
            size = _norm_size(mod, built) if layer_class(built) in NORM_LAYERS else \
                argument(mod, built, IN_PARAMETERS)
            out += [size] if size is not None else []
    return out


def _feeding(mod: Module, forward: Forward, owner: tuple[ast.ClassDef, str], conv: bool) -> list[ast.expr]:
    """The sizes that feed ``attr`` at its one call site: the norms it passes through, and
    the output size of the one layer (or the example input) it reads."""
    flows = set(forward.sites.get(owner[1], []))
    if len(flows) != 1 or None in flows:
        return []
    (flow,) = flows
    assert flow is not None
    out = [s for n in flow.through if (s := _norm_size(mod, forward.modules[n])) is not None]
    (source,) = flow.layers if len(flow.layers) == 1 else (None,)
    if source == INPUT:
        size = _returned_input(mod, owner[0], conv)
    else:
        size = argument(mod, forward.modules[source], OUT_PARAMETERS) if source in forward.modules else None
    return out + ([size] if size is not None else [])


def proven(mod: Module, call: ast.Call, side: str, conv: bool) -> list[ast.expr]:
    """The sizes the code shows change with ``call``'s ``side``."""
    out = _in_forward(mod, call, side, conv)
    seq = _sequential(mod, call)
    if seq is not None:
        found, at_start = _walk_sequential(mod, seq[0], seq[1], side, conv)
        out += found
        if side == "in" and at_start:
            size = model_input(mod, seq[0], conv)
            out += [size] if size is not None else []
    elif side == "in":
        size = model_input(mod, call, conv)
        out += [size] if size is not None else []
    return out


def companions(mod: Module, follow: Follower, call: ast.Call, parameter: str, value: int,
               primary: ast.Constant) -> list[ast.Constant]:
    """The literals to change with ``primary`` (``call``'s ``parameter``), or :class:`NotFixed`."""
    side = "in" if parameter in IN_PARAMETERS else "out" if parameter in OUT_PARAMETERS else ""
    if not side:
        return []
    conv = "Conv" in layer_class(call)
    what = "the layer that feeds it" if side == "in" else "the layer it feeds"
    shown = []
    for size in proven(mod, call, side, conv):
        try:
            shown.append(follow.literal(size, value))
        except NotFixed as exc:
            raise NotFixed(f"{what} must grow with it, and {exc}") from None
    changed = {id(n) for n in [primary, *shown]}
    for c in candidates(mod, call, side, value, conv):
        if id(c) not in changed:
            raise NotFixed(f"{mod.where(c)} (`{_line(mod, c)}`) has the same size {value} and may be {what}, but "
                           f"shapelint cannot prove it: change both by hand")
    return list({id(n): n for n in shown if n is not primary}.values())


def vocabulary(mod: Module, follow: Follower, call: ast.Call, value: int, primary: ast.Constant) -> list[ast.Constant]:
    """A vocabulary's other declarations in the function of ``call``: the embeddings and
    output layers whose size is (or provably comes from) a literal ``value`` (an LM's
    input embedding grows with its head; tied weights must agree)."""
    out = []
    for node in own_nodes(mod.scope(call)):
        if not isinstance(node, ast.Call) or node is call:
            continue
        embedding = layer_class(node) == "Embedding"
        for name, arg in arguments(mod, node):
            if name != ("num_embeddings" if embedding else "out_features"):
                continue
            try:
                literal = follow.literal(arg, value)
            except NotFixed:
                continue  # another size, or one shapelint cannot follow: not shown to be this vocabulary
            if literal is not primary:
                out.append(literal)
    return list({id(n): n for n in out}.values())


def _line(mod: Module, node: ast.AST) -> str:
    lines = mod.text.splitlines()
    no = getattr(node, "lineno", 0)
    return lines[no - 1].strip() if 0 < no <= len(lines) else ""


__all__ = ["IN_PARAMETERS", "INPUT_MAKERS", "OUT_PARAMETERS", "argument", "arguments", "candidates", "companions",
           "model_input", "parameter_names", "proven", "vocabulary"]
