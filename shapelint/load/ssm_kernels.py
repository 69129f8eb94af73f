"""Stand-ins for the fused SSM kernels a GPU step runs (Mamba's selective scan and
causal conv1d), so that the CPU trace takes transformers' fast path.

Transformers picks each SSM kernel when its modeling module is imported
(``integrations/hub_kernels.py``, ``use_kernel_func_from_hub_with_fallback``): from
``mamba_ssm`` / ``causal_conv1d`` where they import, else its reference PyTorch code.
Without them (the CPU), a Mamba mixer runs a recurrent loop: one tiny GEMM per token
per layer (Falcon-Mamba-7B at 8x1024: 197,571 GEMM records, 204 s of tracing, an
estimated 752 s step of a path no GPU step runs). Where ``mamba_ssm`` is installed, a
training step runs ``mamba_inner_fn``: causal conv1d, the x/dt projections, one fused
selective-scan kernel, the output projection.

:func:`install` puts modules of shapelint's own in ``sys.modules`` under those names
before the modeling module is imported (the lint runs in a child process, so nothing
leaks into the user's). Their functions run the GEMMs around the kernels as
``mamba_ssm`` runs them (``F.linear``, a matmul: recorded and priced like any GEMM) and
each kernel as one op of shapelint's own (``torch.ops.shapelint.selective_scan``,
``causal_conv1d`` and their backwards) whose fake kernels return the tensors the CUDA
kernels read and write: the step model prices them by those bytes
(``shapelint.physics.kernels.SCAN``). No per-token record is made, and the report
says so (``shapelint.physics.kernels.SCAN_NOTE``).

Covered: ``mamba_inner_fn``, ``selective_scan_fn`` and ``causal_conv1d_fn`` (Mamba,
Falcon-Mamba, Jamba). Mamba2's chunked SSD (``mamba_split_conv1d_scan_combined``) is
left to transformers' chunked torch path, which has no per-token loop.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import math
import sys
import types
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensor

#: the modules transformers imports the kernels from (``_KERNELS_INTERNAL_PATH_MAPPINGS``)
PACKAGES = ("mamba_ssm", "causal_conv1d")
#: tokens one selective-scan block covers (``kNThreads * kNItems`` in mamba_ssm's
#: ``selective_scan_fwd_kernel.cuh``): the forward keeps one state per chunk for the backward
SCAN_CHUNK = 2048


# -- the kernels, as ops of shapelint's own ----------------------------------------------


@torch.library.custom_op("shapelint::causal_conv1d", mutates_args=())
def _conv(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """causal_conv1d_fwd: x [B, D, L], weight [D, W]; SiLU fused."""
    return F.silu(F.conv1d(x, weight.unsqueeze(1), bias, padding=weight.shape[-1] - 1, groups=x.shape[1])
                  [..., :x.shape[-1]])


@_conv.register_fake
def _conv_fake(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("shapelint::causal_conv1d_backward", mutates_args=())
def _conv_bwd(x: Tensor, weight: Tensor, dout: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """causal_conv1d_bwd: reads x, the weight and dout; writes dx, dweight, dbias."""
    raise NotImplementedError("shapelint's causal_conv1d backward runs on fake tensors only")


@_conv_bwd.register_fake
def _conv_bwd_fake(x: Tensor, weight: Tensor, dout: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return (torch.empty_like(x), torch.empty_like(weight, dtype=torch.float32),
            weight.new_empty(weight.shape[0], dtype=torch.float32))


def _conv_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[0], inputs[1])
    ctx.has_bias = inputs[2] is not None


def _conv_backward(ctx: Any, dout: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
    x, weight = ctx.saved_tensors
    dx, dw, db = torch.ops.shapelint.causal_conv1d_backward(x, weight, dout)
    return dx, dw.to(weight.dtype), db if ctx.has_bias else None


_conv.register_autograd(_conv_backward, setup_context=_conv_setup)


@torch.library.custom_op("shapelint::selective_scan", mutates_args=())
def _scan(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None,
          z: Tensor | None) -> tuple[Tensor, Tensor]:
    """selective_scan_fwd: u, delta, z [B, D, L], A [D, N], B and C [B, N, L]; writes the
    (gated) output and the running state at each chunk's end, for the backward."""
    raise NotImplementedError("shapelint's selective scan runs on fake tensors only")


def _states(u: Tensor, A: Tensor) -> Tensor:
    batch, dim, length = u.shape
    return u.new_empty(batch, dim, math.ceil(length / SCAN_CHUNK), 2 * A.shape[-1], dtype=torch.float32)


@_scan.register_fake
def _scan_fake(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None,
               z: Tensor | None) -> tuple[Tensor, Tensor]:
    return torch.empty_like(u), _states(u, A)


@torch.library.custom_op("shapelint::selective_scan_backward", mutates_args=())
def _scan_bwd(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None, z: Tensor | None,
              states: Tensor, dout: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """selective_scan_bwd: recomputes the states from the chunk states and reads what the
    forward read and dout; writes du, ddelta, dA, dB, dC, dD and (gated) dz."""
    raise NotImplementedError("shapelint's selective scan runs on fake tensors only")


@_scan_bwd.register_fake
def _scan_bwd_fake(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None,
                   z: Tensor | None, states: Tensor, dout: Tensor
                   ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    dz = torch.empty_like(z) if z is not None else u.new_empty(0)
    dD = torch.empty_like(D, dtype=torch.float32) if D is not None else u.new_empty(0, dtype=torch.float32)
    return (torch.empty_like(u), torch.empty_like(delta), torch.empty_like(A, dtype=torch.float32),
            torch.empty_like(B, dtype=torch.float32), torch.empty_like(C, dtype=torch.float32), dD, dz)


def _scan_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    u, delta, A, B, C, D, z = inputs
    ctx.save_for_backward(u, delta, A, B, C, D, z, output[1])


def _scan_backward(ctx: Any, dout: Tensor, _dstates: Any) -> tuple[Tensor | None, ...]:
    u, delta, A, B, C, D, z, states = ctx.saved_tensors
    du, ddelta, dA, dB, dC, dD, dz = torch.ops.shapelint.selective_scan_backward(u, delta, A, B, C, D, z, states,
                                                                                 dout)
    return (du, ddelta, dA, dB.to(B.dtype), dC.to(C.dtype), dD if D is not None else None,
            dz if z is not None else None)


_scan.register_autograd(_scan_backward, setup_context=_scan_setup)


@torch.library.custom_op("shapelint::rms_norm", mutates_args=())
def _norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """mamba_ssm's ``rms_norm_forward`` (Triton): reads x and the weight, writes y."""
    return F.rms_norm(x, (x.shape[-1],), weight.to(x.dtype), eps)


@_norm.register_fake
def _norm_fake(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("shapelint::rms_norm_backward", mutates_args=())
def _norm_bwd(x: Tensor, weight: Tensor, dy: Tensor) -> tuple[Tensor, Tensor]:
    """its backward: reads x, the weight and dy; writes dx and dweight."""
    raise NotImplementedError("shapelint's rms_norm backward runs on fake tensors only")


@_norm_bwd.register_fake
def _norm_bwd_fake(x: Tensor, weight: Tensor, dy: Tensor) -> tuple[Tensor, Tensor]:
    return torch.empty_like(x), torch.empty_like(weight)


def _norm_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[0], inputs[1])


def _norm_backward(ctx: Any, dy: Tensor) -> tuple[Tensor, Tensor, None]:
    x, weight = ctx.saved_tensors
    dx, dw = torch.ops.shapelint.rms_norm_backward(x, weight, dy)
    return dx, dw, None


_norm.register_autograd(_norm_backward, setup_context=_norm_setup)


# -- on real tensors (--verify --step after a lint in the same process) ------------------

#: the real packages' modules where they are installed (a GPU machine), by stand-in name
_REAL: dict[str, types.ModuleType] = {}


def _fake(*tensors: Any) -> bool:
    return any(isinstance(t, FakeTensor) or (isinstance(t, Tensor) and t.is_meta) for t in tensors)


def _real(name: str, func: str) -> Any:
    return getattr(_REAL.get(name), func, None)


def _reference_conv(x: Tensor, weight: Tensor, bias: Tensor | None, activation: str | None) -> Tensor:
    out = F.conv1d(x, weight.unsqueeze(1), bias, padding=weight.shape[-1] - 1, groups=x.shape[1])[..., :x.shape[-1]]
    return F.silu(out) if activation in ("silu", "swish") else out


def _reference_scan(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None, z: Tensor | None,
                    delta_bias: Tensor | None, softplus: bool) -> tuple[Tensor, Tensor]:
    """The selective scan's recurrence in plain torch, for real tensors where
    ``mamba_ssm`` is not installed: (output, last state)."""
    delta = delta.float() + (delta_bias.float()[:, None] if delta_bias is not None else 0.0)
    delta = F.softplus(delta) if softplus else delta
    decay = torch.exp(torch.einsum("bdl,dn->bdln", delta, A.float()))
    push = torch.einsum("bdl,bnl,bdl->bdln", delta, B.float(), u.float())
    state = u.new_zeros(u.shape[0], u.shape[1], A.shape[-1], dtype=torch.float32)
    ys = []
    for i in range(u.shape[-1]):
        state = decay[:, :, i] * state + push[:, :, i]
        ys.append(torch.einsum("bdn,bn->bd", state, C[:, :, i].float()))
    y = torch.stack(ys, dim=-1)
    y = y + u.float() * D.float()[:, None] if D is not None else y
    y = y * F.silu(z.float()) if z is not None else y
    return y.to(u.dtype), state


# -- the functions transformers calls ----------------------------------------------------


def _weight_2d(w: Tensor) -> Tensor:
    return w.squeeze(1) if w.dim() == 3 else w


def causal_conv1d_fn(x: Tensor, weight: Tensor, bias: Tensor | None = None, seq_idx: Tensor | None = None,
                     initial_states: Tensor | None = None, return_final_states: bool = False,
                     final_states_out: Tensor | None = None, activation: str | None = None) -> Any:
    """``causal_conv1d.causal_conv1d_fn``: one fused conv + SiLU kernel."""
    if not _fake(x, weight):
        real = _real("causal_conv1d", "causal_conv1d_fn")
        if real is not None:
            return real(x, weight, bias, seq_idx, initial_states, return_final_states, final_states_out, activation)
        return _reference_conv(x, _weight_2d(weight), bias, activation)
    out = torch.ops.shapelint.causal_conv1d(x, _weight_2d(weight), bias)
    if return_final_states:
        return out, x.new_empty(x.shape[0], x.shape[1], weight.shape[-1] - 1)
    return out


def selective_scan_fn(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None = None,
                      z: Tensor | None = None, delta_bias: Tensor | None = None, delta_softplus: bool = False,
                      return_last_state: bool = False) -> Any:
    """``mamba_ssm``'s ``selective_scan_fn``: one fused scan kernel (and its backward)."""
    if not _fake(u, delta):
        real = _real("mamba_ssm.ops.selective_scan_interface", "selective_scan_fn")
        if real is not None:
            return real(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state)
        y, last = _reference_scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus)
        return (y, last) if return_last_state else y
    out, states = torch.ops.shapelint.selective_scan(u, delta, A, B, C, D, z)  # the kernel adds delta_bias itself
    if return_last_state:
        return out, states[:, :, -1, : A.shape[-1]]
    return out


def _rms(x: Tensor, weight: Tensor | None, eps: float) -> Tensor:
    """mamba_ssm's fused RMS norm of B, C and delta (one Triton kernel each way)."""
    return x if weight is None else torch.ops.shapelint.rms_norm(x, weight, eps)


def mamba_inner_fn(xz: Tensor, conv1d_weight: Tensor, conv1d_bias: Tensor | None, x_proj_weight: Tensor,
                   delta_proj_weight: Tensor, out_proj_weight: Tensor, out_proj_bias: Tensor | None, A: Tensor,
                   B: Tensor | None = None, C: Tensor | None = None, D: Tensor | None = None,
                   delta_bias: Tensor | None = None, B_proj_bias: Tensor | None = None,
                   C_proj_bias: Tensor | None = None, delta_softplus: bool = True, checkpoint_lvl: int = 1,
                   b_rms_weight: Tensor | None = None, c_rms_weight: Tensor | None = None,
                   dt_rms_weight: Tensor | None = None, b_c_dt_rms_eps: float = 1e-6) -> Tensor | None:
    """``mamba_ssm``'s ``MambaInnerFn`` as a training step runs it: causal conv1d, the
    x projection over every token, delta = dt_proj_weight @ dtᵀ, the fused scan (gated
    by z), the output projection; autograd gives the backward's GEMMs and the kernels'
    backward ops. On real tensors: the real package's, or None (transformers then runs
    its reference path, as it does without ``mamba_ssm``)."""
    if not _fake(xz):
        real = _real("mamba_ssm.ops.selective_scan_interface", "mamba_inner_fn")
        return real(xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight, out_proj_weight, out_proj_bias,
                    A, B, C, D, delta_bias, B_proj_bias, C_proj_bias, delta_softplus, checkpoint_lvl,
                    b_rms_weight, c_rms_weight, dt_rms_weight, b_c_dt_rms_eps) if real is not None else None
    batch, _, length = xz.shape
    rank, state = delta_proj_weight.shape[1], A.shape[-1]
    x, z = xz.chunk(2, dim=1)
    conv = torch.ops.shapelint.causal_conv1d(x, _weight_2d(conv1d_weight), conv1d_bias)
    x_dbl = F.linear(conv.transpose(1, 2).reshape(batch * length, -1), x_proj_weight)
    delta = delta_proj_weight @ x_dbl[:, :rank].t()  # [D, B·L]
    if dt_rms_weight is not None:  # over the channels of each token, as mamba_ssm does
        delta = _rms(delta.t(), dt_rms_weight, b_c_dt_rms_eps).t()
    delta = delta.view(-1, batch, length).permute(1, 0, 2)
    B = _rms(x_dbl[:, rank:rank + state], b_rms_weight, b_c_dt_rms_eps)
    C = _rms(x_dbl[:, -state:], c_rms_weight, b_c_dt_rms_eps)
    B = B.reshape(batch, length, state).transpose(1, 2).contiguous()
    C = C.reshape(batch, length, state).transpose(1, 2).contiguous()
    out, _ = torch.ops.shapelint.selective_scan(conv, delta.contiguous(), A, B, C, D, z)
    return F.linear(out.transpose(1, 2), out_proj_weight, out_proj_bias)


# -- the modules ---------------------------------------------------------------------------


def _module(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name, "shapelint's stand-in for the CUDA package of this name (fake tensors only)")
    mod.__dict__.update(attrs)
    # a spec, so that importlib.util.find_spec (transformers' availability checks) answers
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    mod.__shapelint_stand_in__ = True  # type: ignore[attr-defined]
    return mod


def stand_ins() -> dict[str, types.ModuleType]:
    """The modules :func:`install` puts in ``sys.modules``, by name."""
    interface = _module("mamba_ssm.ops.selective_scan_interface", mamba_inner_fn=mamba_inner_fn,
                        selective_scan_fn=selective_scan_fn)
    ops = _module("mamba_ssm.ops", selective_scan_interface=interface)
    mamba = _module("mamba_ssm", ops=ops)
    conv = _module("causal_conv1d", causal_conv1d_fn=causal_conv1d_fn)
    return {"mamba_ssm": mamba, "mamba_ssm.ops": ops, "mamba_ssm.ops.selective_scan_interface": interface,
            "causal_conv1d": conv}


def install() -> bool:
    """Put the stand-ins in ``sys.modules`` (before transformers imports a modeling
    module: it picks its kernels then), in place of any real ``mamba_ssm``, whose CUDA
    kernels cannot run on the trace's fake CPU tensors. True if they are in place."""
    if getattr(sys.modules.get("mamba_ssm"), "__shapelint_stand_in__", False):
        return True
    for name in ("mamba_ssm.ops.selective_scan_interface", "causal_conv1d"):
        try:  # a GPU machine's real package, for real tensors
            _REAL[name] = importlib.import_module(name)
        except Exception:  # noqa: BLE001, S112 - not installed (or broken): the reference path
            continue
    # every module of the real packages goes, not only the four the stand-ins replace: a
    # cached real ``mamba_ssm.ops.triton.ssd_combined`` would be imported by transformers'
    # kernel lookup and run Triton kernels on the trace's fake tensors
    for name in [n for n in sys.modules if n.split(".", 1)[0] in ("mamba_ssm", "causal_conv1d")]:
        del sys.modules[name]
    sys.modules.update(stand_ins())
    return True


__all__ = ["PACKAGES", "SCAN_CHUNK", "causal_conv1d_fn", "install", "mamba_inner_fn", "selective_scan_fn",
           "stand_ins"]
