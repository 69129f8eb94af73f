"""The GEMM time model: the time of one GEMM record on a GPU profile.

Per GEMM (all numbers from the profile):

    compute = flops / (peak(dtype) · alignment · tile · wave)
    memory  = min_bytes / (bandwidth · memory_efficiency · misaligned_memory_efficiency)
              (a batched GEMM: batched_memory_efficiency, and with a misaligned K
              batched_misaligned_k_efficiency)
    time    = max(compute, memory, min_gemm) + copies

- ``peak(dtype)``: the rate a large aligned GEMM reaches (measured or datasheet x
  achievable) times ``gemm_efficiency`` (typical model shapes); fp32 without TF32
  uses the CUDA-core rate, fused attention GEMMs ``attention_efficiency`` of it.
- fused attention, by the SDPA kernel PyTorch picks (the record's ``kernel``,
  ``shapelint.physics.attention``): cuDNN and flash at the fitted rate, with an additive
  mask or bias at ``bias_attention_efficiency`` of it, and ``attention_dropout_ps`` per
  score element computed per pass where it draws dropout; the memory-efficient kernel in
  bf16/fp16 at ``efficient_attention_efficiency`` of the fitted rate, with a bias (an
  additive mask, or one that needs its gradient) at ``efficient_bias_attention_efficiency``
  of that, and ``efficient_attention_dropout_ps`` per score element per pass at head
  dimension 64, in proportion to the head dimension (``fused_dropout_ms``). Flash keeps
  the fitted rate: it runs where cuDNN refuses a head dimension that is not a multiple of
  8, which ``attention_misaligned_efficiency`` prices (measured on flash against cuDNN).
  In fp32 the memory-efficient kernel keeps the fitted rate (its factors were measured in
  bf16 only).
- ``alignment``: the calibrated efficiency for the worst-aligned input and for the
  output (``shapelint.physics.alignment``) of a tensor-core GEMM (cuBLAS); separate
  calibrated factors for convolutions (cuDNN) and fused attention; 1 when all are
  16-byte aligned and for GEMMs off the tensor cores.
- ``tile``, ``wave``: ``shapelint.physics.quantization`` for the tile that wastes
  least (cuBLAS is taken to pick the best tile of the profile's list).
- ``copies``: an operand that needs a contiguous copy first (neither stride is 1)
  costs a read and a write at ``memory_efficiency``; an NCHW tensor-core convolution
  runs a transpose kernel of its own per NCHW activation (and per weight larger than
  1x1: ``shapelint.physics.conv_kernels.transposed_bytes``), each its read and write at
  ``conv_transpose_efficiency`` of the copy bandwidth plus a kernel's fixed time and
  the gap before the next (the step profile's ``min_kernel_us`` and ``kernel_gap_us``:
  small convolutions spend most of their transposes' time there). A convolution with misaligned channels runs at
  ``conv_misaligned_efficiency`` of the aligned kernel's pace, memory-bound or not.

A ``_grouped_mm`` whose operands take aten's per-group fallback (MoE experts over fp32
weights: ``shapelint.physics.gemm_shapes.GROUPED_KERNEL_DTYPES``) is one GEMM per group,
each its even share of the rows, launched one after another (``kernels``).

Times are cached by value (the profile is hashable and frozen; repeated layers share
shapes), never by object identity.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from shapelint.hardware import Hardware
from shapelint.model.records import ATTN_ROLES, Gemm
from shapelint.physics.alignment import gemm_alignment, input_alignment, is_aligned, output_alignment
from shapelint.physics.attention import WITH_BIAS, WITH_DROPOUT, forward_blocks, head_dim, is_fused
from shapelint.physics.conv_kernels import call_of, grouped_width_fast, kernel_of, nchw, transposed_bytes, transposes
from shapelint.physics.gemm_shapes import grouped_fallback
from shapelint.physics.quantization import Quantization, quantization


@dataclass(frozen=True)
class GemmTime:
    """One GEMM's estimate: its time, the compute and memory roofs it is the larger of
    (copies aside), and the efficiencies that set the compute roof."""

    seconds: float
    compute_s: float
    memory_s: float
    alignment: float
    tile: float
    wave: float

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.memory_s else "memory"


def alignment_efficiency(g: Gemm, hw: Hardware) -> float:
    """The calibrated rate fraction of a misaligned GEMM. cuBLAS picks its kernel by
    what is misaligned: with a misaligned input, one kernel class whatever the
    output (the input table); with aligned inputs and only the output misaligned
    (a Linear forward with odd out_features), a slower one (the output table)."""
    inputs = input_alignment(g, hw)
    if inputs < hw.alignment_bytes:
        return hw.misalignment_efficiency(g.dtype_bytes, inputs)
    return hw.misalignment_efficiency(g.dtype_bytes, output_alignment(g, hw), output=True)


def _rate(g: Gemm, hw: Hardware) -> tuple[float, float]:
    """(FLOP/s of a large aligned GEMM in this dtype, alignment efficiency)."""
    peak = hw.peak_tflops(g.dtype) * 1e12
    if g.role in ATTN_ROLES:
        peak *= hw.attention_efficiency
    if not hw.uses_tensor_cores(g.dtype):
        return peak, 1.0
    peak *= hw.gemm_efficiency
    if is_aligned(g, hw):
        return peak, 1.0
    if g.role == "conv":  # cuDNN's fallback convolution kernels
        return peak, hw.conv_misaligned_efficiency.get(g.dtype_bytes, 1.0)
    if g.role in ATTN_ROLES:  # the fused attention kernels pad the head
        return peak, hw.attention_misaligned_efficiency
    return peak, alignment_efficiency(g, hw)


#: share of a causal attention's score tiles the fused kernels compute: the lower
#: triangle and its diagonal tiles (records count the full product, as flop_counter does)
CAUSAL_WORK = 0.55
#: entries kept in the time cache before it is emptied
CACHE_SIZE = 1_000_000

_TIMES: dict[tuple[object, ...], GemmTime] = {}


def gemm_time(g: Gemm, hw: Hardware) -> GemmTime:
    key = (hw, g.op, g.phase, g.m, g.n, g.k, g.batch, g.dtype, g.role, g.a, g.b, g.out, g.extra)
    t = _TIMES.get(key)
    if t is None:
        if len(_TIMES) >= CACHE_SIZE:
            _TIMES.clear()
        t = _TIMES[key] = _gemm_time(g, hw)
    return t


def one_group(g: Gemm, groups: int, split: str) -> Gemm:
    """One group's GEMM of a grouped record that aten's fallback runs group by group:
    its share of the split dimension (tokens per expert forward, ``m``; of the weight
    gradient's contraction, ``k``), taken as even (the router's split is data)."""
    if split == "k":
        k = math.ceil(g.k / groups)
        return replace(g, k=k, a=replace(g.a, cols=k), b=replace(g.b, rows=k), extra=())
    m = math.ceil(g.m / groups)
    return replace(g, m=m, a=replace(g.a, rows=m), out=replace(g.out, rows=m), extra=())


def _fallback(g: Gemm) -> tuple[int, str] | None:
    """(groups, split) where aten runs ``g`` group by group: a ``_grouped_mm`` whose
    operands are not bf16 (a finding that puts them in bf16 gets the grouped kernel)."""
    return grouped_fallback(g.extra) if g.dtype != "bf16" else None


def kernels(g: Gemm) -> int:
    """The kernels a GEMM record launches: one, or one per group of aten's grouped
    fallback (``shapelint.physics.gemm_shapes.grouped_fallback``)."""
    fallback = _fallback(g)
    return fallback[0] if fallback else 1


def _gemm_time(g: Gemm, hw: Hardware) -> GemmTime:
    fallback = _fallback(g)
    if fallback is not None:
        groups, split = fallback
        t = gemm_time(one_group(g, groups, split), hw)
        return GemmTime(t.seconds * groups, t.compute_s * groups, t.memory_s * groups, t.alignment, t.tile, t.wave)
    if g.role == "conv":
        return _conv_time(g, hw)
    peak, align = _rate(g, hw)
    extra = dict(g.extra)
    fused = is_fused(g)
    q = _quantization(g, hw)
    work = CAUSAL_WORK if fused and extra.get("is_causal") else 1.0
    rate = kernel_efficiency(g, hw) if fused else 1.0
    compute = g.flops * work / (peak * align * q.tile * q.wave * rate)
    if fused and extra.get(WITH_DROPOUT):
        compute += 1e-3 * fused_dropout_ms(g, bool(extra.get("is_causal")), hw)
    bw = hw.bandwidth * hw.memory_efficiency
    batched = g.batch > 1 and g.role not in ATTN_ROLES
    memory = g.min_bytes / (hw.bandwidth * hw.batched_memory_efficiency if batched else bw)
    if align < 1 and g.role not in ATTN_ROLES:  # narrower vector loads: the memory-bound rate falls too
        if batched and (g.k * g.dtype_bytes) % hw.alignment_bytes:  # a misaligned contraction: both inputs
            memory /= hw.batched_misaligned_k_efficiency
        else:
            memory /= hw.misalignment_efficiency(g.dtype_bytes, gemm_alignment(g, hw), memory=True)
    copies = g.copy_bytes / bw
    seconds = max(compute, memory, hw.min_gemm_us * 1e-6) + copies
    return GemmTime(seconds, compute, memory, align, q.tile, q.wave)


def _quantization(g: Gemm, hw: Hardware) -> Quantization:
    """cuBLAS's tile and wave quantization of the GEMM's output; a fused attention
    forward's by its own grid (:func:`fused_forward_wave`), whose tiles are not the output's."""
    q = quantization(g.m, g.n, g.batch, hw)
    if is_fused(g) and g.phase in ("forward", "recompute"):
        return Quantization(1.0, fused_forward_wave(g, hw), q.shape)
    return q


def fused_forward_wave(g: Gemm, hw: Hardware) -> float:
    """The useful fraction of the waves of the fused forward kernel a forward record runs
    in: one thread block per batch·head and block of query rows
    (``shapelint.physics.attention.forward_blocks``), one block an SM, each looping over
    all the keys. A last wave that fills few SMs takes the time of a full one, less what
    its blocks gain from having the memory to themselves: at least 1 /
    ``fused_forward_solo_speedup`` of it. Perceiver's cross-attention (8 batch·heads of
    256 latents over 50176 pixels: 16 blocks on 132 SMs) was priced at 0.09 ms forward as
    if it filled the GPU, measured 0.44 ms on an H100."""
    blocks = forward_blocks(g)
    full, last = divmod(blocks, hw.sms)
    tail = max(1.0 / hw.step.fused_forward_solo_speedup, last / hw.sms) if last else 0.0
    return blocks / hw.sms / (full + tail)


#: the head dimension ``efficient_attention_dropout_ps`` is stated at: the memory-efficient
#: kernel's dropout costs in proportion to the head dimension (measured at 64 and 128)
EFFICIENT_DROPOUT_HEAD_DIM = 64
#: the dtypes the memory-efficient kernel's own rates were measured in
EFFICIENT_RATE_DTYPES = ("bf16", "fp16")


def runs_efficient(g: Gemm, kernel: object = None) -> bool:
    """A fused attention GEMM on the memory-efficient kernel (``kernel``: the one it
    runs on, where not the record's own, as under torch.compile's mask), in a dtype its
    rates were measured in."""
    kernel = dict(g.extra).get("kernel") if kernel is None else kernel
    return kernel == "efficient" and g.dtype in EFFICIENT_RATE_DTYPES


def kernel_efficiency(g: Gemm, hw: Hardware) -> float:
    """The fraction of the fitted fused-attention rate a fused attention GEMM runs at
    eager: its kernel's own rate, and the rate it keeps with a bias (``WITH_BIAS``: the
    call takes the chain's additive mask; ``bias_grad``: a bias that needs its gradient)."""
    extra = dict(g.extra)
    bias = bool(extra.get(WITH_BIAS) or extra.get("bias_grad"))
    if runs_efficient(g):
        return hw.step.efficient_attention_efficiency * (hw.step.efficient_bias_attention_efficiency if bias else 1.0)
    return hw.step.bias_attention_efficiency if extra.get(WITH_BIAS) else 1.0


def mask_efficiency(g: Gemm, kernel: object, hw: Hardware) -> float:
    """The fraction of its unmasked rate a fused kernel keeps under the explicit mask
    torch.compile gives the call: cuDNN's measured under a causal mask
    (``masked_attention_efficiency``), the memory-efficient kernel's with a bias."""
    if runs_efficient(g, kernel):
        return hw.step.efficient_bias_attention_efficiency
    return hw.step.masked_attention_efficiency


def fused_dropout_ms(scores: Gemm, causal: bool, hw: Hardware, kernel: object = None) -> float:
    """Dropout inside a fused attention kernel (``scores``: the record of its QKᵀ; ``kernel``:
    the one it runs on where not the record's): ``attention_dropout_ps`` per score element
    it computes, or on the memory-efficient kernel ``efficient_attention_dropout_ps`` at
    head dimension 64, in proportion to the head dimension."""
    elements = scores.batch * scores.m * scores.n * (CAUSAL_WORK if causal else 1.0)
    if runs_efficient(scores, kernel):
        return elements * hw.step.efficient_attention_dropout_ps * head_dim(scores) / EFFICIENT_DROPOUT_HEAD_DIM * 1e-9
    return elements * hw.step.attention_dropout_ps * 1e-9


def conv_memory_efficiency(g: Gemm, hw: Hardware) -> tuple[float, bool]:
    """(the fraction of the copy bandwidth a convolution's kernel reaches memory-bound,
    whether it transposes NCHW operands) by the kernel its layout gets
    (``shapelint.physics.conv_kernels``). A depthwise kernel's rate grows with the bytes
    it moves, ``efficiency · B / (B + half)``: small ones lose more of their time to
    ramp-up and the tail (measured on the H100 at batch 64 and in a batch-256 step:
    ``docs/step-model.md``, "Convolutions")."""
    call, kernel, on_nchw = call_of(g), kernel_of(g), nchw(g)
    if call is None or kernel is None:  # no recorded geometry (a record made by hand): a plain GEMM's rate
        return hw.memory_efficiency, on_nchw
    if kernel == "depthwise":
        eff = depthwise_efficiency(g.min_bytes, on_nchw, hw)
    elif kernel == "gemm_1x1":
        eff = hw.conv_gemm_1x1_efficiency
    elif kernel == "grouped" and not on_nchw and not grouped_width_fast(call):
        eff = hw.grouped_nhwc_efficiency
    else:
        eff = hw.conv_memory_efficiency
    return eff, on_nchw and transposes(kernel)


def depthwise_efficiency(nbytes: int, on_nchw: bool, hw: Hardware) -> float:
    """The rate of a depthwise kernel moving ``nbytes``: PyTorch's NCHW kernel or cuDNN's
    NHWC one, ``efficiency · B / (B + half)`` and at least the smallest kernels' rate."""
    if on_nchw:
        top, half_mb, low = hw.depthwise_nchw_efficiency, hw.depthwise_nchw_half_mb, hw.depthwise_nchw_min_efficiency
    else:
        top, half_mb, low = hw.depthwise_nhwc_efficiency, hw.depthwise_nhwc_half_mb, hw.depthwise_nhwc_min_efficiency
    return max(low, top * nbytes / (nbytes + half_mb * 1e6))


def _conv_time(g: Gemm, hw: Hardware) -> GemmTime:
    """A convolution's GEMM: the implicit GEMM's compute roof (a depthwise one on the CUDA
    cores, one channel per group), its memory roof at its kernel's rate, and cuDNN's
    transposes of NCHW operands. cuDNN's kernels for misaligned channels load narrower
    vectors: slower on both roofs."""
    eff, transposing = conv_memory_efficiency(g, hw)
    call = call_of(g)
    if call is not None and call.depthwise:
        peak, align, tile, wave = hw.peak_tflops("fp32") * 1e12, 1.0, 1.0, 1.0
    else:
        peak, align = _rate(g, hw)
        q = quantization(g.m, g.n, g.batch, hw)
        tile, wave = q.tile, q.wave
    compute = g.flops / (peak * align * tile * wave)
    memory = g.min_bytes / (hw.bandwidth * eff) / align
    copies = transposes_s(g, hw) if transposing else 0.0
    seconds = max(compute, memory, hw.min_gemm_us * 1e-6) + copies
    return GemmTime(seconds, compute, memory, align, tile, wave)


def transposes_s(g: Gemm, hw: Hardware) -> float:
    """The transpose kernels cuDNN runs around an NCHW convolution GEMM: each moves its
    bytes at ``conv_transpose_efficiency`` of the copy bandwidth, after a kernel's fixed
    time and the gap between kernels."""
    fixed = (hw.step.min_kernel_us + hw.step.kernel_gap_us) * 1e-6
    return sum(b / (hw.bandwidth * hw.conv_transpose_efficiency) + fixed for b in transposed_bytes(g))


def gemm_times(gemms: Iterable[Gemm], hw: Hardware) -> tuple[GemmTime, ...]:
    """Each GEMM's estimate, in order: what the reporters show (they never price)."""
    return tuple(gemm_time(g, hw) for g in gemms)


def gemm_ms(g: Gemm, hw: Hardware) -> float:
    return 1e3 * gemm_time(g, hw).seconds


def total_ms(gemms: Iterable[Gemm], hw: Hardware) -> float:
    return sum(gemm_ms(g, hw) for g in gemms)
