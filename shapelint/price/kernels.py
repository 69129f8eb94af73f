"""The price of one kernel of the step that is not a plain GEMM: a memory-bound op, the
optimizer's launches, and an attention op (``shapelint.price.step`` adds them up).

A memory-bound kernel moves its bytes at a fraction of the datasheet bandwidth that
depends on its class (the profile's ``step`` table), and never takes less than the
shortest kernel (``min_kernel_us``). The optimizer runs ``multi_tensor_apply``
launches. An attention op is its GEMMs on the kernel PyTorch picks
(``shapelint.physics.attention``) at that kernel's rates (``shapelint.price.gemm``: under
torch.compile's mask, the kernel that takes the masked call), plus dropout, flash's copies
of a padded head dimension and, backward, the expanded gradient of a position bias that
needs one; PyTorch's math kernel is unfused fp32 GEMMs and softmax passes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Literal

from shapelint.hardware import Hardware
from shapelint.model.records import Gemm, Op, Work
from shapelint.physics.attention import FLASH_PAD_COPIES, FLASH_PAD_TO, bias_grad_bytes, head_dim, math_kernel
from shapelint.physics.conv_kernels import BATCH_NORM
from shapelint.physics.kernels import clone_bytes, launches, warp_softmax
from shapelint.price.batch_norm import batch_norm_ms
from shapelint.price.gemm import CAUSAL_WORK, fused_dropout_ms, gemm_ms, mask_efficiency, total_ms

#: how the step runs: eagerly, or as torch.compile (Inductor, default mode) runs it
Mode = Literal["eager", "compile"]
MODES: tuple[Mode, ...] = ("eager", "compile")

#: passes over each parameter's bytes an optimizer step makes (reads + writes):
#: AdamW reads param, grad, exp_avg, exp_avg_sq and writes param, exp_avg, exp_avg_sq
OPTIMIZER_PASSES: dict[str, int] = {"adamw": 7, "adam": 7, "sgd": 3, "none": 0}
#: multi_tensor_apply (aten/src/ATen/native/cuda/MultiTensorApply.cuh): tensors per
#: launch at depth 4, elements per chunk, chunks (blocks) per launch
MULTI_TENSOR_TENSORS = 36
MULTI_TENSOR_CHUNK = 65536
MULTI_TENSOR_BLOCKS = 320


def memory_kernel_ms(nbytes: float, efficiency: float, hw: Hardware) -> float:
    """One memory-bound kernel moving ``nbytes`` at ``efficiency`` of the datasheet bandwidth."""
    seconds = nbytes / (hw.memory_bandwidth_gbps * 1e9 * efficiency)
    return 1e3 * max(seconds, hw.step.min_kernel_us * 1e-6)


def op_ms(op: Op, hw: Hardware) -> float:
    """An eager memory-bound op (not a GEMM or attention). A batch norm runs PyTorch's
    batch-norm kernels of its activation's layout and shape (``shapelint.price.
    batch_norm``; by its bytes at one rate per layout where its shape is unknown), not a
    row reduction's. A softmax, forward or backward, whose rows fit one warp
    (``shapelint.physics.kernels.warp_softmax``) streams once at the pointwise rate, as
    PyTorch's ``softmax_warp_forward`` and ``softmax_warp_backward`` ran (H100: 287 µs
    for 804 MB and 397 µs for 1208 MB, 0.84 and 0.91 of the bandwidth,
    ``benchmarks/attention_finding_profile.py``); larger rows take the block kernel's
    row-reduction rate."""
    s = hw.step
    if op.name in BATCH_NORM:
        by_shape = batch_norm_ms(op, hw)
        if by_shape is not None:
            return by_shape
        eff = s.batch_norm_channels_last_efficiency if op.channels_last else s.batch_norm_nchw_efficiency
    elif op.kind == "reduction" and warp_softmax(op.name, op.row, op.element_bytes):
        eff = s.elementwise_efficiency  # a warp per row, the row in registers: one streaming pass
    elif op.kind == "reduction":
        eff = s.reduction_efficiency
    elif op.kind in ("copy", "pointwise") and op.cast_offset:
        return cast_offset_ms(op, hw)
    elif op.kind in ("copy", "pointwise") and (op.strided or op.coalesced):
        eff = _unvectorised_efficiency(op, hw)
    else:
        eff = s.elementwise_efficiency
    return memory_kernel_ms(op.bytes, eff, hw) + clone_ms(op, hw)


def cast_offset_ms(op: Op, hw: Hardware) -> float:
    """A cast off one contiguous run (``Op.cast_offset``: the offset-calculator kernel
    computing each operand's offset and casting each element it loads and stores): bound
    by the elements it iterates over, whatever their width (``cast_offset_element_ps``
    each: on an H100 bf16 scores plus a broadcast fp32 mask took about the same time into
    a bf16 output as into an fp32 one), or by its bytes at ``cast_offset_efficiency``
    where it moves more (two full-size operands, as q_norm's gradient beside the
    transposed heads), whichever is longer."""
    s = hw.step
    return max(memory_kernel_ms(op.bytes, s.cast_offset_efficiency, hw), 1e-9 * op.numel * s.cast_offset_element_ps)


def clone_ms(op: Op, hw: Hardware) -> float:
    """The clone an out-of-place op runs before it works in place (``shapelint.physics.
    kernels.CLONE_FIRST``: ``masked_fill``): what it writes, read and written once more
    by a contiguous copy at the copy rate; 0 for any other op."""
    moved = clone_bytes(op.name, sum(n for _, n in op.writes))
    return memory_kernel_ms(moved, hw.step.elementwise_efficiency, hw) if moved else 0.0


def eager_launches(op: Op) -> int:
    """Kernels an eager copy or pointwise op launches (``shapelint.physics.kernels.launches``:
    two where it clones first)."""
    return launches(op.name)


def _unvectorised_efficiency(op: Op, hw: Hardware) -> float:
    """A copy or pointwise op off TensorIterator's vectorised path
    (``shapelint.capture.op_traffic.stream_access``) but a cast off one contiguous run
    (:func:`cast_offset_ms`): strided; a contiguous cast (``unrolled_elementwise_kernel``);
    coalesced, by the width of its elements (the kernel loads one element a thread at a
    time: 2-byte elements run at the strided rate, which calibrate measures on a bf16
    copy of this path)."""
    s = hw.step
    if op.strided:
        return s.strided_copy_efficiency
    if op.cast:
        return s.cast_efficiency
    return s.coalesced_efficiency if op.element_bytes >= 4 else s.strided_copy_efficiency


def work_ms(work: Work, hw: Hardware) -> float:
    """GEMMs, plus memory traffic streaming at the profile's copy bandwidth, plus ops of
    the step each priced as the eager step prices it."""
    return total_ms(work.gemms, hw) + 1e3 * work.traffic_bytes / hw.bandwidth + sum(op_ms(op, hw) for op in work.ops)


def optimizer_ms(params: Sequence[tuple[int, int]], optimizer: str, hw: Hardware) -> tuple[float, int]:
    """(time, launches) of the optimizer step over ``params``."""
    passes = OPTIMIZER_PASSES[optimizer]
    if not passes or not params:
        return 0.0, 0
    nbytes = passes * sum(n * b for n, b in params)
    chunks = sum(math.ceil(n / MULTI_TENSOR_CHUNK) for n, _ in params)
    launches = max(math.ceil(len(params) / MULTI_TENSOR_TENSORS), math.ceil(chunks / MULTI_TENSOR_BLOCKS))
    seconds = nbytes / (hw.memory_bandwidth_gbps * 1e9 * hw.step.optimizer_efficiency)
    return 1e3 * seconds, launches


# -- attention ----------------------------------------------------------------------------


def attention_ms(call: Sequence[Gemm], hw: Hardware, mode: Mode,
                 times: Mapping[int, float] | None = None) -> tuple[float, int]:
    """(time, kernels) of one attention op of the step: ``call`` is the GEMMs of one
    kernel (the forward's, or the backward's), plus, on flash with a head dimension it
    pads, the copies in and out of the padded layout. ``times`` overrides GEMMs' times
    (a finding's after-times, as a fused kernel runs them eager: under compile they are
    taken to run fused with the mask, where transformers gives one)."""
    times = times or {}
    extra = dict(call[0].extra)
    masked = mode == "compile" and "compiled" in extra
    kernel = extra.get("compiled") if masked else extra.get("kernel")
    changed = any(g.index in times for g in call)
    if kernel == "math" and not changed:
        work = math_kernel(call, backward_dtype=call[0].dtype if mode == "compile" else None)
        return work_ms(work, hw), len(work.gemms) + 1
    ms = _fused_kernel_ms(call, hw, kernel if masked else None, times)
    bias_grad = bias_grad_bytes(_scores(call))
    if bias_grad and any(g.phase in ("grad_input", "grad_weight") for g in call):
        ms += memory_kernel_ms(bias_grad, hw.step.elementwise_efficiency, hw)  # the bias's gradient, expanded
    # a finding on these GEMMs fixes the head dimension: no copies after it
    pad_ms = flash_pad_ms(_scores(call), hw) if kernel == "flash" and not changed else None
    if pad_ms is not None:
        return ms + pad_ms, 1 + FLASH_PAD_COPIES
    return ms, 1


def _scores(call: Sequence[Gemm]) -> Gemm:
    """The GEMM of a fused attention call that computes the scores (QKᵀ)."""
    return next((g for g in call if g.role == "attn_scores"), call[0])


def _fused_kernel_ms(call: Sequence[Gemm], hw: Hardware, masked: object, times: Mapping[int, float]) -> float:
    """A fused attention kernel: its GEMMs, and its dropout where it applies one
    (``masked``: the kernel that runs the call under torch.compile's mask; None eager)."""
    extra = dict(call[0].extra)
    causal = bool(extra.get("is_causal"))
    ms = sum(_attention_gemm_ms(g, hw, masked, causal, times) for g in call)
    if extra.get("dropout"):
        ms += fused_dropout_ms(_scores(call), causal and not masked, hw, masked)
    return ms


def _attention_gemm_ms(g: Gemm, hw: Hardware, masked: object, causal: bool, times: Mapping[int, float]) -> float:
    """One GEMM of a fused attention kernel (``causal``: the call skips the tiles above
    the diagonal eagerly; ``masked``: the kernel under torch.compile's mask, None eager):
    its after-time where a finding gives one (an eager time, so under a mask every tile
    at the masked rate), else its own time (under a mask: every tile, no causal skipping,
    on that kernel at its masked rate)."""
    if g.index in times:
        if not masked:
            return times[g.index]
        return times[g.index] / ((CAUSAL_WORK if causal else 1.0) * mask_efficiency(g, masked, hw))
    if masked:
        full = replace(g, extra=tuple((k, False if k == "is_causal" else masked if k == "kernel" else v)
                                      for k, v in g.extra))
        return gemm_ms(full, hw) / mask_efficiency(g, masked, hw)
    return gemm_ms(g, hw)


def flash_pad_ms(scores: Gemm, hw: Hardware) -> float | None:
    """Flash's copies into and out of a head dimension padded to ``FLASH_PAD_TO``; None
    when the head dimension needs no padding."""
    d = head_dim(scores)
    if not d % FLASH_PAD_TO:
        return None
    padded = d + -d % FLASH_PAD_TO
    nbytes = scores.batch * scores.m * (d + padded) * scores.dtype_bytes
    return FLASH_PAD_COPIES * memory_kernel_ms(nbytes, hw.step.strided_copy_efficiency, hw)


__all__ = ["MODES", "OPTIMIZER_PASSES", "Mode", "attention_ms", "flash_pad_ms", "memory_kernel_ms",
           "cast_offset_ms", "clone_ms", "eager_launches", "op_ms", "optimizer_ms", "work_ms"]
