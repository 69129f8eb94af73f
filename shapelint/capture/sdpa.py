"""Scaled dot-product attention as the GPU runs it: ``F.scaled_dot_product_attention``
becomes shapelint's fused attention op (one op forward, one backward, whose GEMMs
``shapelint.physics.gemm_shapes`` lists), tagged with the kernel PyTorch's CUDA
dispatcher picks for the call (``shapelint.physics.attention``)."""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Any, Iterator

import torch

from shapelint.capture.swap import swapped
from shapelint.physics.attention import EFFICIENT_ALIGN_BYTES, AttentionCall, compiled_call, gpu_kernel
from shapelint.physics.gemm_shapes import (
    FUSED_ATTENTION,
    FUSED_ATTENTION_BACKWARD,
)


@contextlib.contextmanager
def fused_attention() -> Iterator[None]:
    """Run ``F.scaled_dot_product_attention`` as the fused kernel a GPU would run.

    Each 4-D call becomes shapelint's attention op (:data:`FUSED_ATTENTION`): the
    GEMMs of a fused kernel in the compute dtype, whatever the CPU would have run
    (its math path for dropout, masks that need a gradient, meta tensors or q/k
    head dimensions unlike v's), tagged with the kernel PyTorch picks on the GPU
    (:func:`gpu_kernel`). Under autocast its inputs are cast first, as CUDA
    autocast does. (The function is swapped for the duration: ``shapelint.capture.swap``.)"""
    functional = torch.nn.functional
    original = functional.scaled_dot_product_attention

    def sdpa(*args: Any, **kwargs: Any) -> Any:
        fused = _fused_sdpa(*args, **kwargs)
        return fused if fused is not None else original(*args, **kwargs)

    with swapped(functional, "scaled_dot_product_attention", sdpa):
        yield


def _fused_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
                dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                enable_gqa: bool = False) -> torch.Tensor | None:
    """The stand-in's output, or None where PyTorch itself would raise or run the
    math path on any device (not 4-D; a mask with ``is_causal``): the caller then
    runs the original."""
    if query.dim() != 4 or (is_causal and attn_mask is not None):
        return None
    lowered = _autocast_dtype(query.device.type)
    if lowered is not None:  # CUDA autocast casts every floating argument, an additive mask too
        query, key, value = (t.to(lowered) for t in (query, key, value))
        if attn_mask is not None and attn_mask.is_floating_point():
            attn_mask = attn_mask.to(lowered)
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
#: (``shapelint.load.hf_model`` sets it): its SDPA calls without a mask get one under
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
    dmask = grads[3].expand(_expanded(query, key, grads[3])).contiguous() if len(grads) > 3 else query.new_empty(0)
    return grads[0], grads[1], grads[2], dmask


@_attention_backward.register_fake
def _attention_backward_fake(grad: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attn_mask: torch.Tensor | None, is_causal: bool, scale: float | None, kernel: str,
                             compiled: str = "", dropout_p: float = 0.0
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    dmask = (attn_mask.new_empty(_expanded(query, key, attn_mask)) if attn_mask is not None and _mask_needs_grad(attn_mask)
             else query.new_empty(0))
    return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value), dmask


def _mask_needs_grad(mask: torch.Tensor | None) -> bool:
    return mask is not None and mask.is_floating_point() and mask.requires_grad


def _expanded(query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor) -> tuple[int, ...]:
    """The shape the fused kernels write a mask's gradient at: [B, H, Tq, Tk], whatever
    the mask broadcasts (``_efficient_attention_backward``'s ``grad_bias``); autograd
    then sums it down to the mask's shape (a reduction the capture records)."""
    return (*query.shape[:-2], int(query.shape[-2]), int(key.shape[-2]))


def _attention_setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    query, key, value, attn_mask, *options = inputs
    ctx.save_for_backward(query, key, value, attn_mask)
    ctx.options = tuple(options)
    ctx.mask_grad = _mask_needs_grad(attn_mask)


def _attention_grad(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    query, key, value, attn_mask = ctx.saved_tensors
    dq, dk, dv, dmask = torch.ops.shapelint.fused_attention_backward(grad, query, key, value, attn_mask, *ctx.options)
    if not ctx.mask_grad:
        return (dq, dk, dv, None) + (None,) * len(ctx.options)
    return (dq, dk, dv, dmask.sum_to_size(attn_mask.shape)) + (None,) * len(ctx.options)


_attention.register_autograd(_attention_grad, setup_context=_attention_setup)
