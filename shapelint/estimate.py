"""Estimate: the time of each GEMM on a GPU profile, before and after a change.

The model, per GEMM (all numbers from the profile):

    compute = flops / (peak(dtype) · alignment · tile · wave)
    memory  = min_bytes / (bandwidth · memory_efficiency)
    time    = max(compute, memory, min_gemm) + copies

- ``peak(dtype)``: the rate a large aligned GEMM reaches (measured or datasheet x
  achievable) times ``gemm_efficiency`` (typical model shapes); fp32 without TF32
  uses the CUDA-core rate, fused attention GEMMs ``attention_efficiency`` of it.
- ``alignment``: the calibrated efficiency for the worst-aligned input and for the
  output (pointer, leading dimension, batch stride) of a tensor-core GEMM (cuBLAS);
  separate calibrated factors for convolutions (cuDNN) and fused attention; 1 when
  all are 16-byte aligned and for GEMMs off the tensor cores.
- ``tile``: useful fraction of the output tiles; ``wave``: useful fraction of the
  last wave of tiles over the SMs, weighted by how much of it cuBLAS still pays on
  this architecture (stream-K hides most of it on Hopper). cuBLAS is taken to pick
  the best tile of the profile's list.
- ``copies``: an operand that needs a contiguous copy first (neither stride is 1)
  costs a read and a write at ``memory_efficiency``; an NCHW operand of a tensor-core
  convolution one transpose per kernel (read and write) at ``conv_transpose_efficiency``
  of the copy bandwidth. A convolution with misaligned channels runs at
  ``conv_misaligned_efficiency`` of the aligned kernel's pace, memory-bound or not.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterable

from shapelint.hardware import Hardware, aligned_bytes, ceil_div
from shapelint.records import Gemm, Operand


@dataclass(frozen=True)
class GemmTime:
    seconds: float
    compute_s: float
    memory_s: float
    alignment: float
    tile: float
    wave: float

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.memory_s else "memory"


def operand_alignment(op: Operand, dtype_bytes: int, cap: int) -> int:
    """Bytes of alignment the kernel gets for this operand (up to ``cap``)."""
    if not op.in_memory:
        return cap
    single = (op.cols if op.transposed else op.rows) <= 1
    worst = cap if single else aligned_bytes(op.ld, dtype_bytes, cap)
    worst = min(worst, aligned_bytes(op.offset, dtype_bytes, cap))
    if op.batch_stride:
        worst = min(worst, aligned_bytes(op.batch_stride, dtype_bytes, cap))
    return worst


def gemm_alignment(g: Gemm, hw: Hardware) -> int:
    """The worst alignment (bytes) over A, B and the output."""
    cap = hw.alignment_bytes
    return min(operand_alignment(op, g.dtype_bytes, cap) for op in (g.a, g.b, g.out))


def alignment_efficiency(g: Gemm, hw: Hardware) -> float:
    """The calibrated rate fraction of a misaligned GEMM. cuBLAS picks its kernel by
    what is misaligned: with a misaligned input, one kernel class whatever the
    output (the input table); with aligned inputs and only the output misaligned
    (a Linear forward with odd out_features), a slower one (the output table)."""
    cap = hw.alignment_bytes
    inputs = min(operand_alignment(op, g.dtype_bytes, cap) for op in (g.a, g.b))
    if inputs < cap:
        return hw.misalignment_efficiency(g.dtype_bytes, inputs)
    output = operand_alignment(g.out, g.dtype_bytes, cap)
    return hw.misalignment_efficiency(g.dtype_bytes, output, output=True)


def quantization(m: int, n: int, batch: int, hw: Hardware) -> tuple[float, float, tuple[int, int]]:
    """(tile efficiency, wave efficiency, tile) for the profile tile that wastes least."""
    best = (0.0, 0.0, hw.tiles[0])
    for tm, tn in hw.tiles:
        tiles = ceil_div(m, tm) * ceil_div(n, tn) * batch
        tile_eff = (m * n * batch) / (tiles * tm * tn)
        w = tiles / hw.sms
        wave_raw = w / ceil_div(tiles, hw.sms)
        wave_eff = 1.0 - hw.wave_weight * (1.0 - wave_raw)
        if tile_eff * wave_eff > best[0] * best[1]:
            best = (tile_eff, wave_eff, (tm, tn))
    return best


def _rate(g: Gemm, hw: Hardware) -> tuple[float, float]:
    """(FLOP/s of a large aligned GEMM in this dtype, alignment efficiency)."""
    peak = hw.peak_tflops(g.dtype) * 1e12
    if g.role in ("attn_scores", "attn_values"):
        peak *= hw.attention_efficiency
    if not hw.uses_tensor_cores(g.dtype):
        return peak, 1.0
    peak *= hw.gemm_efficiency
    if gemm_alignment(g, hw) >= hw.alignment_bytes:
        return peak, 1.0
    if g.role == "conv":  # cuDNN's fallback convolution kernels
        return peak, hw.conv_misaligned_efficiency.get(g.dtype_bytes, 1.0)
    if g.role in ("attn_scores", "attn_values"):  # the fused attention kernels pad the head
        return peak, hw.attention_misaligned_efficiency
    return peak, alignment_efficiency(g, hw)


#: gemm_time by (profile, what the time depends on): repeated layers share shapes
_TIMES: dict[tuple[object, ...], GemmTime] = {}


def gemm_time(g: Gemm, hw: Hardware) -> GemmTime:
    key = (id(hw), g.op, g.m, g.n, g.k, g.batch, g.dtype, g.role, g.a, g.b, g.out, g.extra)
    t = _TIMES.get(key)
    if t is None:
        if len(_TIMES) > 1_000_000:
            _TIMES.clear()
        t = _TIMES[key] = _gemm_time(g, hw)
    return t


#: share of a causal attention's score tiles the fused kernels compute: the lower
#: triangle and its diagonal tiles (records count the full product, as flop_counter does)
CAUSAL_WORK = 0.55


def _gemm_time(g: Gemm, hw: Hardware) -> GemmTime:
    peak, align = _rate(g, hw)
    tile, wave, _ = quantization(g.m, g.n, g.batch, hw)
    work = CAUSAL_WORK if g.op.startswith("sdpa.") and dict(g.extra).get("is_causal") else 1.0
    compute = g.flops * work / (peak * align * tile * wave)
    bw = hw.bandwidth * hw.memory_efficiency
    memory = g.min_bytes / bw
    if g.role == "conv":
        # cuDNN's kernels for misaligned channels load narrower vectors: slower on both roofs
        memory /= align
        copies = copy_bytes(g) / (hw.bandwidth * hw.conv_transpose_efficiency)
    else:
        copies = copy_bytes(g) / bw
    seconds = max(compute, memory, hw.min_gemm_us * 1e-6) + copies
    return GemmTime(seconds, compute, memory, align, tile, wave)


def copy_bytes(g: Gemm) -> int:
    """Bytes read and written by the copies an operand needs before the kernel (no
    unit stride; for a convolution the NCHW <-> NHWC transpose): each ``copied``
    operand once (over a convolution's groups, ``batch``: the whole tensor)."""
    return sum(2 * op.rows * op.cols * g.batch * g.dtype_bytes for op in (g.a, g.b, g.out) if op.copied)


def total_ms(gemms: Iterable[Gemm], hw: Hardware) -> float:
    return 1e3 * sum(gemm_time(g, hw).seconds for g in gemms)


# -- changing a size ------------------------------------------------------------


def _resize_operand(op: Operand, old: int, new: int) -> Operand:
    rows = new if op.rows == old else op.rows
    cols = new if op.cols == old else op.cols
    ld = new if op.ld == old else op.ld
    # a batch stride that held `old` rows or columns grows with them
    batch_stride = op.batch_stride
    if batch_stride and (op.rows == old or op.cols == old):
        batch_stride = rows * cols if op.batch_stride == op.rows * op.cols else batch_stride
    return replace(op, rows=rows, cols=cols, ld=ld, batch_stride=batch_stride)


def resize(g: Gemm, old: int, new: int) -> Gemm:
    """The same GEMM with every dimension and leading dimension equal to ``old``
    set to ``new`` (what padding a layer's size from ``old`` to ``new`` does)."""
    if old == new:
        return g
    return replace(
        g,
        m=new if g.m == old else g.m,
        n=new if g.n == old else g.n,
        k=new if g.k == old else g.k,
        a=_resize_operand(g.a, old, new),
        b=_resize_operand(g.b, old, new),
        out=_resize_operand(g.out, old, new),
    )


#: a candidate size within this fraction of the best time counts as reaching it
NEAR_BEST = 0.01


def best_size(
    old: int,
    cost: Callable[[int], float],
    step: int,
    *,
    search: int = 256,
    must_divide: int = 1,
) -> int:
    """The smallest size >= ``old`` whose estimated ``cost`` is within NEAR_BEST of the
    best over the multiples of ``step`` up to the next multiple of ``search`` (and
    divisible by ``must_divide``: the tensor-parallel degree)."""
    unit = step * must_divide // _gcd(step, must_divide)
    first = ceil_div(old, unit) * unit
    limit = max(first, ceil_div(old, max(search, unit)) * max(search, unit))
    candidates = list(range(first, limit + 1, unit))
    costs = [cost(c) for c in candidates]
    floor = min(costs)
    for c, t in zip(candidates, costs):
        if t <= floor * (1 + NEAR_BEST):
            return c
    return candidates[-1]


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def set_dim(g: Gemm, axis: str, new: int) -> Gemm:
    """The same GEMM with dimension ``axis`` (``"m"``, ``"n"`` or ``"k"``) set to
    ``new``, and the operands that span it (A is m x k, B is k x n, C is m x n)
    changed with it: their rows/cols, and their leading dimension where it was
    that dimension (a dense matrix). Unlike :func:`resize`, other dimensions of
    the same value are left alone (a square layer sharded on one side)."""
    old = getattr(g, axis)
    if old == new:
        return g

    def fix(op: Operand, rows_axis: str, cols_axis: str) -> Operand:
        rows = new if rows_axis == axis else op.rows
        cols = new if cols_axis == axis else op.cols
        # the leading dimension is the extent of the unit-stride side when dense
        dense_side = rows_axis if op.transposed else cols_axis
        ld = new if dense_side == axis and op.ld == old else op.ld
        bs = rows * cols if op.batch_stride and op.batch_stride == op.rows * op.cols else op.batch_stride
        return replace(op, rows=rows, cols=cols, ld=ld, batch_stride=bs)

    return replace(g, **{axis: new}, a=fix(g.a, "m", "k"), b=fix(g.b, "k", "n"), out=fix(g.out, "m", "n"))
