"""A layer's call as replay compares it: its signature (every argument, and the
state that changes what a forward records), whether a call may be replayed at all
now, and the structure of what it returns."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import torch

#: a tensor's layout as replay compares it: (shape, stride, dtype, storage offset, device)
Meta = tuple[Any, ...]

#: attribute and output values replay compares by equality (a layer's fingerprint, an output's form)
PRIMITIVE = (type(None), bool, int, float, str, torch.dtype)
#: argument values a call signature compares by equality
_SIMPLE = (type(None), bool, int, float, str, torch.dtype, torch.device, torch.Size)


def meta(t: torch.Tensor) -> Meta:
    return (tuple(t.shape), tuple(t.stride()), t.dtype, int(t.storage_offset()), t.device)


class _Unsupported(Exception):
    pass


@dataclass(eq=False)
class Signature:
    """A call's arguments as compared (``key``), its tensors in order, and ``x``, the
    one input that requires grad."""

    key: Hashable
    tensors: list[torch.Tensor]
    x: torch.Tensor


def signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Signature | str:
    """The call as far as replay compares it, or why it cannot be replayed."""
    tensors: list[torch.Tensor] = []

    def walk(v: Any) -> Hashable:
        if isinstance(v, torch.Tensor):
            tensors.append(v)
            return ("T", meta(v), v.requires_grad)
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
    return Signature((key, state), tensors, x)


def same_tensors(a: Signature, b: Signature) -> bool:
    """Whether call ``a`` passes the very same tensor objects as ``b``, but for ``b``'s input."""
    return all(p is q for p, q in zip(a.tensors, b.tensors) if q is not b.x)


def substitute(v: Any, old: torch.Tensor, new: torch.Tensor) -> Any:
    """``v`` (an argument, or a tuple, list or dict of them) with ``old`` replaced by ``new``."""
    if v is old:
        return new
    if type(v) in (tuple, list):
        return type(v)(substitute(x, old, new) for x in v)
    if type(v) is dict:
        return {k: substitute(x, old, new) for k, x in v.items()}
    return v


def blocked() -> str:
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
class Form:
    """A layer's output structure: a tensor, or a tuple or list of tensors and
    primitive values (``(hidden_states, attn_weights)``, ``(hidden_states, None)``)."""

    kind: type
    items: tuple[Any, ...]

    def build(self, tensors: list[torch.Tensor]) -> Any:
        if self.kind is torch.Tensor:
            return tensors[0]
        it = iter(tensors)
        return self.kind(next(it) if v is _SLOT else v for v in self.items)


def form(out: Any) -> tuple[Form, list[torch.Tensor]] | str:
    """The output's structure and its tensors (the first is the layer's result)."""
    if isinstance(out, torch.Tensor):
        return Form(torch.Tensor, (_SLOT,)), [out]
    if type(out) in (tuple, list) and out and isinstance(out[0], torch.Tensor):
        if all(isinstance(v, (torch.Tensor, *PRIMITIVE)) for v in out):
            items = tuple(_SLOT if isinstance(v, torch.Tensor) else v for v in out)
            return Form(type(out), items), [v for v in out if isinstance(v, torch.Tensor)]
    return f"its output is a {type(out).__name__}, not a tensor or a tuple that starts with one"


@dataclass(frozen=True)
class Out:
    """One tensor of a real call's output: its serial, layout, requires_grad and
    whether the recorder took it for a softmax's output or a parameter."""

    serial: int
    meta: Meta
    requires_grad: bool
    softmaxed: bool
    param_like: bool
