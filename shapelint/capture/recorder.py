"""The recorder: sees every aten op of the step on fake tensors and keeps the GEMMs
and the kernel-launching ops.

The FakeTensorMode models are built under (``RecordingFakeMode``; a plain
``TorchDispatchMode`` for other tensors) hands each aten op, below autograd, to a
``Recorder``. Forward ops are tied to the innermost module running (global forward
hooks keep a module stack); each autograd node created in forward gets that owner
under its sequence number, so a backward op is tied to its forward through
``torch._C._current_autograd_node()``. Forward ops that run while backward does
(activation checkpointing) are ``recompute``. GEMM shapes come from
``shapelint.physics.gemm_shapes`` only.

Replay (:mod:`shapelint.capture.replay`) copies records instead of tracing some layers;
it works through the recorder's public methods only: positions in the record streams,
the records between two positions, appending or inserting copies, reserving serial
numbers, a tensor's serial number and lineage, and pausing the recording while it runs
ops of its own."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from typing import Any, Iterator

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from shapelint.capture.host_reads import HostReads
from shapelint.capture.op_traffic import (
    casts,
    channels_last,
    iteration,
    normalised_shape,
    softmax_row,
    stored_bytes,
    stream_access,
    tensors_of,
)
from shapelint.capture.precision import dtype_name, operand_dtype
from shapelint.capture.rows import ROOT_INFO, ModuleInfo, OpRow, Owner, Position, ShapeRow
from shapelint.capture.sources import module_params, user_frame_source
from shapelint.model.records import Source
from shapelint.physics.conv_kernels import BATCH_NORM
from shapelint.physics.gemm_shapes import GEMM_OPS, GemmShape, extract
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
#: ops whose output is their input with some elements zeroed: a softmax output through them is
#: still the attention probabilities (off CUDA dropout is ``bernoulli_`` masks applied by ``mul``)
_CONCAT = frozenset({"cat", "stack"})  # ops that read the tensors of their list argument
_DROPOUT = frozenset({"native_dropout", "dropout", "feature_dropout", "alpha_dropout"})
_NOISE, _APPLY_NOISE = frozenset({"bernoulli", "bernoulli_"}), frozenset({"mul"})

# what the recorder does with an op, decided once per op overload
_IGNORED, _GEMM, _VIEW, _SOFTMAX_OP, _DROPOUT_OP, _OTHER, _NOISE_OP, _MUL_OP = range(8)


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
    kinds = ((_DROPOUT, _DROPOUT_OP), (_SOFTMAX, _SOFTMAX_OP), (_NOISE, _NOISE_OP), (_APPLY_NOISE, _MUL_OP))
    return next((kind for names, kind in kinds if name in names), _OTHER)


_Table = dict[int, weakref.ref[torch.Tensor]]


def _mark(table: _Table, t: torch.Tensor) -> None:
    table[id(t)] = weakref.ref(t)


def _has(table: _Table, t: Any) -> bool:
    if not isinstance(t, torch.Tensor):
        return False
    ref = table.get(id(t))
    return ref is not None and ref() is t


class Recorder:
    """Sees every aten op of the step (through :class:`RecordingFakeMode`, or
    :class:`_RecorderMode` for tensors that are not our fake ones) and keeps the GEMMs."""

    def __init__(self, root: torch.nn.Module, precision: str, defined_at: dict[int, Source]):
        self.precision = precision
        self._stack: list[ModuleInfo] = []
        # the forward code of leaf modules: a GEMM inside one is located at its call site
        self._leaf_code: list[Any] = []
        self._shapes: list[ShapeRow] = []
        self._node_owner: dict[int, Owner] = {}
        self._param_like: _Table = {}
        self._softmaxed: _Table = {}
        self._noise: _Table = {}  # dropout masks drawn off CUDA (bernoulli_)
        self._infos: dict[int, ModuleInfo] = {}
        self._kinds: dict[Any, int] = {}
        self._ops: list[OpRow] = []
        # positions in the op stream where the host reads a value from the GPU (note_host_sync)
        self._syncs: list[int] = []
        # positions in the op stream where dynamo would break the graph (note_graph_break)
        self._breaks: list[int] = []
        self._serials: dict[int, tuple[weakref.ref[torch.Tensor], int]] = {}
        self._next_serial = 0
        # set while replay runs ops of its own (its marks, a replayed layer's outputs)
        self._paused = False
        for path, mod in root.named_modules(remove_duplicate=True):
            self._infos[id(mod)] = ModuleInfo(
                path or "<root>", type(mod).__name__, module_params(mod), defined_at.get(id(mod))
            )
        self._by_path = {info.path: info for info in self._infos.values()}
        for p in root.parameters():
            _mark(self._param_like, p)

    # -- what the recording holds ---------------------------------------------
    @property
    def shapes(self) -> Sequence[ShapeRow]:
        """Every GEMM record, in execution order."""
        return self._shapes

    @property
    def ops(self) -> Sequence[OpRow]:
        """Every kernel-launching op, GEMMs and attention as markers, in execution order."""
        return self._ops

    @property
    def syncs(self) -> tuple[int, ...]:
        """Positions in :attr:`ops` where the host reads a value from the GPU."""
        return tuple(self._syncs)

    @property
    def breaks(self) -> tuple[int, ...]:
        """Positions in :attr:`ops` where torch.compile's dynamo would break the graph."""
        return tuple(self._breaks)

    def module_info(self, path: str) -> ModuleInfo | None:
        """The module at ``path`` (``<root>`` for the model itself), if the model has one."""
        return self._by_path.get(path)

    # -- the record streams, for replay ---------------------------------------
    def position(self) -> Position:
        return Position(len(self._shapes), len(self._ops), self._next_serial)

    def shapes_between(self, start: Position, end: Position) -> list[ShapeRow]:
        return self._shapes[start.shapes:end.shapes]

    def ops_between(self, start: Position, end: Position) -> list[OpRow]:
        return self._ops[start.ops:end.ops]

    def append(self, shapes: Iterable[ShapeRow], ops: Iterable[OpRow]) -> None:
        """Records made elsewhere (a copy of a layer's), added at the end."""
        self._shapes.extend(shapes)
        self._ops.extend(ops)

    def insert(self, copies: Sequence[tuple[Position, list[ShapeRow], list[OpRow]]]) -> None:
        """Records put at earlier positions (``copies`` in the order of their positions);
        the host-sync and graph-break positions move by the ops inserted before them."""
        shapes: list[ShapeRow] = []
        ops: list[OpRow] = []
        si = oi = 0
        for at, new_shapes, new_ops in copies:
            shapes += self._shapes[si:at.shapes]
            ops += self._ops[oi:at.ops]
            si, oi = at.shapes, at.ops
            shapes += new_shapes
            ops += new_ops
        self._shapes[:] = shapes + self._shapes[si:]
        self._ops[:] = ops + self._ops[oi:]
        for positions in (self._syncs, self._breaks):
            positions[:] = [p + sum(len(new) for at, _, new in copies if at.ops <= p) for p in positions]

    def reserve_serials(self, count: int) -> int:
        """Take ``count`` serial numbers for tensors a copy of records stands for;
        the number before the first of them."""
        base = self._next_serial
        self._next_serial += count
        return base

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Ops run in the ``with`` body are not recorded (replay's own)."""
        self._paused = True
        try:
            yield
        finally:
            self._paused = False

    # -- module stack -------------------------------------------------------
    def push(self, module: torch.nn.Module, *_: Any) -> None:
        info = self._infos.get(id(module))
        if info is None:
            info = ModuleInfo(type(module).__name__, type(module).__name__, module_params(module), None)
        self._stack.append(info)
        leaf = next(iter(module.children()), None) is None
        self._leaf_code.append(getattr(type(module).forward, "__code__", None) if leaf else None)

    def pop(self, *_: Any) -> None:
        if self._stack:
            self._stack.pop()
            self._leaf_code.pop()

    # -- tensor lineage -----------------------------------------------------
    def is_param_like(self, t: Any) -> bool:
        """Whether ``t`` is a parameter or a view of one."""
        return _has(self._param_like, t)

    def is_softmaxed(self, t: Any) -> bool:
        """Whether ``t`` is a softmax's output, through views, casts and dropout."""
        return _has(self._softmaxed, t)

    def adopt(self, t: torch.Tensor, serial: int, *, softmaxed: bool, param_like: bool) -> None:
        """``t`` stands for a tensor the recording knows (replay's marks, a replayed
        layer's outputs): its serial number and lineage."""
        self._serials[id(t)] = (weakref.ref(t), serial)
        if softmaxed:
            _mark(self._softmaxed, t)
        if param_like:
            _mark(self._param_like, t)

    def _propagate(self, kind: int, args: tuple[Any, ...], out: Any) -> None:
        """Parameters stay parameters through views; softmax outputs stay softmax
        outputs through views, casts and dropout, and through nothing else (a
        softmax is attention only where a matmul reads it directly)."""
        if kind == _OTHER or not args:
            return
        outs = out if isinstance(out, (tuple, list)) else (out,)
        tensors = [o for o in outs if isinstance(o, torch.Tensor)]
        if kind in (_NOISE_OP, _MUL_OP):
            return self._masks(kind, args, tensors)
        if kind == _SOFTMAX_OP:
            for o in tensors:
                _mark(self._softmaxed, o)
            return
        if kind == _VIEW and self.is_param_like(args[0]):
            for o in tensors:
                _mark(self._param_like, o)
        if self.is_softmaxed(args[0]):
            # dropout returns (output, mask): only the output is the probabilities
            for o in tensors[:1] if kind == _DROPOUT_OP else tensors:
                _mark(self._softmaxed, o)

    def _masks(self, kind: int, args: tuple[Any, ...], tensors: list[torch.Tensor]) -> None:
        """A dropout mask drawn (``bernoulli_``), or applied to the probabilities (``mul``)."""
        masked = any(_has(self._noise, a) for a in args[:2]) and any(map(self.is_softmaxed, args[:2]))
        for o in tensors if kind == _NOISE_OP or masked else ():
            _mark(self._noise if kind == _NOISE_OP else self._softmaxed, o)

    def serial(self, t: torch.Tensor, base: torch.Tensor | None = None) -> int:
        """A tensor's serial number, given one if it has none: a view or in-place
        result shares its ``base``'s."""
        entry = self._serials.get(id(t))
        if entry is not None and entry[0]() is t:
            return entry[1]
        number = self.serial(base) if base is not None else self._new_serial()
        self._serials[id(t)] = (weakref.ref(t), number)
        return number

    def known_serial(self, t: torch.Tensor) -> int | None:
        """The tensor's serial number if it has one (without giving it one)."""
        entry = self._serials.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else None

    def _new_serial(self) -> int:
        self._next_serial += 1
        return self._next_serial

    # -- the op stream --------------------------------------------------------
    def _stream(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, gemms: int) -> None:
        """Add one op to the op stream (a GEMM or attention op as a marker of ``gemms`` records)."""
        name = _inference_batch_norm(name, args)
        kclass = _stream_class(name, gemms)
        listed = tensors_of(args[0]) if name in _CONCAT and args else []  # what a cat reads (a list)
        ins = tensors_of(args) + tensors_of(kwargs.values()) + listed
        outs = tensors_of(out if isinstance(out, (tuple, list)) else (out,))
        if kclass is None:  # a view: its outputs are its input's data
            for o in outs if ins else ():
                self.serial(o, ins[0])
            return
        nbytes, reads, writes = self._traffic(name, kclass, "out" in kwargs, ins, outs)
        widest, access = stream_access(kclass, ins, outs)
        backward = not self._stack and torch._C._current_autograd_node() is not None
        owner = self._stack[-1].path if self._stack else ""
        numel, out_numel = iteration(kclass, ins, outs)
        self._ops.append(OpRow(name, kclass, backward, nbytes, reads, writes, gemms, owner, widest, access == "strided",
                               numel, out_numel, channels_last(ins, name in BATCH_NORM), access == "coalesced",
                               kclass in ("copy", "pointwise") and casts(ins, outs), normalised_shape(name, ins),
                               softmax_row(name, args)))

    def _traffic(self, name: str, kclass: str, out_arg: bool, ins: list[torch.Tensor], outs: list[torch.Tensor]
                 ) -> tuple[int, tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]:
        """(bytes the kernel moves, (serial, bytes) read, (serial, bytes) written): an
        in-place op writes its first input's tensor; a fill reads nothing."""
        in_place = name.endswith("_") or out_arg
        writes = tuple((self.serial(o, ins[0] if in_place and ins else None), stored_bytes(o)) for o in outs)
        read = read_bytes(name, [(stored_bytes(t), t.numel(), t.element_size()) for t in ins],
                          sum(b for _, b in writes))
        reads = tuple((self.serial(t), b) for t, b in zip(ins, read))
        nbytes = (0 if kclass == "fill" else sum(b for _, b in reads)) + sum(b for _, b in writes)
        return nbytes, reads, writes

    # -- every op ----------------------------------------------------------
    def on_op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        if self._paused:
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
            before = len(self._shapes)
            self._record(name, args, kwargs, out, node, seq)
            self._stream(name, args, kwargs, out, len(self._shapes) - before)
        else:
            self._propagate(kind, args, out)
            self._stream(name, args, kwargs, out, 0)

    def note_host_sync(self) -> None:
        if not self._paused:
            self._syncs.append(len(self._ops))

    def note_graph_break(self) -> None:
        if not self._paused:
            self._breaks.append(len(self._ops))

    # -- GEMM records ---------------------------------------------------------
    def _record(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, node: Any, seq: int) -> None:
        shapes = extract(name, args, kwargs, out)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        dtype = dtype_name(operand_dtype(name, tensors), self.precision)
        param_operand = any(self.is_param_like(a) for a in tensors)
        if node is None or self._stack:
            self._record_forward(shapes, tensors, dtype, param_operand, node, seq)
        else:
            self._record_backward(shapes, dtype, param_operand, node)

    def _record_forward(self, shapes: list[GemmShape], tensors: list[torch.Tensor], dtype: str,
                        param_operand: bool, node: Any, seq: int) -> None:
        """A forward GEMM (``recompute`` where backward runs it again), owned by the
        innermost module running; its autograd node remembers the owner for backward."""
        owner_module = self._stack[-1] if self._stack else ROOT_INFO
        skip = self._leaf_code[-1] if self._leaf_code else None
        # where user code ran it; for containers like nn.Sequential, where it was built
        owner = Owner(owner_module, user_frame_source(skip) or owner_module.defined_at, param_operand)
        if any(t.requires_grad for t in tensors):
            self._node_owner[seq] = owner
        phase = "forward" if node is None else "recompute"
        softmax_in = self._softmaxed and any(self.is_softmaxed(a) for a in tensors)
        for s in shapes:
            self._shapes.append(ShapeRow(s, phase, owner, "after_softmax" if softmax_in else s.role, dtype))

    def _record_backward(self, shapes: list[GemmShape], dtype: str, param_operand: bool, node: Any) -> None:
        """A backward GEMM, owned by its forward's owner; a weight gradient where the
        forward read a parameter and this GEMM does not."""
        owner = self._node_owner.get(node._sequence_nr())
        for s in shapes:
            self._shapes.append(ShapeRow(s, _grad_phase(s, param_operand, owner), owner, s.role, dtype))


def _grad_phase(s: GemmShape, param_operand: bool, owner: Owner | None) -> str:
    if s.part in ("grad_input", "grad_weight"):
        return s.part
    if param_operand or owner is None or not owner.param_operand:
        return "grad_input"
    return "grad_weight"


#: the op a batch norm in eval mode is (running statistics: one pointwise pass)
INFERENCE_BATCH_NORM = "_native_batch_norm_legit_no_training"


def _inference_batch_norm(name: str, args: tuple[Any, ...]) -> str:
    """``native_batch_norm`` called with ``training=False`` (an eval-mode BatchNorm on
    the CPU trace) as the op CUDA runs for it: a pointwise normalisation with the
    running statistics, not the statistics kernels of training."""
    training = args[5] if len(args) > 5 else True
    return INFERENCE_BATCH_NORM if name == "native_batch_norm" and training is False else name


def _stream_class(name: str, gemms: int) -> Any:
    """The op's kernel class in the op stream (None for an op that launches none)."""
    if gemms:
        return "attention" if name.startswith("fused_attention") else "gemm"
    return kernel_class(name)


class RecordingFakeMode(FakeTensorMode):
    """The FakeTensorMode shapelint builds models under: while a recorder is set,
    it sees each top-level aten op once, with no second dispatch mode on the stack
    (half the Python dispatch cost of stacking one)."""

    def __init__(self) -> None:
        super().__init__(allow_non_fake_inputs=True)
        self.recorder: Recorder | None = None
        self._depth = 0
        #: the values read on the host, answered (:mod:`shapelint.capture.host_reads`)
        self.host_reads = HostReads()
        self.host_reads.on_read = self._host_read

    def _host_read(self) -> None:
        if self.recorder is not None:
            self.recorder.note_host_sync()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def, override]
        kwargs = kwargs or {}
        self._depth += 1
        try:
            out = self.host_reads.dispatch(func, types, args, kwargs, super().__torch_dispatch__)
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
    if rec is not None:
        rec.note_host_sync()


def note_graph_break() -> None:
    """Under torch.compile, dynamo would end the graph here and start another (the
    loader knows where; the tracer does not run dynamo): a tensor made before it reaches
    the next graph as an input, in the layout it was made in."""
    rec = _recorder.get()
    if rec is not None:
        rec.note_graph_break()


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
