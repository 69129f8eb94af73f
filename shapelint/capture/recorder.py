"""The recorder: sees every aten op of the step on fake tensors and keeps the GEMMs
and the kernel-launching ops.

The FakeTensorMode models are built under (``RecordingFakeMode``; a plain
``TorchDispatchMode`` for other tensors) hands each aten op, below autograd, to a
``Recorder``. Forward ops are tied to the innermost module running (global forward
hooks keep a module stack); each autograd node created in forward gets that owner
under its sequence number, so a backward op is tied to its forward through
``torch._C._current_autograd_node()``. Forward ops that run while backward does
(activation checkpointing) are ``recompute``. GEMM shapes come from
``shapelint.physics.gemm_shapes`` only."""

from __future__ import annotations

import contextlib
import weakref
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Iterator, NamedTuple

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from shapelint.capture.precision import dtype_name, operand_dtype
from shapelint.capture.sources import module_params, user_frame_source
from shapelint.model.records import KernelClass, Source
from shapelint.physics.gemm_shapes import (
    GEMM_OPS,
    GemmShape,
    extract,
)
from shapelint.physics.kernels import kernel_class, read_bytes

_VIEW_LIKE = frozenset(
    {
        "t", "transpose", "permute", "view", "_unsafe_view", "reshape", "expand", "alias",
        "detach", "slice", "select", "unsqueeze", "squeeze", "as_strided", "_to_copy",
        "clone", "contiguous", "_reshape_alias", "split", "chunk", "unbind", "narrow",
        "split_with_sizes", "numpy_T", "mT", "_conj", "lift_fresh",
    }
)
_SOFTMAX = frozenset({"_softmax", "softmax", "_safe_softmax"})
#: ops whose output is their input with some elements zeroed: a softmax output
#: through them is still the attention probabilities
_DROPOUT = frozenset({"native_dropout", "dropout", "feature_dropout", "alpha_dropout"})

# what the recorder does with an op, decided once per op overload
_IGNORED, _GEMM, _VIEW, _SOFTMAX_OP, _DROPOUT_OP, _OTHER = range(6)


#: op namespaces the recorder looks at: ATen's, and shapelint's attention ops
_NAMESPACES = frozenset({"aten", "shapelint"})


def _op_kind(func: Any) -> int:
    if func.namespace not in _NAMESPACES:
        return _IGNORED
    name = func.overloadpacket.__name__
    if name in GEMM_OPS:
        return _GEMM
    if name in _VIEW_LIKE:
        return _VIEW
    if name in _DROPOUT:
        return _DROPOUT_OP
    return _SOFTMAX_OP if name in _SOFTMAX else _OTHER


@dataclass(frozen=True)
class ModuleInfo:
    path: str
    type: str
    params: tuple[tuple[str, int], ...]
    defined_at: Source | None


@dataclass(frozen=True)
class Owner:
    module: ModuleInfo
    source: Source | None
    param_operand: bool


class OpRow(NamedTuple):
    """One op as the recorder keeps it while the model runs (shapelint.capture.replay copies
    and compares these); :class:`shapelint.model.records.Op` is built from it at the end."""

    name: str
    kclass: KernelClass
    backward: bool
    nbytes: int
    reads: tuple[tuple[int, int], ...]
    writes: tuple[tuple[int, int], ...]
    #: how many GEMM records it stands for (a GEMM or attention marker)
    gemms: int
    owner: str
    widest: int
    strided: bool
    numel: int
    out_numel: int


class Recorder:
    """Sees every aten op of the step (through :class:`RecordingFakeMode`, or
    :class:`_RecorderMode` for tensors that are not our fake ones) and keeps the GEMMs."""

    def __init__(self, root: torch.nn.Module, precision: str, defined_at: dict[int, Source]):
        self.precision = precision
        self.stack: list[ModuleInfo] = []
        # the forward code of leaf modules: a GEMM inside one is located at its call site
        self.leaf_code: list[Any] = []
        self.shapes: list[tuple[GemmShape, str, Owner | None, str, str]] = []
        self.node_owner: dict[int, Owner] = {}
        self.param_like: dict[int, weakref.ref[torch.Tensor]] = {}
        self.softmaxed: dict[int, weakref.ref[torch.Tensor]] = {}
        self.infos: dict[int, ModuleInfo] = {}
        self._kinds: dict[Any, int] = {}
        # the op stream: (name, kernel class, backward, bytes, reads, writes, gemm count, owner,
        # element bytes, strided)
        self.ops: list[OpRow] = []
        #: positions in ``ops`` where the host reads a value from the GPU (note_host_sync)
        self.syncs: list[int] = []
        #: positions in ``ops`` where dynamo would break the graph (note_graph_break)
        self.breaks: list[int] = []
        self._serials: dict[int, tuple[weakref.ref[torch.Tensor], int]] = {}
        self._next_serial = 0
        #: set while shapelint.capture.replay runs ops of its own (its marks, a replayed layer's outputs)
        self.paused = False
        for path, mod in root.named_modules(remove_duplicate=True):
            self.infos[id(mod)] = ModuleInfo(
                path or "<root>", type(mod).__name__, module_params(mod), defined_at.get(id(mod))
            )
        for p in root.parameters():
            self._mark(self.param_like, p)

    # -- module stack -------------------------------------------------------
    def push(self, module: torch.nn.Module, *_: Any) -> None:
        info = self.infos.get(id(module))
        if info is None:
            info = ModuleInfo(type(module).__name__, type(module).__name__, module_params(module), None)
        self.stack.append(info)
        leaf = next(iter(module.children()), None) is None
        self.leaf_code.append(getattr(type(module).forward, "__code__", None) if leaf else None)

    def pop(self, *_: Any) -> None:
        if self.stack:
            self.stack.pop()
            self.leaf_code.pop()

    # -- tensor lineage -----------------------------------------------------
    @staticmethod
    def _mark(table: dict[int, weakref.ref[torch.Tensor]], t: torch.Tensor) -> None:
        table[id(t)] = weakref.ref(t)

    @staticmethod
    def _has(table: dict[int, weakref.ref[torch.Tensor]], t: Any) -> bool:
        if not isinstance(t, torch.Tensor):
            return False
        ref = table.get(id(t))
        return ref is not None and ref() is t

    def _propagate(self, kind: int, args: tuple[Any, ...], out: Any) -> None:
        """Parameters stay parameters through views; softmax outputs stay softmax
        outputs through views, casts and dropout, and through nothing else (a
        softmax is attention only where a matmul reads it directly)."""
        if kind == _OTHER or not args:
            return
        outs = out if isinstance(out, (tuple, list)) else (out,)
        tensors = [o for o in outs if isinstance(o, torch.Tensor)]
        if kind == _SOFTMAX_OP:
            for o in tensors:
                self._mark(self.softmaxed, o)
            return
        if kind == _VIEW and self._has(self.param_like, args[0]):
            for o in tensors:
                self._mark(self.param_like, o)
        if self._has(self.softmaxed, args[0]):
            # dropout returns (output, mask): only the output is the probabilities
            for o in tensors[:1] if kind == _DROPOUT_OP else tensors:
                self._mark(self.softmaxed, o)

    def _serial(self, t: torch.Tensor, base: torch.Tensor | None = None) -> int:
        """A tensor's serial number: a view or in-place result shares its base's."""
        entry = self._serials.get(id(t))
        if entry is not None and entry[0]() is t:
            return entry[1]
        number = self._serial(base) if base is not None else self._new_serial()
        self._serials[id(t)] = (weakref.ref(t), number)
        return number

    def _known_serial(self, t: torch.Tensor) -> int | None:
        """The tensor's serial number if it has one (without giving it one)."""
        entry = self._serials.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else None

    def _new_serial(self) -> int:
        self._next_serial += 1
        return self._next_serial

    def _stream(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, gemms: int) -> None:
        """Add one op to the op stream (a GEMM or attention op as a marker of ``gemms`` records)."""
        if gemms:
            kclass: Any = "attention" if name.startswith("fused_attention") else "gemm"
        else:
            kclass = kernel_class(name)
        ins = tensors_of(args) + tensors_of(kwargs.values())
        outs = tensors_of(out if isinstance(out, (tuple, list)) else (out,))
        if kclass is None:  # a view: its outputs are its input's data
            if ins:
                for o in outs:
                    self._serial(o, ins[0])
            return
        in_place = name.endswith("_") or "out" in kwargs
        writes = tuple((self._serial(o, ins[0] if in_place and ins else None), _stored_bytes(o)) for o in outs)
        read = read_bytes(name, [(_stored_bytes(t), t.numel(), t.element_size()) for t in ins],
                          sum(b for _, b in writes))
        reads = tuple((self._serial(t), b) for t, b in zip(ins, read))
        nbytes = (0 if kclass == "fill" else sum(b for _, b in reads)) + sum(b for _, b in writes)
        widest = max((t.element_size() for t in ins + outs if t.is_floating_point()), default=2)
        strided = kclass in ("copy", "pointwise") and any(not t.is_contiguous() for t in ins + outs if t.dim() > 1)
        backward = not self.stack and torch._C._current_autograd_node() is not None
        owner = self.stack[-1].path if self.stack else ""
        numel, out_numel = _iteration(kclass, ins, outs)
        self.ops.append(OpRow(name, kclass, backward, nbytes, reads, writes, gemms, owner, widest, strided, numel,
                              out_numel))

    # -- every op ----------------------------------------------------------
    def on_op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        if self.paused:
            return
        kind = self._kinds.get(func)
        if kind is None:
            kind = self._kinds[func] = _op_kind(func)
        if kind == _IGNORED:
            return
        name = func.overloadpacket.__name__
        if kind == _GEMM:
            node = torch._C._current_autograd_node()
            # the autograd node of this op (if it made one) took the last sequence number
            seq = torch._C._autograd._get_sequence_nr() - 1
            before = len(self.shapes)
            self._record(name, args, kwargs, out, node, seq, node is None or bool(self.stack))
            self._stream(name, args, kwargs, out, len(self.shapes) - before)
        else:
            self._propagate(kind, args, out)
            self._stream(name, args, kwargs, out, 0)

    def _record(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
                node: Any, seq: int, in_forward: bool) -> None:
        shapes = extract(name, args, kwargs, out)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        dtype = dtype_name(operand_dtype(name, tensors), self.precision)
        param_operand = any(self._has(self.param_like, a) for a in tensors)
        if in_forward:
            owner_module = self.stack[-1] if self.stack else ModuleInfo("<root>", "", (), None)
            skip = self.leaf_code[-1] if self.leaf_code else None
            # where user code ran it; for containers like nn.Sequential, where it was built
            owner = Owner(owner_module, user_frame_source(skip) or owner_module.defined_at, param_operand)
            if any(t.requires_grad for t in tensors):
                self.node_owner[seq] = owner
            phase = "forward" if node is None else "recompute"
            softmax_in = self.softmaxed and any(self._has(self.softmaxed, a) for a in tensors)
            for s in shapes:
                self.shapes.append((s, phase, owner, "after_softmax" if softmax_in else s.role, dtype))
            return
        owner_or_none = self.node_owner.get(node._sequence_nr())
        for s in shapes:
            if s.part in ("grad_input", "grad_weight"):
                phase = s.part
            elif param_operand or owner_or_none is None or not owner_or_none.param_operand:
                phase = "grad_input"
            else:
                phase = "grad_weight"
            self.shapes.append((s, phase, owner_or_none, s.role, dtype))


def tensors_of(values: Any) -> list[torch.Tensor]:
    return [v for v in values if isinstance(v, torch.Tensor)]


def _iteration(kclass: str, ins: list[torch.Tensor], outs: list[torch.Tensor]) -> tuple[int, int]:
    """(elements the kernel iterates over, elements it produces): a reduction iterates
    over its largest input and produces its largest output, any other op iterates over
    its largest output (or input)."""
    made = max((t.numel() for t in outs), default=0)
    if kclass == "reduction":
        return max((t.numel() for t in ins), default=made), made
    size = made or max((t.numel() for t in ins), default=0)
    return size, size


def _stored_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements a tensor covers (a broadcast dimension once)."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        if stride != 0:
            n *= int(size)
    return n * t.element_size()


class RecordingFakeMode(FakeTensorMode):
    """The FakeTensorMode shapelint builds models under: while a recorder is set,
    it sees each top-level aten op once, with no second dispatch mode on the stack
    (half the Python dispatch cost of stacking one)."""

    def __init__(self) -> None:
        super().__init__(allow_non_fake_inputs=True)
        self.recorder: Recorder | None = None
        self._depth = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def, override]
        kwargs = kwargs or {}
        self._depth += 1
        try:
            out = super().__torch_dispatch__(func, types, args, kwargs)
        finally:
            self._depth -= 1
        if self.recorder is not None and self._depth == 0:  # not the ops of a decomposition
            self.recorder.on_op(func, args, kwargs, out)
        return out


class _RecorderMode(TorchDispatchMode):
    """The recorder as a dispatch mode of its own, for meta or real tensors."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.recorder.on_op(func, args, kwargs, out)
        return out


_recorder: ContextVar[Recorder | None] = ContextVar("_recorder", default=None)


def note_host_sync() -> None:
    """The step running reads a value from the GPU on the host here, in eager mode (on
    fake tensors the code cannot, so the loader tells capture where it would): the
    host waits for every kernel issued before (``shapelint.price.step.serialised_ms``)."""
    rec = _recorder.get()
    if rec is not None and not rec.paused:
        rec.syncs.append(len(rec.ops))


def note_graph_break() -> None:
    """Under torch.compile, dynamo would end the graph here and start another (the
    loader knows where; the tracer does not run dynamo): a tensor made before it reaches
    the next graph as an input, in the layout it was made in."""
    rec = _recorder.get()
    if rec is not None and not rec.paused:
        rec.breaks.append(len(rec.ops))


@contextlib.contextmanager
def recording(rec: Recorder, model: torch.nn.Module) -> Iterator[None]:
    token = _recorder.set(rec)
    mode = next((getattr(p, "fake_mode", None) for p in model.parameters()), None)
    try:
        if isinstance(mode, RecordingFakeMode):
            mode.recorder = rec
            try:
                yield
            finally:
                mode.recorder = None
        else:
            with _RecorderMode(rec):
                yield
    finally:
        _recorder.reset(token)


@contextlib.contextmanager
def module_hooks(rec: Recorder) -> Iterator[None]:
    from torch.nn.modules import module as module_mod

    pre = module_mod.register_module_forward_pre_hook(rec.push)
    post = module_mod.register_module_forward_hook(rec.pop, always_call=True)
    try:
        yield
    finally:
        pre.remove()
        post.remove()
