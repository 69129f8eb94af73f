"""Which layers of a model are alike, found before it runs: the stacks
(``nn.ModuleList`` / ``nn.Sequential`` with at least :data:`MIN_LAYERS` children of
one class), and their children grouped by a structural fingerprint. Only children in
one group may share records; anything the fingerprint cannot see (hooks, an instance
``forward``, a shared parameter or module) keeps a child out of every group."""

from __future__ import annotations

import types
from collections import Counter
from collections.abc import Callable, Hashable
from typing import Any

import torch

from shapelint.capture.replay.calls import PRIMITIVE
from shapelint.capture.replay.state import Group, Member
from shapelint.capture.replay.stats import STATS

#: fewest members of one class (and of one fingerprint) that make a stack worth replaying
MIN_LAYERS = 3

_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")

Children = list[tuple[str, torch.nn.Module]]


def stacks(root: torch.nn.Module) -> list[tuple[str, Children]]:
    """The outermost ModuleLists and Sequentials with at least MIN_LAYERS children of one class."""
    found: list[tuple[str, Children]] = []
    for path, mod in root.named_modules():
        if any(path.startswith(p + ".") for p, _ in found):
            continue
        if isinstance(mod, (torch.nn.ModuleList, torch.nn.Sequential)):
            children = [(f"{path}.{name}" if path else name, child) for name, child in mod.named_children()]
            counts = Counter(type(c) for _, c in children)
            if counts and max(counts.values()) >= MIN_LAYERS:
                found.append((path, children))
    return found


def index_attrs(child: torch.nn.Module, index: int) -> set[tuple[str, str]]:
    """(submodule, attribute) of every integer attribute that holds ``index``."""
    return {(rel, name) for rel, sub in child.named_modules() for name, value in vars(sub).items()
            if type(value) is int and value == index}


def fingerprint(child: torch.nn.Module, skip: set[tuple[str, str]]) -> Hashable | None:
    """The child's structure, or None where it cannot be replayed (hooks, an instance forward)."""
    parts: list[Hashable] = []
    for rel, sub in child.named_modules(remove_duplicate=False):
        if hooked_here(sub) or "forward" in vars(sub):
            return None
        parts.append((rel, type(sub), _params(sub), _buffers(sub), _attributes(sub, rel, skip)))
    return tuple(parts)


def _params(sub: torch.nn.Module) -> tuple[Hashable, ...]:
    return tuple((n, tuple(p.shape), p.dtype, p.requires_grad) if p is not None else (n, None)
                 for n, p in sub._parameters.items())


def _buffers(sub: torch.nn.Module) -> tuple[Hashable, ...]:
    return tuple((n, tuple(b.shape), b.dtype) if b is not None else (n, None) for n, b in sub._buffers.items())


def _attributes(sub: torch.nn.Module, rel: str, skip: set[tuple[str, str]]) -> tuple[Hashable, ...]:
    """The submodule's primitive attributes (and tuples of them) by value, its functions
    by identity; those in ``skip`` (each child's own index) are left out."""
    attrs: list[Hashable] = []
    for name, value in sorted(vars(sub).items()):
        if (rel, name) in skip:
            continue
        if isinstance(value, PRIMITIVE) or (isinstance(value, tuple) and all(isinstance(v, PRIMITIVE)
                                                                             for v in value)):
            attrs.append((name, type(value), value))
        elif isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
            attrs.append((name, "function", id(value)))
    return tuple(attrs)


def global_hooks() -> bool:
    """Whether module hooks are registered for every module (before capture adds its own)."""
    from torch.nn.modules import module as module_mod

    return any(getattr(module_mod, name, None) for name in _GLOBAL_HOOKS)


def hooked_here(module: torch.nn.Module) -> bool:
    """Whether ``module`` itself has instance hooks."""
    return any(getattr(module, d, None) for d in _HOOK_DICTS)


def hooked(module: torch.nn.Module) -> bool:
    """Whether ``module`` or any submodule has instance hooks."""
    return any(hooked_here(sub) for sub in module.modules())


def find_groups(root: torch.nn.Module) -> tuple[list[Group], list[Member]]:
    """The groups of alike layers of ``root`` and their members (why a child is left
    out goes to :data:`STATS`)."""
    shared = Counter(id(p) for _, p in root.named_parameters(remove_duplicate=False))
    modules = Counter(id(m) for _, m in root.named_modules(remove_duplicate=False))

    def alone(child: torch.nn.Module) -> bool:
        return not (modules[id(child)] > 1 or any(modules[id(m)] > 1 for m in child.modules())
                    or any(shared[id(p)] > 1 for p in child.parameters()))

    groups: list[Group] = []
    members: list[Member] = []
    for path, children in stacks(root):
        for cls, kids in _by_class(children).items():
            if len(kids) < MIN_LAYERS:
                continue
            for n, same in enumerate(_alike(kids, alone).values()):
                if len(same) < MIN_LAYERS:
                    continue
                group = Group(f"{path or '<root>'}[{cls.__name__} #{n}]", len(same))
                groups.append(group)
                members += [Member(child, name, group) for name, child in same]
    return groups, members


def _by_class(children: Children) -> dict[type, list[tuple[int, str, torch.nn.Module]]]:
    """A stack's children by class, each with its index in the stack."""
    by_class: dict[type, list[tuple[int, str, torch.nn.Module]]] = {}
    for i, (name, child) in enumerate(children):
        by_class.setdefault(type(child), []).append((i, name, child))
    return by_class


def _alike(kids: list[tuple[int, str, torch.nn.Module]], alone: Callable[[torch.nn.Module], Any]
           ) -> dict[Hashable, Children]:
    """Children of one class by fingerprint, the attributes that hold each one's own
    index left out; a child that shares a module or parameter, or has hooks, in none."""
    skip = set.intersection(*(index_attrs(c, i) for i, _, c in kids))
    groups: dict[Hashable, Children] = {}
    for _, name, child in kids:
        if not alone(child):
            STATS.decline(f"{name}: shares a module or parameter")
            continue
        fp = fingerprint(child, skip)
        if fp is None:
            STATS.decline(f"{name}: has hooks or an instance forward")
            continue
        groups.setdefault(fp, []).append((name, child))
    return groups
