"""Capture: run a forward (and backward) pass on fake tensors and record every GEMM.

The FakeTensorMode models are built under (``RecordingFakeMode``; a plain
``TorchDispatchMode`` for other tensors) hands each aten op, below autograd, to a
recorder. Forward ops are tied to the innermost module running (global forward
hooks keep a module stack); each autograd node created in forward gets that owner
under its sequence number, so a backward op is tied to its forward through
``torch._C._current_autograd_node()``. Forward ops that run while backward does
(activation checkpointing) are ``recompute``. GEMM shapes come from
``shapelint.physics.gemm_shapes`` only.
"""

from __future__ import annotations

import contextlib
import os
import sys
import sysconfig
import weakref
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterator, NamedTuple, cast

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from shapelint.capture import autocast
from shapelint.capture import replay as _replay
from shapelint.capture.traceable import every_layer_runs
from shapelint.errors import ShapelintError
from shapelint.files import PACKAGE_DIR, display_path
from shapelint.model.records import Gemm, Op, Phase, Role, Source
from shapelint.physics.attention import EFFICIENT_ALIGN_BYTES, AttentionCall, compiled_call, gpu_kernel
from shapelint.physics.gemm_shapes import (
    FUSED_ATTENTION,
    FUSED_ATTENTION_BACKWARD,
    GEMM_OPS,
    GemmShape,
    extract,
)
from shapelint.physics.kernels import KernelClass, kernel_class, read_bytes

#: the compute precisions a user can train with, and the torch dtype GEMMs run in
PRECISIONS: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
    "tf32": torch.float32,
}

_DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float32: "fp32",
    torch.float64: "fp64",
    torch.int8: "int8",
    torch.float8_e4m3fn: "fp8",
    torch.float8_e5m2: "fp8",
}

#: ops whose output is the same data as (a view or a cast of) their first input
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
class _Owner:
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


@dataclass
class Capture:
    """What capture hands to the rules: the GEMM records in execution order."""

    gemms: list[Gemm]
    training: bool
    precision: str
    tokens: int | None = None
    #: every kernel-launching op of forward and backward, GEMMs and attention as markers
    ops: list[Op] = field(default_factory=list)
    #: parameter tensors that require grad: (element count, bytes per element) each
    params: tuple[tuple[int, int], ...] = ()
    #: positions in ``ops`` where an eager step's host reads a value from the GPU
    syncs: tuple[int, ...] = ()
    #: positions in ``ops`` where torch.compile's dynamo would break the graph
    breaks: tuple[int, ...] = ()

    @property
    def forward(self) -> int:
        return sum(1 for g in self.gemms if g.phase in ("forward", "recompute"))

    @property
    def backward(self) -> int:
        return sum(1 for g in self.gemms if g.phase in ("grad_input", "grad_weight"))


_SHAPELINT_DIR = str(PACKAGE_DIR) + os.sep
_SKIP_DIRS = tuple(
    os.path.normpath(p) + os.sep for p in {os.path.dirname(torch.__file__), sysconfig.get_paths()["stdlib"]}
)


#: shapelint functions that call into user code: a stack walk stops there
_BOUNDARIES: set[Any] = set()


def boundary(fn: Any) -> Any:
    """Mark ``fn`` as where shapelint calls user code (model construction, forward)."""
    _BOUNDARIES.add(fn.__code__)
    return fn


def user_frame_source(skip_code: Any = None) -> Source | None:
    """The innermost stack frame in user code (not torch, shapelint or the stdlib),
    passing over frames running ``skip_code``. None when the walk reaches the
    shapelint function that called user code: its callers are not the model."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code in _BOUNDARIES:
            return None
        filename = code.co_filename
        if (code is not skip_code and not filename.startswith("<")
                and not filename.startswith(_SKIP_DIRS + (_SHAPELINT_DIR,))):
            return Source(display_path(filename), frame.f_lineno)
        frame = frame.f_back  # type: ignore[assignment]  # the loop stops at None
    return None


def module_params(module: torch.nn.Module) -> tuple[tuple[str, int], ...]:
    """A module's integer constructor attributes (``in_features``, ``nf``...)."""
    out = []
    for name, value in vars(module).items():
        if name.startswith("_") or isinstance(value, bool):
            continue
        if isinstance(value, int):
            out.append((name, value))
        elif isinstance(value, tuple) and len(value) == 1 and isinstance(value[0], int):
            out.append((name, value[0]))
    return tuple(out)


class _Recorder:
    """Sees every aten op of the step (through :class:`RecordingFakeMode`, or
    :class:`_RecorderMode` for tensors that are not our fake ones) and keeps the GEMMs."""

    def __init__(self, root: torch.nn.Module, precision: str, defined_at: dict[int, Source]):
        self.precision = precision
        self.stack: list[ModuleInfo] = []
        # the forward code of leaf modules: a GEMM inside one is located at its call site
        self.leaf_code: list[Any] = []
        self.shapes: list[tuple[GemmShape, str, _Owner | None, str, str]] = []
        self.node_owner: dict[int, _Owner] = {}
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
        ins = _tensors(args) + _tensors(kwargs.values())
        outs = _tensors(out if isinstance(out, (tuple, list)) else (out,))
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
        dtype = dtype_name(_operand_dtype(name, tensors), self.precision)
        param_operand = any(self._has(self.param_like, a) for a in tensors)
        if in_forward:
            owner_module = self.stack[-1] if self.stack else ModuleInfo("<root>", "", (), None)
            skip = self.leaf_code[-1] if self.leaf_code else None
            # where user code ran it; for containers like nn.Sequential, where it was built
            owner = _Owner(owner_module, user_frame_source(skip) or owner_module.defined_at, param_operand)
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


def _tensors(values: Any) -> list[torch.Tensor]:
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
        self.recorder: _Recorder | None = None
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

    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.recorder.on_op(func, args, kwargs, out)
        return out


_recorder: ContextVar[_Recorder | None] = ContextVar("_recorder", default=None)


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
def _recording(rec: _Recorder, model: torch.nn.Module) -> Iterator[None]:
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
def fused_attention() -> Iterator[None]:
    """Run ``F.scaled_dot_product_attention`` as the fused kernel a GPU would run.

    Each 4-D call becomes shapelint's attention op (:data:`FUSED_ATTENTION`): the
    GEMMs of a fused kernel in the compute dtype, whatever the CPU would have run
    (its math path for dropout, masks that need a gradient, meta tensors or q/k
    head dimensions unlike v's), tagged with the kernel PyTorch picks on the GPU
    (:func:`gpu_kernel`). Under autocast its inputs are cast first, as CUDA
    autocast does. (The function is swapped for the duration: a TorchFunctionMode
    would route every torch call of the step through Python.)"""
    functional = torch.nn.functional
    original = functional.scaled_dot_product_attention

    def sdpa(*args: Any, **kwargs: Any) -> Any:
        fused = _fused_sdpa(*args, **kwargs)
        return fused if fused is not None else original(*args, **kwargs)

    functional.scaled_dot_product_attention = sdpa  # type: ignore[assignment]
    try:
        yield
    finally:
        functional.scaled_dot_product_attention = original


def _fused_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
                dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                enable_gqa: bool = False) -> torch.Tensor | None:
    """The stand-in's output, or None where PyTorch itself would raise or run the
    math path on any device (not 4-D; a mask with ``is_causal``): the caller then
    runs the original."""
    if query.dim() != 4 or (is_causal and attn_mask is not None):
        return None
    lowered = _autocast_dtype(query.device.type)
    if lowered is not None:
        query, key, value = (t.to(lowered) for t in (query, key, value))
    if not (query.dtype == key.dtype == value.dtype):
        return None
    call = attention_call(query, key, value, attn_mask, dropout_p, is_causal)
    compiled = gpu_kernel(compiled_call(call, is_causal)) if attn_mask is None and compile_builds_mask.get() else ""
    return torch.ops.shapelint.fused_attention(query, key, value, attn_mask, is_causal, scale, gpu_kernel(call),
                                               compiled, float(dropout_p))


def _autocast_dtype(device: str) -> torch.dtype | None:
    """The dtype autocast runs attention in (CUDA autocast lists SDPA as a
    lower-precision op), or None outside autocast."""
    if device in ("cpu", "meta") and torch.is_autocast_enabled("cpu"):
        return torch.get_autocast_dtype("cpu")
    return None


# -- the call the dispatcher sees (shapelint.physics.attention picks the kernel) ------------

#: the dtypes the cuDNN and flash kernels take (``check_dtypes_low_precision``)
_HALF = (torch.float16, torch.bfloat16)

#: set while transformers' mask code has skipped the mask of the model running
#: (``shapelint.load.loaders`` sets it): its SDPA calls without a mask get one under
#: torch.compile (``shapelint.physics.attention.compiled_call``)
compile_builds_mask: ContextVar[bool] = ContextVar("compile_builds_mask", default=False)


def attention_call(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                   dropout_p: float, is_causal: bool) -> AttentionCall:
    """What PyTorch's CUDA dispatcher reads off these tensors."""
    align = max(1, EFFICIENT_ALIGN_BYTES // q.element_size())
    aligned = all(int(t.stride()[-1]) == 1 and int(t.storage_offset()) % align == 0 for t in (q, k, v))
    return AttentionCall(
        d_qk=int(q.shape[-1]), d_v=int(v.shape[-1]), seq_q=int(q.shape[-2]), seq_k=int(k.shape[-2]),
        element_bytes=q.element_size(), half=q.dtype in _HALF, has_mask=mask is not None,
        mask_requires_grad=mask is not None and mask.requires_grad and torch.is_grad_enabled(),
        mask_broadcasts=mask is None or _mask_broadcasts(mask, q, k),
        dropout_p=float(dropout_p), is_causal=bool(is_causal),
        requires_grad=torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)),
        efficient_aligned=aligned,
        mask_unit_stride=mask is None or int(mask.shape[-1]) == 1 or int(mask.stride()[-1]) == 1,
    )


def _mask_broadcasts(mask: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> bool:
    """``check_attn_mask_shape``: 2-D, or 4-D with batch and heads full or 1; the
    last two dims full or 1."""
    if int(mask.shape[-2]) not in (int(q.shape[-2]), 1) or int(mask.shape[-1]) not in (int(k.shape[-2]), 1):
        return False
    if mask.dim() == 2:
        return True
    return mask.dim() == 4 and int(mask.shape[0]) in (1, int(q.shape[0])) and int(mask.shape[1]) in (1, int(q.shape[1]))


# -- shapelint's attention op ---------------------------------------------------------
# One op for the forward and one for the backward kernel, so that capture (and
# make_fx) see each fused kernel as one op whose GEMMs gemm_shapes lists. ``kernel``
# is the kernel PyTorch runs the call on; ``compiled`` the one it runs under
# torch.compile where that call gets a mask there ("" where it is the same call);
# ``dropout_p`` the attention dropout the kernel applies (the stand-in drops none).

@torch.library.custom_op(f"shapelint::{FUSED_ATTENTION}", mutates_args=())
def _attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None,
               is_causal: bool, scale: float | None, kernel: str, compiled: str = "",
               dropout_p: float = 0.0) -> torch.Tensor:
    """Fused attention as ``kernel`` runs it on the GPU; on real tensors, SDPA."""
    return torch.ops.aten.scaled_dot_product_attention(
        query, key, value, attn_mask, 0.0, is_causal, scale=scale, enable_gqa=True)


@_attention.register_fake
def _attention_fake(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None,
                    is_causal: bool, scale: float | None, kernel: str, compiled: str = "",
                    dropout_p: float = 0.0) -> torch.Tensor:
    b, h, t, _ = query.shape
    # the fused kernels write [B, T, H, Dv] and return it as [B, H, T, Dv]
    return query.new_empty((b, t, h, value.shape[-1])).transpose(1, 2)


@torch.library.custom_op(f"shapelint::{FUSED_ATTENTION_BACKWARD}", mutates_args=())
def _attention_backward(grad: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attn_mask: torch.Tensor | None, is_causal: bool, scale: float | None, kernel: str,
                        compiled: str = "", dropout_p: float = 0.0
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv and the mask's gradient (empty when it needs none)."""
    with torch.enable_grad():
        q, k, v = (t.detach().requires_grad_() for t in (query, key, value))
        mask = (attn_mask.detach().requires_grad_() if attn_mask is not None and _mask_needs_grad(attn_mask)
                else attn_mask)
        out = torch.ops.aten.scaled_dot_product_attention(q, k, v, mask, 0.0, is_causal, scale=scale, enable_gqa=True)
        wrt = [q, k, v] + ([mask] if mask is not None and mask.requires_grad else [])
        grads = torch.autograd.grad(out, wrt, grad)
    return grads[0], grads[1], grads[2], grads[3] if len(grads) > 3 else query.new_empty(0)


@_attention_backward.register_fake
def _attention_backward_fake(grad: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attn_mask: torch.Tensor | None, is_causal: bool, scale: float | None, kernel: str,
                             compiled: str = "", dropout_p: float = 0.0
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    dmask = (torch.empty_like(attn_mask) if attn_mask is not None and _mask_needs_grad(attn_mask)
             else query.new_empty(0))
    return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value), dmask


def _mask_needs_grad(mask: torch.Tensor | None) -> bool:
    return mask is not None and mask.is_floating_point() and mask.requires_grad


def _attention_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    query, key, value, attn_mask, *options = inputs
    ctx.save_for_backward(query, key, value, attn_mask)
    ctx.options = tuple(options)
    ctx.mask_grad = _mask_needs_grad(attn_mask)


def _attention_grad(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    query, key, value, attn_mask = ctx.saved_tensors
    dq, dk, dv, dmask = torch.ops.shapelint.fused_attention_backward(grad, query, key, value, attn_mask, *ctx.options)
    return (dq, dk, dv, dmask if ctx.mask_grad else None) + (None,) * len(ctx.options)


_attention.register_autograd(_attention_grad, setup_context=_attention_setup)


@contextlib.contextmanager
def _module_hooks(rec: _Recorder) -> Iterator[None]:
    from torch.nn.modules import module as module_mod

    pre = module_mod.register_module_forward_pre_hook(rec.push)
    post = module_mod.register_module_forward_hook(rec.pop, always_call=True)
    try:
        yield
    finally:
        pre.remove()
        post.remove()


def dtype_name(dtype: torch.dtype, precision: str) -> str:
    name = _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))
    if name == "fp32" and precision == "tf32":
        return "tf32"
    return name


def output_tensors(out: Any) -> list[torch.Tensor]:
    """Every tensor in a model's output (tensors, tuples, lists, dicts, ModelOutput)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() for t in output_tensors(v)]
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in output_tensors(v)]
    return []


#: precisions trained as mixed precision: autocast over fp32 parameters and inputs
AUTOCAST_PRECISIONS = frozenset({"bf16", "fp16"})


def loss_or_outputs(out: Any) -> list[torch.Tensor]:
    """What the step differentiates: the model's own loss where it returns one (a
    Hugging Face model given labels), else every tensor of its output."""
    loss = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.dim() == 0:
        return [loss]
    return output_tensors(out)


def to_precision(model: torch.nn.Module, inputs: Any, precision: str) -> Any:
    """Put floating parameters, buffers and inputs in the dtype the step keeps them
    in, keeping tied parameters tied, and return the new inputs: fp32 for the
    16-bit precisions (the default step: autocast over fp32 weights, which casts
    each GEMM's operands), the GEMM dtype otherwise. (``Module.to`` cannot swap
    fake parameters, so they are replaced one by one.)"""
    dtype = torch.float32 if precision in AUTOCAST_PRECISIONS else PRECISIONS[precision]
    done: dict[int, torch.nn.Parameter] = {}
    for mod in model.modules():
        for name, p in list(mod._parameters.items()):
            if p is None or not p.is_floating_point() or p.dtype == dtype:
                continue
            if id(p) not in done:
                done[id(p)] = torch.nn.Parameter(p.detach().to(dtype), requires_grad=p.requires_grad)
            mod._parameters[name] = done[id(p)]
        for name, b in list(mod._buffers.items()):
            if b is not None and b.is_floating_point() and b.dtype != dtype:
                mod._buffers[name] = b.to(dtype)
    return _cast_tree(inputs, dtype)


def _cast_tree(x: Any, dtype: torch.dtype) -> Any:
    if isinstance(x, torch.Tensor):
        if x.is_floating_point() and x.dtype != dtype:
            return x.detach().to(dtype).requires_grad_(x.requires_grad)
        return x
    if isinstance(x, dict):
        return {k: _cast_tree(v, dtype) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(_cast_tree(v, dtype) for v in x)
    return x


def split_inputs(inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Example inputs as (args, kwargs): a dict is keyword arguments, a tuple or
    list positional ones, anything else the single positional argument."""
    if isinstance(inputs, dict):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    return (inputs,), {}


@boundary
def call_model(model: torch.nn.Module, inputs: Any) -> Any:
    args, kwargs = split_inputs(inputs)
    return model(*args, **kwargs)


def capture(
    model: torch.nn.Module,
    inputs: Any,
    *,
    precision: str = "bf16",
    training: bool = True,
    defined_at: dict[int, Source] | None = None,
    replay: bool = True,
) -> Capture:
    """Run ``model`` on ``inputs`` (fake or meta tensors, already in the compute
    dtype) forward and, when ``training``, backward with a dense gradient on every
    floating output (as a loss over the outputs gives), and record every GEMM.

    With ``replay`` (training only), repeated identical layers are traced once and
    their records copied (:mod:`shapelint.capture.replay`); where that cannot be shown to give
    the records a full trace gives, the model is traced again in full."""
    if not (training and replay):
        if replay:
            _replay.STATS.reset()
        return _capture(model, inputs, precision, training, defined_at, replay=False)
    grads = _grads(model, inputs)
    try:
        return _capture(model, inputs, precision, training, defined_at, replay=True)
    except _ReplayFailed as failed:
        why = failed.why
    for t, g in grads:  # as they were: a second backward would accumulate into them
        t.grad = g
    cap = _capture(model, inputs, precision, training, defined_at, replay=False)
    _replay.STATS.replayed = 0
    _replay.STATS.fell_back = why
    return cap


class _ReplayFailed(Exception):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _grads(model: torch.nn.Module, inputs: Any) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """The gradient of every parameter and leaf input tensor that requires grad."""
    leaves = [t for t in output_tensors(inputs) if t.is_leaf and t.requires_grad]
    return [(t, t.grad) for t in [*model.parameters(), *leaves]]


def _capture(model: torch.nn.Module, inputs: Any, precision: str, training: bool,
             defined_at: dict[int, Source] | None, replay: bool) -> Capture:
    rec = _Recorder(model, precision, defined_at or {})
    model.train(training)
    replayer = _replay.Replayer(rec, model) if replay else None
    grad_ctx = contextlib.nullcontext() if training else torch.no_grad()
    try:
        with (_module_hooks(rec), fused_attention(), every_layer_runs(), _recording(rec, model), grad_ctx,
              replayer.installed() if replayer else contextlib.nullcontext()):
            with _autocast(precision):
                out = call_model(model, inputs)
            if training:
                outs = [t for t in loss_or_outputs(out) if t.requires_grad and t.is_floating_point()]
                if not outs:
                    raise ShapelintError(
                        "the model's output does not require grad, so there is no backward pass "
                        "to lint; freeze nothing or pass --inference"
                    )
                torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])
    except ShapelintError:
        if replayer is not None and replayer.used:
            raise _ReplayFailed("the traced model failed") from None
        raise
    except Exception as exc:  # noqa: BLE001 - any failure in user code is reported cleanly
        if replayer is not None and replayer.used:
            raise _ReplayFailed(f"the traced model failed: {_one_line(exc)}") from None
        raise ShapelintError(f"cannot trace the model: {_one_line(exc)}") from exc
    if replayer is not None:
        why = replayer.finish()
        if why:
            raise _ReplayFailed(why)

    gemms = []
    for i, (s, phase, owner, role, dtype) in enumerate(rec.shapes):
        module = owner.module if owner else ModuleInfo("<unknown>", "", (), None)
        gemms.append(
            Gemm(
                index=i,
                op=s.op if not s.part else f"{s.op}.{s.part}",
                phase=cast(Phase, phase),
                m=s.m,
                n=s.n,
                k=s.k,
                batch=s.batch,
                dtype=dtype,
                a=s.a,
                b=s.b,
                out=s.out,
                module=module.path,
                module_type=module.type,
                module_params=module.params,
                source=owner.source if owner else None,
                defined_at=module.defined_at,
                role=cast(Role, role),
                extra=s.extra,
            )
        )
    ops, first = [], 0
    for i, row in enumerate(rec.ops):
        indices = tuple(range(first, first + row.gemms)) if row.kclass in ("gemm", "attention") else ()
        first += len(indices)
        ops.append(Op(i, row.name, row.kclass, row.backward, row.nbytes, row.reads, row.writes, indices, row.owner,
                      row.widest, row.strided, row.numel, row.out_numel))
    params = tuple((p.numel(), p.element_size()) for p in model.parameters() if p.requires_grad)
    return Capture(gemms, training, precision, ops=ops, params=params, syncs=tuple(rec.syncs),
                   breaks=tuple(rec.breaks))


def _autocast(precision: str) -> Any:
    """Autocast to a 16-bit precision, as a mixed-precision step runs: GEMMs run in it
    whatever their inputs' dtype (an explicit ``.float()`` included)."""
    dtype = PRECISIONS[precision]
    if dtype not in (torch.bfloat16, torch.float16):
        return contextlib.nullcontext()
    autocast.install()
    return torch.autocast("cpu", dtype=dtype)


def _operand_dtype(name: str, tensors: list[torch.Tensor]) -> torch.dtype:
    """The dtype the GEMM multiplies in: its first matrix operand's (``addmm`` and
    ``baddbmm`` lead with the bias / accumulator, which may differ)."""
    if name in ("addmm", "_addmm_activation", "baddbmm") and len(tensors) > 1:
        return tensors[1].dtype
    return tensors[0].dtype if tensors else torch.float32


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
