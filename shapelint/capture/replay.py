"""Replay: trace a stack of identical layers once and copy its records for the rest.

A Llama-2-70B step runs 80 decoder layers that make the same ops on the same
shapes; tracing each one costs about 64k fake-tensor dispatches in all. Here the
records of such layers are copied instead, where they are provably the records a
full trace gives:

1. **Stacks** (found before the model runs): each ``nn.ModuleList`` / ``nn.Sequential``
   with at least 3 children of one class (not inside another stack). Its children
   are grouped by a structural fingerprint: for the child and every submodule, the
   class, parameters and buffers (name, shape, dtype, requires_grad), ``training``,
   and every primitive attribute except the ones that hold each child's own index
   (``layer_idx``). A child with instance hooks, an instance ``forward``, or a
   parameter or module shared with any other place of the model has no group.
2. **Two real runs**: the first two calls of a group's members run for real, marked
   by identity autograd functions on the one input and the one output that
   require grad (the marks record nothing and are new tensors with the serial of
   the tensor they stand for, so no record changes). The marks give each call's
   forward span (ranges of ``rec.shapes``, ``rec.ops`` and the serial numbers made)
   and, in backward, its backward span: the exit mark's backward opens it and the
   entry mark's closes it (the CPU autograd engine runs one ready node at a time,
   the most recently created first, so with one grad-requiring input and output a
   layer's backward runs between them). The second call is the **template** when
   its forward records equal the first call's after renaming (module paths, serials).
3. **Replay** of a later member, decided per call (anything else runs the layer):
   the same call signature as the template (tensor shapes, strides, dtypes,
   requires_grad, offsets; every tensor but the input the very same object; other
   arguments equal; grad mode, autocast, the calling line), not in backward and no
   saved-tensor hooks (activation checkpointing). Its forward is not run: the
   template's forward records are appended with module paths renamed (the member's
   own ``ModuleInfo``) and serials remapped (serials the template made → fresh ones,
   the template's input → this input, anything older → itself), and one autograd
   function turns (input, parameters) into an output of the template output's
   shape, stride and dtype. Its backward returns empty gradients for the input and
   every parameter and leaves a placeholder in the record streams.
4. **After backward** the placeholders become copies of the template's backward span
   (same renaming, the same serial map as that member's forward, the incoming and
   returned gradients' serials), once it is checked that: the two real calls'
   backward records agree too; neither recomputed anything; nothing outside a real
   call's spans touched a tensor it made (other than its output); each layer's
   input got exactly the gradient the layer returned (no other reader of the
   input whose gradient the marks would add in another order); the gradients a
   placeholder saw and returned have the template's layout; no input or output
   was changed in place. Otherwise :meth:`Replayer.finish` says why and capture
   traces the model again without replay.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
import weakref
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from shapelint.capture.recorder import ModuleInfo, OpRow, Owner, Recorder

#: fewest members of one class (and of one fingerprint) that make a stack worth replaying
MIN_LAYERS = 3

_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_PRIMITIVE = (type(None), bool, int, float, str, torch.dtype)
#: argument values a call signature compares by equality
_SIMPLE = (type(None), bool, int, float, str, torch.dtype, torch.device, torch.Size)


@dataclass
class Stats:
    """What replay did in the last capture (tests and benchmarks read :data:`STATS`)."""

    #: layers whose records were copied, in the records that stand
    replayed: int = 0
    #: groups of identical layers found before the model ran, and those with a template
    groups: int = 0
    templates: int = 0
    #: why the capture was traced again without replay ("" where it was not)
    fell_back: str = ""
    #: why a group or a call was not replayed (each reason once)
    declined: list[str] = field(default_factory=list)

    def reset(self) -> None:
        """A fresh account (one per capture)."""
        self.__dict__.update(vars(Stats()))

    def decline(self, why: str) -> None:
        if why not in self.declined:
            self.declined.append(why)


STATS = Stats()


# -- structure ---------------------------------------------------------------------------

Meta = tuple[Any, ...]


def _meta(t: torch.Tensor) -> Meta:
    return (tuple(t.shape), tuple(t.stride()), t.dtype, int(t.storage_offset()), t.device)


@dataclass(eq=False)
class _Group:
    name: str
    members: int
    proof: _Call | None = None
    template: _Call | None = None
    off: str = ""


@dataclass(eq=False)
class _Member:
    module: torch.nn.Module
    path: str
    group: _Group
    called: bool = False


def _stacks(root: torch.nn.Module) -> list[tuple[str, list[tuple[str, torch.nn.Module]]]]:
    """The outermost ModuleLists and Sequentials with at least MIN_LAYERS children of one class."""
    found: list[tuple[str, list[tuple[str, torch.nn.Module]]]] = []
    for path, mod in root.named_modules():
        if any(path.startswith(p + ".") for p, _ in found):
            continue
        if isinstance(mod, (torch.nn.ModuleList, torch.nn.Sequential)):
            children = [(f"{path}.{name}" if path else name, child) for name, child in mod.named_children()]
            counts = Counter(type(c) for _, c in children)
            if counts and max(counts.values()) >= MIN_LAYERS:
                found.append((path, children))
    return found


def _index_attrs(child: torch.nn.Module, index: int) -> set[tuple[str, str]]:
    """(submodule, attribute) of every integer attribute that holds ``index``."""
    return {(rel, name) for rel, sub in child.named_modules() for name, value in vars(sub).items()
            if type(value) is int and value == index}


def _fingerprint(child: torch.nn.Module, skip: set[tuple[str, str]]) -> Hashable | None:
    """The child's structure, or None where it cannot be replayed (hooks, an instance forward)."""
    parts: list[Hashable] = []
    for rel, sub in child.named_modules(remove_duplicate=False):
        if any(getattr(sub, d, None) for d in _HOOK_DICTS) or "forward" in vars(sub):
            return None
        params = tuple((n, tuple(p.shape), p.dtype, p.requires_grad) if p is not None else (n, None)
                       for n, p in sub._parameters.items())
        buffers = tuple((n, tuple(b.shape), b.dtype) if b is not None else (n, None) for n, b in sub._buffers.items())
        attrs: list[Hashable] = []
        for name, value in sorted(vars(sub).items()):
            if (rel, name) in skip:
                continue
            if isinstance(value, _PRIMITIVE) or (isinstance(value, tuple) and all(isinstance(v, _PRIMITIVE)
                                                                                   for v in value)):
                attrs.append((name, type(value), value))
            elif isinstance(value, (types.FunctionType, types.BuiltinFunctionType)):
                attrs.append((name, "function", id(value)))
        parts.append((rel, type(sub), params, buffers, tuple(attrs)))
    return tuple(parts)


def _global_hooks() -> bool:
    """Whether module hooks are registered for every module (before capture adds its own)."""
    from torch.nn.modules import module as module_mod

    return any(getattr(module_mod, name, None) for name in (
        "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks", "_global_backward_pre_hooks"))


def _hooked(module: torch.nn.Module) -> bool:
    return any(getattr(sub, d, None) for sub in module.modules() for d in _HOOK_DICTS)


# -- call signatures ---------------------------------------------------------------------


class _Unsupported(Exception):
    pass


@dataclass(eq=False)
class _Signature:
    key: Hashable
    tensors: list[torch.Tensor]
    x: torch.Tensor


def _signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Signature | str:
    """The call as far as replay compares it, or why it cannot be replayed."""
    tensors: list[torch.Tensor] = []

    def walk(v: Any) -> Hashable:
        if isinstance(v, torch.Tensor):
            tensors.append(v)
            return ("T", _meta(v), v.requires_grad)
        if isinstance(v, _SIMPLE):
            return (type(v), v)
        if type(v) in (tuple, list):
            return (type(v), tuple(walk(x) for x in v))
        if type(v) is dict and all(isinstance(k, str) for k in v):
            return (dict, tuple((k, walk(x)) for k, x in v.items()))
        raise _Unsupported(type(v).__name__)

    try:
        key = (walk(args), walk(kwargs))
    except _Unsupported as exc:
        return f"an argument of type {exc}"
    grad = [t for t in tensors if t.requires_grad]
    if len(grad) != 1:
        return f"{len(grad)} input tensors require grad (one is replayed)"
    x = grad[0]
    if sum(1 for t in tensors if t is x) != 1:
        return "the input is passed twice"
    if x.storage_offset() != 0:
        return "the input starts inside its storage"
    state = (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), torch.is_autocast_cache_enabled(),
             torch._C._len_torch_function_stack(), torch._C._len_torch_dispatch_stack())
    return _Signature((key, state), tensors, x)


def _substitute(v: Any, old: torch.Tensor, new: torch.Tensor) -> Any:
    if v is old:
        return new
    if type(v) in (tuple, list):
        return type(v)(_substitute(x, old, new) for x in v)
    if type(v) is dict:
        return {k: _substitute(x, old, new) for k, x in v.items()}
    return v


def _blocked() -> str:
    """Why no call may be replayed now ("" if one may)."""
    if not torch.is_grad_enabled() or torch.is_inference_mode_enabled():
        return "grad mode is off"
    if torch._C._current_autograd_node() is not None:
        return "a layer runs inside backward (activation checkpointing)"
    if torch._C._autograd._top_saved_tensors_default_hooks(True) is not None:
        return "saved-tensor hooks are set (activation checkpointing)"
    return ""


#: where a tensor sits in a layer's output structure
_SLOT = "<tensor>"


@dataclass(frozen=True)
class _Form:
    """A layer's output structure: a tensor, or a tuple or list of tensors and
    primitive values (``(hidden_states, attn_weights)``, ``(hidden_states, None)``)."""

    kind: type
    items: tuple[Any, ...]

    def build(self, tensors: list[torch.Tensor]) -> Any:
        if self.kind is torch.Tensor:
            return tensors[0]
        it = iter(tensors)
        return self.kind(next(it) if v is _SLOT else v for v in self.items)


def _form(out: Any) -> tuple[_Form, list[torch.Tensor]] | str:
    """The output's structure and its tensors (the first is the layer's result)."""
    if isinstance(out, torch.Tensor):
        return _Form(torch.Tensor, (_SLOT,)), [out]
    if type(out) in (tuple, list) and out and isinstance(out[0], torch.Tensor):
        if all(isinstance(v, (torch.Tensor, *_PRIMITIVE)) for v in out):
            items = tuple(_SLOT if isinstance(v, torch.Tensor) else v for v in out)
            return _Form(type(out), items), [v for v in out if isinstance(v, torch.Tensor)]
    return f"its output is a {type(out).__name__}, not a tensor or a tuple that starts with one"


@dataclass(frozen=True)
class _Out:
    """One tensor of a real call's output: its serial, layout, requires_grad and
    whether the recorder took it for a softmax's output or a parameter."""

    serial: int
    meta: Meta
    requires_grad: bool
    softmaxed: bool
    param_like: bool


# -- spans ---------------------------------------------------------------------------------


@dataclass
class _Span:
    """Records between two moments: [shape0, shape1) of rec.shapes, [op0, op1) of rec.ops,
    and the serials made, (serial0, serial1]."""

    shape0: int
    op0: int
    serial0: int
    shape1: int = -1
    op1: int = -1
    serial1: int = -1

    @staticmethod
    def open(rec: Recorder) -> _Span:
        return _Span(len(rec.shapes), len(rec.ops), rec._next_serial)

    def close(self, rec: Recorder) -> None:
        self.shape1, self.op1, self.serial1 = len(rec.shapes), len(rec.ops), rec._next_serial

    @property
    def made(self) -> int:
        return self.serial1 - self.serial0

    def has(self, serial: int) -> bool:
        return self.serial0 < serial <= self.serial1


@dataclass(eq=False)
class _Call:
    """A member's call that ran for real between marks (a proof or a template)."""

    member: _Member
    sig: _Signature
    site: Any
    x_serial: int
    fwd: _Span
    form: _Form | None = None
    outs: tuple[_Out, ...] = ()
    marked_out: torch.Tensor | None = None
    out_version: int = 0
    bwd: _Span | None = None
    bwd_closed: bool = False
    out_grad: int = 0
    out_grad_meta: Meta = ()
    in_grad: int = 0
    in_grad_meta: Meta = ()
    total_grad: int = -1


@dataclass(eq=False)
class _Replayed:
    """A member whose records are the template's."""

    member: _Member
    template: _Call
    x_serial: int
    base: int
    x_meta: Meta
    params: tuple[torch.Tensor, ...]
    placeholder: tuple[int, int] | None = None
    out_grad: int = 0
    out_grad_meta: Meta = ()
    in_grad: int = 0
    in_grad_meta: Meta = ()
    total_grad: int = -1


class _Mark(torch.autograd.Function):
    """Identity that tells the replayer when backward reaches a real call's output
    (``entry`` False) and input (``entry`` True). Its output is a new tensor of the
    same layout (not a view, so an in-place op on it is no CopySlices)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, call: _Call, entry: bool, replayer: Replayer) -> torch.Tensor:
        ctx.set_materialize_grads(False)
        ctx.call, ctx.entry, ctx.replayer = call, entry, replayer
        return x.new_empty_strided(tuple(x.shape), tuple(x.stride()))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor | None) -> tuple[Any, ...]:
        ctx.replayer._mark_backward(ctx.call, ctx.entry, grad)
        return grad, None, None, None


class _Replay(torch.autograd.Function):
    """A replayed layer: (input, parameters) → an output of the template's layout."""

    @staticmethod
    def forward(ctx: Any, state: _Replayed, replayer: Replayer, x: torch.Tensor, *params: torch.Tensor
                ) -> tuple[torch.Tensor, ...]:
        ctx.set_materialize_grads(False)
        ctx.state, ctx.replayer, ctx.x = state, replayer, x
        outs = tuple(x.new_empty_strided(o.meta[0], o.meta[1], dtype=o.meta[2]) for o in state.template.outs)
        ctx.mark_non_differentiable(*(t for t, o in zip(outs, state.template.outs) if not o.requires_grad))
        return outs

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor | None, *others: torch.Tensor | None) -> tuple[Any, ...]:
        state: _Replayed = ctx.state
        grads = ctx.replayer._replay_backward(state, ctx.x, grad, any(g is not None for g in others))
        return (None, None, *grads)


# -- the replayer ----------------------------------------------------------------------------


class Replayer:
    """Finds the stacks of ``root``, wraps their members' forward while installed,
    and after backward checks and expands what it replayed (:meth:`finish`)."""

    def __init__(self, rec: Recorder, root: torch.nn.Module) -> None:
        self.rec = rec
        self.members: list[_Member] = []
        self.groups: list[_Group] = []
        self.replays: list[_Replayed] = []
        self.calls: list[_Call] = []
        self.placeholders: list[_Replayed] = []
        self.tainted = ""
        self._busy = False
        self._hooks: list[Any] = []
        self._bwd_owners: dict[int, dict[int, Owner]] = {}
        self._by_path: dict[str, ModuleInfo] = {info.path: info for info in rec.infos.values()}
        from shapelint.capture.sources import user_frame_source  # (capture imports this module)

        self._call_site = user_frame_source
        STATS.reset()
        if _global_hooks():
            # they would run for every submodule of a layer that a replay skips
            STATS.decline("global module hooks are set")
            return
        self._find(root)

    @property
    def used(self) -> bool:
        return bool(self.calls)

    def _find(self, root: torch.nn.Module) -> None:
        shared = Counter(id(p) for _, p in root.named_parameters(remove_duplicate=False))
        modules = Counter(id(m) for _, m in root.named_modules(remove_duplicate=False))
        for path, children in _stacks(root):
            by_class: dict[type, list[tuple[int, str, torch.nn.Module]]] = {}
            for i, (name, child) in enumerate(children):
                by_class.setdefault(type(child), []).append((i, name, child))
            for cls, kids in by_class.items():
                if len(kids) < MIN_LAYERS:
                    continue
                skip = set.intersection(*(_index_attrs(c, i) for i, _, c in kids))
                groups: dict[Hashable, list[tuple[str, torch.nn.Module]]] = {}
                for _, name, child in kids:
                    if (modules[id(child)] > 1 or any(modules[id(m)] > 1 for m in child.modules())
                            or any(shared[id(p)] > 1 for p in child.parameters())):
                        STATS.decline(f"{name}: shares a module or parameter")
                        continue
                    fp = _fingerprint(child, skip)
                    if fp is None:
                        STATS.decline(f"{name}: has hooks or an instance forward")
                        continue
                    groups.setdefault(fp, []).append((name, child))
                for n, same in enumerate(groups.values()):
                    if len(same) < MIN_LAYERS:
                        continue
                    group = _Group(f"{path or '<root>'}[{cls.__name__} #{n}]", len(same))
                    self.groups.append(group)
                    self.members += [_Member(child, name, group) for name, child in same]
        STATS.groups = len(self.groups)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Members' forwards go through the replayer while the ``with`` body runs."""
        for m in self.members:
            m.module.forward = self._forward(m)  # type: ignore[method-assign]
        try:
            yield
        finally:
            for m in self.members:
                vars(m.module).pop("forward", None)

    @contextlib.contextmanager
    def _paused(self) -> Iterator[None]:
        self.rec.paused = True
        try:
            yield
        finally:
            self.rec.paused = False

    def _forward(self, m: _Member) -> Callable[..., Any]:
        original = type(m.module).forward

        def forward(*args: Any, **kwargs: Any) -> Any:
            if self._busy or m.called or m.group.off:
                return original(m.module, *args, **kwargs)
            m.called = True
            why = _blocked() or ("" if not _hooked(m.module) else "hooks were added while the model ran")
            sig = _signature(args, kwargs) if not why else why
            if isinstance(sig, str):
                STATS.decline(f"{m.path}: {sig}")
                return original(m.module, *args, **kwargs)
            site = self._call_site()
            if m.group.template is None:
                return self._run_marked(m, original, args, kwargs, sig, site)
            replayed = self._replay(m, sig, site)
            if replayed is not None:
                return replayed
            return original(m.module, *args, **kwargs)

        return forward

    # -- the two real runs -------------------------------------------------------------------
    def _run_marked(self, m: _Member, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                    sig: _Signature, site: Any) -> Any:
        rec, x = self.rec, sig.x
        x_serial = rec._serial(x)
        call = _Call(m, sig, site, x_serial, _Span.open(rec))
        with self._paused():
            xm = _Mark.apply(x, call, True, self)
        self._alias(xm, x, x_serial)
        call.fwd = _Span.open(rec)
        version = xm._version
        self._busy = True
        try:
            out = original(m.module, *_substitute(args, x, xm), **_substitute(kwargs, x, xm))
        finally:
            self._busy = False
        call.fwd.close(rec)
        self.calls.append(call)
        self._hooks.append(x.register_hook(lambda g: self._total_grad(call, g)))
        group = m.group
        if xm._version != version:
            self.tainted = f"{m.path} changes its input in place"
            group.off = self.tainted
            return out
        formed = _form(out)
        why = formed if isinstance(formed, str) else self._output_problem(call, formed[1], x, xm)
        if why:
            group.off = f"{m.path}: {why}"
            STATS.decline(group.off)
            return out
        assert not isinstance(formed, str)
        call.form, ys = formed
        call.outs = tuple(_Out(rec._serial(y), _meta(y), y.requires_grad, rec._has(rec.softmaxed, y),
                               rec._has(rec.param_like, y)) for y in ys)
        with self._paused():
            ym = _Mark.apply(ys[0], call, False, self)
        self._alias(ym, ys[0], call.outs[0].serial)
        call.marked_out, call.out_version = ym, ym._version
        if group.proof is None:
            group.proof = call
        else:
            why = self._same_forward(group.proof, call)
            if why:
                group.off = f"{group.proof.member.path} and {m.path}: {why}"
                STATS.decline(group.off)
            else:
                group.template = call
                STATS.templates += 1
        return call.form.build([ym, *ys[1:]])

    def _output_problem(self, call: _Call, ys: list[torch.Tensor], x: torch.Tensor, xm: torch.Tensor) -> str:
        if not ys[0].requires_grad:
            return "its output does not require grad"
        rec = self.rec
        for y in ys:
            if y is xm or y is x or y._base is xm or y._base is x or y.storage_offset() != 0:
                return "its output is its input or a view of it"
            serial = rec._known_serial(y)
            if serial is None or not call.fwd.has(serial) or rec._has(rec.param_like, y):
                return "its output was not made by its own ops"
        if len({rec._known_serial(y) for y in ys}) != len(ys):
            return "its output tensors share memory"
        return ""

    def _alias(self, new: torch.Tensor, old: torch.Tensor, serial: int) -> None:
        rec = self.rec
        rec._serials[id(new)] = (weakref.ref(new), serial)
        if rec._has(rec.softmaxed, old):
            rec._mark(rec.softmaxed, new)
        if rec._has(rec.param_like, old):
            rec._mark(rec.param_like, new)

    def _mark_backward(self, call: _Call, entry: bool, grad: torch.Tensor | None) -> None:
        rec = self.rec
        if grad is None:
            self.tainted = f"{call.member.path} got no gradient"
            return
        if not entry:
            call.bwd = _Span.open(rec)
            call.out_grad, call.out_grad_meta = rec._serial(grad), _meta(grad)
        else:
            if call.bwd is not None and not call.bwd_closed:
                call.bwd.close(rec)
                call.bwd_closed = True
            call.in_grad, call.in_grad_meta = rec._serial(grad), _meta(grad)

    def _total_grad(self, state: _Call | _Replayed, grad: torch.Tensor) -> None:
        state.total_grad = self.rec._serial(grad)

    # -- replay -----------------------------------------------------------------------
    def _replay(self, m: _Member, sig: _Signature, site: Any) -> Any:
        t = m.group.template
        assert t is not None
        if sig.key != t.sig.key or site != t.site:
            STATS.decline(f"{m.path}: called unlike {t.member.path}")
            return None
        if any(a is not b for a, b in zip(sig.tensors, t.sig.tensors) if b is not t.sig.x):
            STATS.decline(f"{m.path}: given other tensors than {t.member.path}")
            return None
        owners = self._owners(t, m, self.rec.shapes[t.fwd.shape0:t.fwd.shape1])
        if owners is None:
            return None
        rec, x = self.rec, sig.x
        x_serial = rec._serial(x)
        state = _Replayed(m, t, x_serial, rec._next_serial, _meta(x),
                          tuple(p for p in m.module.parameters() if p.requires_grad))
        rec._next_serial += t.fwd.made
        serial = self._serial_map(t, state, backward=False)
        rec.shapes.extend((s, phase, owners.get(id(o), o) if o is not None else None, role, dtype)
                          for s, phase, o, role, dtype in rec.shapes[t.fwd.shape0:t.fwd.shape1])
        rec.ops.extend(self._copy_ops(t, m, serial, rec.ops[t.fwd.op0:t.fwd.op1]))
        with self._paused():
            ys = _Replay.apply(state, self, x, *state.params)
        for y, o in zip(ys, t.outs):
            rec._serials[id(y)] = (weakref.ref(y), serial(o.serial))
            if o.softmaxed:
                rec._mark(rec.softmaxed, y)
            if o.param_like:
                rec._mark(rec.param_like, y)
        self._hooks.append(x.register_hook(lambda g: self._total_grad(state, g)))
        self.replays.append(state)
        assert t.form is not None
        return t.form.build(list(ys))

    def _rename(self, path: str, t: _Call, m: _Member) -> str | None:
        src = t.member.path
        if path == src or path.startswith(src + "."):
            return m.path + path[len(src):]
        return None

    def _owners(self, t: _Call, m: _Member, shapes: list[tuple[Any, ...]]) -> dict[int, Owner] | None:
        """The template's owners as ``m``'s (its own module info: paths, params, definition)."""
        out: dict[int, Owner] = {}
        for _, _, owner, _, _ in shapes:
            if owner is None or id(owner) in out:
                continue
            path = self._rename(owner.module.path, t, m)
            if path is None:
                out[id(owner)] = owner
                continue
            info = self._by_path.get(path)
            if info is None or info.type != owner.module.type or info.defined_at != owner.module.defined_at:
                STATS.decline(f"{m.path}: module {path} is not like {owner.module.path}")
                return None
            out[id(owner)] = dataclasses.replace(owner, module=info)
        return out

    def _serial_map(self, t: _Call, r: _Replayed, backward: bool, fresh: int = 0) -> Callable[[int], int]:
        f0, f1, base = t.fwd.serial0, t.fwd.serial1, r.base
        explicit = {t.x_serial: r.x_serial}
        b0 = b1 = 0
        if backward:
            assert t.bwd is not None
            explicit.update({t.out_grad: r.out_grad, t.in_grad: r.in_grad})
            b0, b1 = t.bwd.serial0, t.bwd.serial1

        def serial(s: int) -> int:
            hit = explicit.get(s)
            if hit is not None:
                return hit
            if f0 < s <= f1:
                return s - f0 + base
            if b0 < s <= b1:
                return s - b0 + fresh
            return s

        return serial

    def _copy_ops(self, t: _Call, m: _Member, serial: Callable[[int], int], ops: list[OpRow]) -> list[OpRow]:
        names: dict[str, str] = {}
        out = []
        for op in ops:
            renamed = names.get(op.owner)
            if renamed is None:
                renamed = names[op.owner] = self._rename(op.owner, t, m) or op.owner
            out.append(op._replace(reads=tuple((serial(s), b) for s, b in op.reads),
                                   writes=tuple((serial(s), b) for s, b in op.writes), owner=renamed))
        return out

    def _replay_backward(self, state: _Replayed, x: torch.Tensor, grad: torch.Tensor | None, others: bool
                         ) -> list[torch.Tensor | None]:
        rec = self.rec
        if grad is None or others:
            self.tainted = f"replayed {state.member.path} got no gradient, or one on another output"
        with self._paused():
            gx = torch.empty_like(x)
            grads: list[torch.Tensor | None] = [gx, *(torch.empty_like(p) for p in state.params)]
        if grad is not None:
            state.out_grad, state.out_grad_meta = rec._serial(grad), _meta(grad)
        state.in_grad, state.in_grad_meta = rec._serial(gx), _meta(gx)
        state.placeholder = (len(rec.shapes), len(rec.ops))
        self.placeholders.append(state)
        return grads

    # -- after backward ---------------------------------------------------------------------
    def finish(self) -> str:
        """Check what the real runs proved and expand the placeholders; why the records
        cannot stand ("" when they can)."""
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        why = self.tainted or self._check()
        if why:
            return why
        self._expand()
        STATS.replayed = len(self.replays)
        return ""

    def _check(self) -> str:
        for call in self.calls:
            if call.marked_out is not None and call.marked_out._version != call.out_version:
                return f"the output of {call.member.path} is changed in place"
            if call.bwd is not None and not call.bwd_closed:
                return f"the backward of {call.member.path} did not reach its input"
            if call.total_grad not in (-1, call.in_grad):
                return f"the input of {call.member.path} gets gradient from elsewhere too"
        for r in self.replays:
            if r.placeholder is None:
                return f"the backward of replayed {r.member.path} never ran"
            if r.total_grad != r.in_grad:
                return f"the input of {r.member.path} gets gradient from elsewhere too"
        proven: list[_Call] = []
        for group in self.groups:
            a, b = group.proof, group.template
            replayed = [r for r in self.replays if r.template is b]
            if a is None or b is None or not replayed:
                continue
            if not (a.bwd_closed and b.bwd_closed):
                return f"the backward of {a.member.path} or {b.member.path} was not seen whole"
            why = self._same_backward(a, b)
            if why:
                return f"{a.member.path} and {b.member.path}: {why}"
            assert b.bwd is not None
            for r in replayed:
                if r.out_grad_meta != b.out_grad_meta or r.in_grad_meta != b.in_grad_meta:
                    return f"the gradients of {r.member.path} are laid out unlike {b.member.path}'s"
                owners = self._owners(b, r.member, self.rec.shapes[b.bwd.shape0:b.bwd.shape1])
                if owners is None:
                    return f"the backward GEMMs of {b.member.path} have owners {r.member.path} lacks"
                self._bwd_owners[id(r)] = owners
            proven += [a, b]
        return self._escapes(proven)

    def _escapes(self, calls: list[_Call]) -> str:
        """Whether anything outside a real call's spans touched a tensor the call made
        (other than its output): a replayed copy would not have made it."""
        inside: list[tuple[_Call, range, range]] = []
        for c in calls:
            assert c.bwd is not None
            inside.append((c, range(c.fwd.op0, c.fwd.op1), range(c.bwd.op0, c.bwd.op1)))
        for i, op in enumerate(self.rec.ops):
            for c, fwd, bwd in inside:
                if i in fwd or i in bwd:
                    continue
                for s, _ in op.reads + op.writes:
                    if c.fwd.has(s) and s != c.outs[0].serial:
                        return f"{op[0]} outside {c.member.path} uses a tensor made inside it"
        return ""

    @staticmethod
    def _relative(path: str, c: _Call) -> Any:
        """A module path relative to the call's layer ("" is the layer), or the path itself outside it."""
        src = c.member.path
        if path == src or path.startswith(src + "."):
            return path[len(src):]
        return ("outside", path)

    def _normal_ops(self, c: _Call, ops: list[OpRow], backward: bool) -> list[OpRow]:
        """The call's ops with serials and owners as the call sees them, to compare two calls."""
        tokens: dict[int, str] = {c.x_serial: "input"}
        if backward:
            tokens.update({c.out_grad: "output grad", c.in_grad: "input grad"})
        bwd = c.bwd if backward else None

        def norm(s: int) -> Any:
            if s in tokens:
                return tokens[s]
            if c.fwd.has(s):
                return ("fwd", s - c.fwd.serial0)
            if bwd is not None and bwd.has(s):
                return ("bwd", s - bwd.serial0)
            return s

        return [op._replace(reads=tuple((norm(s), b) for s, b in op.reads),
                            writes=tuple((norm(s), b) for s, b in op.writes), owner=self._relative(op.owner, c))
                for op in ops]

    def _normal_shapes(self, c: _Call, shapes: list[tuple[Any, ...]]) -> list[tuple[Any, ...]] | None:
        """The call's GEMM records with owners relative to it; None if it recomputed anything."""
        out = []
        for s, phase, owner, role, dtype in shapes:
            if phase == "recompute":
                return None
            who = None if owner is None else (self._relative(owner.module.path, c), owner.module.type,
                                              owner.source, owner.param_operand)
            out.append((s, phase, who, role, dtype))
        return out

    def _same_forward(self, a: _Call, b: _Call) -> str:
        rec = self.rec
        if a.sig.key != b.sig.key or a.site != b.site or any(
                p is not q for p, q in zip(a.sig.tensors, b.sig.tensors) if q is not b.sig.x):
            return "called differently"
        if (a.form, a.fwd.made, [dataclasses.replace(o, serial=o.serial - a.fwd.serial0) for o in a.outs]) != (
                b.form, b.fwd.made, [dataclasses.replace(o, serial=o.serial - b.fwd.serial0) for o in b.outs]):
            return "outputs differ"
        na = self._normal_shapes(a, rec.shapes[a.fwd.shape0:a.fwd.shape1])
        if na is None or na != self._normal_shapes(b, rec.shapes[b.fwd.shape0:b.fwd.shape1]):
            return "forward GEMMs differ"
        if self._normal_ops(a, rec.ops[a.fwd.op0:a.fwd.op1], False) != self._normal_ops(
                b, rec.ops[b.fwd.op0:b.fwd.op1], False):
            return "forward ops differ"
        return ""

    def _same_backward(self, a: _Call, b: _Call) -> str:
        rec = self.rec
        assert a.bwd is not None and b.bwd is not None
        if (a.out_grad_meta, a.in_grad_meta, a.bwd.made) != (b.out_grad_meta, b.in_grad_meta, b.bwd.made):
            return "backward gradients differ"
        sa, sb = rec.shapes[a.bwd.shape0:a.bwd.shape1], rec.shapes[b.bwd.shape0:b.bwd.shape1]
        na = self._normal_shapes(a, sa)
        if na is None or na != self._normal_shapes(b, sb):
            return "backward GEMMs differ, or it recomputes"
        if self._normal_ops(a, rec.ops[a.bwd.op0:a.bwd.op1], True) != self._normal_ops(
                b, rec.ops[b.bwd.op0:b.bwd.op1], True):
            return "backward ops differ"
        return ""

    def _expand(self) -> None:
        """Put each placeholder's copy of its template's backward records in its place."""
        if not self.placeholders:
            return
        rec = self.rec
        shapes, ops = rec.shapes, rec.ops
        new_shapes: list[tuple[Any, ...]] = []
        new_ops: list[OpRow] = []
        si = oi = 0
        inserted: list[tuple[int, int]] = []  # (placeholder position, ops put there)
        for r in self.placeholders:
            t = r.template
            assert r.placeholder is not None and t.bwd is not None
            sp, op = r.placeholder
            new_shapes += shapes[si:sp]
            new_ops += ops[oi:op]
            si, oi = sp, op
            tshapes = shapes[t.bwd.shape0:t.bwd.shape1]
            owners = self._bwd_owners[id(r)]
            new_shapes += [(s, phase, owners.get(id(o), o) if o is not None else None, role, dtype)
                           for s, phase, o, role, dtype in tshapes]
            serial = self._serial_map(t, r, backward=True, fresh=rec._next_serial)
            rec._next_serial += t.bwd.made
            new_ops += self._copy_ops(t, r.member, serial, ops[t.bwd.op0:t.bwd.op1])
            inserted.append((op, t.bwd.op1 - t.bwd.op0))
        new_shapes += shapes[si:]
        new_ops += ops[oi:]
        rec.shapes[:] = new_shapes  # type: ignore[assignment]
        rec.ops[:] = new_ops
        for positions in (rec.syncs, rec.breaks):  # op positions move by the ops inserted before them
            positions[:] = [p + sum(n for at, n in inserted if at <= p) for p in positions]
        # parameters the template's backward left without a gradient have none in a full trace either
        for r in self.replays:
            tparams = dict(r.template.member.module.named_parameters())
            for name, p in r.member.module.named_parameters():
                if p.requires_grad and tparams[name].grad is None:
                    p.grad = None
