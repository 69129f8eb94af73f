"""Which ``torch.nn`` class a call provably builds, so that its positional arguments can
be matched to the class's parameter names.

``nn.Linear(1023, 1024)`` passes ``in_features`` first. But a call named like a layer
need not be that layer: after ``Linear = functools.partial(nn.Linear, 1023)``,
``Linear(1023)`` passes ``out_features``; a user's own ``Linear`` class (imported from
another file) may take its sizes in any order. Matching positions by the name on the
call edited the wrong argument. So a call's positions are read by a ``torch.nn``
signature only when its callee is provably that class:

- an attribute ``nn.X`` / ``torch.nn.X`` / ``torch.nn.modules....X`` whose module
  name is imported once (``import torch.nn as nn``, ``from torch import nn``, ``import
  torch``) and never rebound, or
- a name imported once from ``torch.nn`` (``from torch.nn import Linear as L``) and
  never rebound (not assigned, not declared ``global`` in a function that may assign it),

and nothing in the file assigns over that class (``nn.Linear = ...``,
``setattr(nn, ...)``). Anything else (an assignment, a parameter, a relative or
third-party import) is not provably the class: its positional arguments are matched
to nothing, and the finding says why (:func:`doubt`).
"""

from __future__ import annotations

import ast

from shapelint.fix.flow import Module

#: where torch's layer classes live (``torch.nn.Linear``, ``torch.nn.modules.linear.Linear``)
TORCH_NN = "torch.nn"


def imported(mod: Module, at: ast.AST, name: str) -> str | None:
    """The dotted name that ``name`` read at ``at`` is, when an absolute import binds it
    there exactly once and no function declares it ``global`` (``import torch.nn as nn``:
    ``torch.nn``; ``import torch.nn``: ``torch``; ``from torch.nn import Linear``:
    ``torch.nn.Linear``); else None."""
    scope, found = mod.lookup(at, name)
    if not found or any(b.kind != "import" for b in found):
        return None
    if scope is mod.tree and any(isinstance(n, ast.Global) and name in n.names for n in ast.walk(mod.tree)):
        return None
    # ``import torch`` beside ``import torch.nn``: both bind ``torch`` to the same module
    names = {_import_name(b.node, name) for b in found}
    return names.pop() if len(names) == 1 else None


def _import_name(node: ast.AST, name: str) -> str | None:
    """What the import ``node`` binds ``name`` to, as a dotted name (None: a relative import)."""
    for alias in getattr(node, "names", []):
        if (alias.asname or alias.name.split(".")[0]) != name:
            continue
        if isinstance(node, ast.Import):
            return alias.name if alias.asname else name
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and alias.name != "*":
            return f"{node.module}.{alias.name}"
    return None


def dotted(mod: Module, expr: ast.expr) -> str | None:
    """The dotted name ``expr`` (a name or a chain of attributes) provably reads
    (``nn.Linear`` after ``import torch.nn as nn``: ``torch.nn.Linear``), else None."""
    if isinstance(expr, ast.Name):
        return imported(mod, expr, expr.id)
    if isinstance(expr, ast.Attribute):
        base = dotted(mod, expr.value)
        return f"{base}.{expr.attr}" if base is not None else None
    return None


def _patched(mod: Module, full: str) -> bool:
    """Whether the file assigns over ``full`` (``nn.Linear = ...``) or calls ``setattr``
    on its module."""
    owner = full.rsplit(".", 1)[0]
    for node in ast.walk(mod.tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                and node.args and dotted(mod, node.args[0]) in (owner, TORCH_NN):
            return True
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Attribute) and dotted(mod, sub) == full:
                    return True
    return False


def torch_class(mod: Module, call: ast.Call) -> str:
    """The ``torch.nn`` class ``call`` provably builds (``Linear``), or ``""``."""
    full = dotted(mod, call.func)
    if full is None or not full.startswith(TORCH_NN + "."):
        return ""
    rest = full[len(TORCH_NN) + 1:].split(".")
    if len(rest) != 1 and rest[0] != "modules":
        return ""
    return "" if _patched(mod, full) or _replaced(full) else rest[-1]


def _replaced(full: str) -> bool:
    """Whether code that ran in this process (the model, a module it imports) replaced
    the attribute ``full`` names (``torch.nn.Linear = functools.partial(...)`` in a
    helper): it is no longer a class of ``torch.nn``."""
    import importlib

    owner, name = full.rsplit(".", 1)
    try:
        value = getattr(importlib.import_module(owner), name)
    except (ImportError, AttributeError):
        return True
    return not (isinstance(value, type) and value.__name__ == name and value.__module__.startswith(TORCH_NN + "."))


#: decorators that return what they wrap with its signature unchanged (a class's
#: ``@dataclass`` is read through its fields: :func:`shapelint.fix.flow.fields`)
SIGNATURE_KEEPING = ("functools.cache", "functools.lru_cache", "torch.no_grad", "torch.inference_mode",
                     "torch.enable_grad", "dataclasses.dataclass")


def rewrapping(mod: Module, defn: ast.AST) -> str | None:
    """The first decorator of ``defn`` (a class or function of the file, or the class
    around a method) that may change what its calls pass to which parameter, as written
    (``@swapped``: ``lambda a, b: cls(b, a)``), else None. Only decorators provably in
    :data:`SIGNATURE_KEEPING` (and a ``dataclass`` by that name) keep the signature."""
    owners = [defn]
    parent = mod.parent.get(defn)
    if isinstance(parent, ast.ClassDef):
        owners.append(parent)
    for owner in owners:
        for d in getattr(owner, "decorator_list", []):
            func = d.func if isinstance(d, ast.Call) else d
            name = dotted(mod, func)
            if name in SIGNATURE_KEEPING or (isinstance(owner, ast.ClassDef) and _spelled(func) == "dataclass"):
                continue
            return ast.unparse(d)
    return None


def _spelled(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def doubt(mod: Module, call: ast.Call) -> str:
    """Why ``call``'s positional arguments are not matched to a ``torch.nn`` class's
    parameters: what its callee is, as far as the file shows."""
    func = call.func
    shown = ast.unparse(func)
    why = "it is not a torch.nn class imported once and never rebound"
    if isinstance(func, ast.Name):
        scope, found = mod.lookup(func, func.id)
        if len(found) == 1 and found[0].kind == "assign" and found[0].value is not None:
            value = ast.unparse(found[0].value)
            why = f"it is set at {mod.where(found[0].node)} to `{value[:80]}`, not imported from torch.nn"
        elif len(found) > 1:
            why = f"it is set {len(found)} times in the file"
    elif (full := dotted(mod, func)) is not None and _patched(mod, full):
        why = "the file assigns over it"
    elif full is not None and _replaced(full):
        why = f"{full} is not torch's class while the model runs: code it imports replaced it"
    return (f"`{shown}(...)` at {mod.where(call)} is not provably the torch.nn class its name suggests ({why}): "
            f"shapelint cannot tell which parameter its positional arguments set; pass the size by keyword or "
            f"call the class itself")


__all__ = ["SIGNATURE_KEEPING", "TORCH_NN", "doubt", "dotted", "imported", "rewrapping", "torch_class"]
