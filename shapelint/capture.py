"""Capture: run a forward (and backward) pass on fake tensors and record every GEMM.

The FakeTensorMode models are built under (``RecordingFakeMode``; a plain
``TorchDispatchMode`` for other tensors) hands each aten op, below autograd, to a
recorder. Forward ops are tied to the innermost module running (global forward
hooks keep a module stack); each autograd node created in forward gets that owner
under its sequence number, so a backward op is tied to its forward through
``torch._C._current_autograd_node()``. Forward ops that run while backward does
(activation checkpointing) are ``recompute``. GEMM shapes come from
``shapelint.gemm_shapes`` only.
"""

from __future__ import annotations

import contextlib
import os
import sys
import sysconfig
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from shapelint.errors import ShapelintError
from shapelint.gemm_shapes import GEMM_OPS, GemmShape, extract
from shapelint.records import Gemm, Source

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

# what the recorder does with an op, decided once per op overload
_IGNORED, _GEMM, _VIEW, _SOFTMAX_OP, _OTHER = range(5)


def _op_kind(func: Any) -> int:
    if func.namespace != "aten":
        return _IGNORED
    name = func.overloadpacket.__name__
    if name in GEMM_OPS:
        return _GEMM
    if name in _VIEW_LIKE:
        return _VIEW
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


@dataclass
class Capture:
    """What capture hands to the rules: the GEMM records in execution order."""

    gemms: list[Gemm]
    training: bool
    precision: str
    tokens: int | None = None

    @property
    def forward(self) -> int:
        return sum(1 for g in self.gemms if g.phase in ("forward", "recompute"))

    @property
    def backward(self) -> int:
        return sum(1 for g in self.gemms if g.phase in ("grad_input", "grad_weight"))


_SHAPELINT_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
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
            return Source(_display_path(filename), frame.f_lineno)
        frame = frame.f_back
    return None


def _display_path(filename: str) -> str:
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel


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
        if kind == _OTHER and not self.softmaxed:
            return
        outs = out if isinstance(out, (tuple, list)) else (out,)
        tensors = [o for o in outs if isinstance(o, torch.Tensor)]
        if not tensors or not args:
            return
        if kind == _VIEW and self._has(self.param_like, args[0]):
            for o in tensors:
                self._mark(self.param_like, o)
        if kind == _SOFTMAX_OP or self.softmaxed and any(self._has(self.softmaxed, a) for a in args):
            for o in tensors:
                self._mark(self.softmaxed, o)

    # -- every op ----------------------------------------------------------
    def on_op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        kind = self._kinds.get(func)
        if kind is None:
            kind = self._kinds[func] = _op_kind(func)
        if kind == _IGNORED:
            return
        if kind == _GEMM:
            node = torch._C._current_autograd_node()
            # the autograd node of this op (if it made one) took the last sequence number
            seq = torch._C._autograd._get_sequence_nr() - 1
            name = func.overloadpacket.__name__
            self._record(name, args, kwargs, out, node, seq, node is None or bool(self.stack))
        else:
            self._propagate(kind, args, out)

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


@contextlib.contextmanager
def _recording(rec: _Recorder, model: torch.nn.Module) -> Iterator[None]:
    mode = next((getattr(p, "fake_mode", None) for p in model.parameters()), None)
    if isinstance(mode, RecordingFakeMode):
        mode.recorder = rec
        try:
            yield
        finally:
            mode.recorder = None
    else:
        with _RecorderMode(rec):
            yield


@contextlib.contextmanager
def fused_attention() -> Iterator[None]:
    """Run ``F.scaled_dot_product_attention`` as the fused kernel a GPU would use.

    On CPU, PyTorch falls back to the unfused math path for dropout or some masks
    (materialising the scores in fp32); on a GPU the flash / memory-efficient
    kernels take them. Dropout and the mask's values do not change any GEMM shape,
    so the fused CPU kernel with the same shapes stands in for the GPU kernel.
    (The function is swapped for the duration: a TorchFunctionMode would route
    every torch call of the step through Python.)"""
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


def _fused_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: Any = None,
                dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                enable_gqa: bool = False) -> torch.Tensor | None:
    if query.dim() != 4 or query.device.type != "cpu" or not (query.dtype == key.dtype == value.dtype):
        return None
    if query.shape[-1] != key.shape[-1] or query.shape[-1] != value.shape[-1]:
        return None
    heads, kv_heads = query.shape[-3], key.shape[-3]
    if kv_heads != heads:
        if heads % kv_heads:
            return None
        key = key.repeat_interleave(heads // kv_heads, dim=-3)
        value = value.repeat_interleave(heads // kv_heads, dim=-3)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype).masked_fill(~attn_mask, float("-inf"))
    elif attn_mask is not None:
        attn_mask = attn_mask.to(query.dtype)
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, 0.0, is_causal and attn_mask is None, attn_mask=attn_mask, scale=scale
    )[0]


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


def to_precision(model: torch.nn.Module, inputs: Any, precision: str) -> Any:
    """Put floating parameters, buffers and inputs in the dtype the GEMMs run in
    (as autocast would), keeping tied parameters tied. Returns the new inputs.
    (``Module.to`` cannot swap fake parameters, so they are replaced one by one.)"""
    dtype = PRECISIONS[precision]
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
) -> Capture:
    """Run ``model`` on ``inputs`` (fake or meta tensors, already in the compute
    dtype) forward and, when ``training``, backward with a dense gradient on every
    floating output (as a loss over the outputs gives), and record every GEMM."""
    rec = _Recorder(model, precision, defined_at or {})
    model.train(training)
    grad_ctx = contextlib.nullcontext() if training else torch.no_grad()
    try:
        with _module_hooks(rec), fused_attention(), _recording(rec, model), grad_ctx:
            out = call_model(model, inputs)
            if training:
                outs = [t for t in output_tensors(out) if t.requires_grad and t.is_floating_point()]
                if not outs:
                    raise ShapelintError(
                        "the model's output does not require grad, so there is no backward pass "
                        "to lint; freeze nothing or pass --inference"
                    )
                torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])
    except ShapelintError:
        raise
    except Exception as exc:
        raise ShapelintError(f"cannot trace the model: {_one_line(exc)}") from exc

    gemms = []
    for i, (s, phase, owner, role, dtype) in enumerate(rec.shapes):
        module = owner.module if owner else ModuleInfo("<unknown>", "", (), None)
        gemms.append(
            Gemm(
                index=i,
                op=s.op if not s.part else f"{s.op}.{s.part}",
                phase=phase,
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
                role=role,
                extra=s.extra,
            )
        )
    return Capture(gemms, training, precision)


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
