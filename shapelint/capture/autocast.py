"""CUDA autocast's precision policy, applied to the CPU trace.

Capture runs on fake CPU tensors under ``torch.autocast("cpu")``, whose op lists
differ from CUDA's. The default training step runs CUDA autocast over fp32
weights, so for the ops where the two policies disagree and it matters to what a
step computes or moves, shapelint registers AutocastCPU kernels that do what CUDA
autocast does (``aten/src/ATen/autocast_mode.cpp``, ``TORCH_LIBRARY_IMPL(aten,
AutocastCUDA, m)``, torch 2.11):

- ``_grouped_mm`` (MoE experts) is in neither CUDA list: it runs in its operands'
  dtype. Transformers casts the experts' input to the weight dtype, so over fp32
  master weights the experts run in fp32 (aten's per-group fallback,
  ``shapelint.physics.gemm_shapes.GROUPED_KERNEL_DTYPES``). PyTorch's meta kernel
  refuses the fp32 operands CUDA accepts, so shapelint registers one that takes
  them (``GROUPED_MM_META``).
- softmax, log_softmax, pow, exp, log, rsqrt, layer_norm and the other ops of the
  ``fp32`` list run in fp32: eager attention's probabilities, GPT-2's tanh-GELU
  (``pow(x, 3)`` and everything after it) and norms move twice the bytes of bf16.

Registration happens once, on first use, in a library fragment of shapelint's own.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

#: ops CUDA autocast casts to the autocast dtype and CPU autocast does not (none now:
#: ``_grouped_mm`` is not among them, whatever older shapelint assumed)
LOWER_PRECISION_OPS: tuple[str, ...] = ()
#: ops CUDA autocast runs in fp32 and CPU autocast does not (overload names)
FP32_OPS: tuple[str, ...] = (
    "_softmax", "softmax.int", "_log_softmax", "log_softmax.int", "pow.Tensor_Scalar", "pow.Tensor_Tensor",
    "exp", "expm1", "log", "log1p", "log2", "log10", "rsqrt", "reciprocal", "softplus", "layer_norm",
    "group_norm", "acos", "asin", "cosh", "sinh", "tan", "erfinv",
)

_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
_HALF = (torch.bfloat16, torch.float16)
_library: Any = None


def _op(name: str) -> Any:
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def _cast(x: Any, dtype: torch.dtype) -> Any:
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != dtype:
        return x.to(dtype)
    return x


def _lower(op: Any) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(_KEYS):
            dtype = torch.get_autocast_dtype("cpu")
            return op(*(_cast(a, dtype) for a in args), **kwargs)
    return kernel


def _fp32(op: Any) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(_KEYS):
            args = tuple(a.float() if isinstance(a, torch.Tensor) and a.dtype in _HALF else a for a in args)
            return op(*args, **kwargs)
    return kernel


def _grouped_mm_meta(mat_a: Any, mat_b: Any, offs: Any = None, bias: Any = None, out_dtype: Any = None) -> Any:
    """``_grouped_mm``'s output as CUDA gives it for any floating operands: the bf16
    grouped kernel's, or the per-group fallback's in the operands' dtype."""
    from torch._meta_registrations import _create_grouped_mm_output_tensor
    return _create_grouped_mm_output_tensor(mat_a, mat_b, offs, out_dtype or mat_a.dtype)


def _override(lib: Any, name: str, kernel: Callable[..., Any], key: str) -> None:
    """Register ``kernel`` over the one torch registered from Python for ``name`` at
    ``key``. torch 2.13's ``Library.impl`` overrides it (``allow_override``); torch 2.11
    refuses any second Python registration of an ``aten`` key ("already a kernel
    registered from python"), so there torch's record of its own is set aside first
    (the C++ dispatcher then replaces the kernel, as 2.13 does)."""
    try:
        lib.impl(name, kernel, key)
    except RuntimeError:
        registered = getattr(torch.library, "_impls", None)
        qualified = f"aten/{name}/{key}"
        if not isinstance(registered, set) or qualified not in registered:
            raise
        registered.discard(qualified)
        lib.impl(name, kernel, key)


def install() -> None:
    """Register the kernels (idempotent)."""
    global _library
    if _library is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        for name in LOWER_PRECISION_OPS:
            lib.impl(name, _lower(_op(name)), "AutocastCPU")
        for name in FP32_OPS:
            lib.impl(name, _fp32(_op(name)), "AutocastCPU")
        _override(lib, "_grouped_mm", _grouped_mm_meta, "Meta")
    _library = lib
