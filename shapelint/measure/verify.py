"""Verify: time each finding's GEMMs before and after its suggestion on the local
CUDA GPU, with the operand layouts the records carry.

Method (METHOD.md of our lab, and triton's do_bench): random data (never zeros),
warm-up, then many timed repetitions with the L2 cache flushed before each (a
buffer twice the L2 size is zeroed), CUDA events around the kernel only, and the
median. Each GEMM runs as the op that ran it in training: ``mm``/``addmm``/``bmm``
on strided views that reproduce the recorded leading dimensions and transposes;
convolutions as ``aten.convolution`` / ``convolution_backward`` with the recorded
geometry; fused attention as ``F.scaled_dot_product_attention`` forward / backward.

The statistics (median, spread, confirmation) are plain functions of samples, so
they are tested on the CPU with a fake clock.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from shapelint.hardware import Hardware
from shapelint.model.dtypes import TORCH_DTYPE_NAMES
from shapelint.model.records import Finding, Gemm, Operand

#: timed repetitions and warm-up runs per kernel
REPS = 50
WARMUP = 10


class Timer(Protocol):
    """Runs ``fn`` repeatedly and returns the samples in milliseconds."""

    def __call__(self, fn: Callable[[], object]) -> list[float]: ...


@dataclass(frozen=True)
class Timing:
    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def spread(self) -> float:
        """Inter-quartile range over the median: the run-to-run noise."""
        if len(self.samples) < 4:
            return 0.0
        q = statistics.quantiles(self.samples, n=4)
        return (q[2] - q[0]) / self.median if self.median else 0.0


@dataclass(frozen=True)
class GemmCheck:
    """One GEMM timed before and after."""

    index: int
    op: str
    phase: str
    before: Timing | None
    after: Timing | None
    flops_before: int
    flops_after: int
    peak_tflops: float

    def tflops_fraction(self, which: str) -> float | None:
        t = self.before if which == "before" else self.after
        flops = self.flops_before if which == "before" else self.flops_after
        if t is None or t.median <= 0:
            return None
        return flops / (t.median * 1e-3) / (self.peak_tflops * 1e12)


@dataclass(frozen=True)
class FindingCheck:
    code: str
    module: str
    est_speedup: float | None
    before_ms: float
    after_ms: float
    gemms: tuple[GemmCheck, ...]
    scale: float = 1.0  # after-time multiplier: per-token throughput findings

    @property
    def measured_speedup(self) -> float | None:
        if self.after_ms <= 0:
            return None
        return self.before_ms / (self.after_ms * self.scale)

    def confirmed(self, threshold: float) -> bool:
        m = self.measured_speedup
        return m is not None and m >= threshold


BlockRunner = Callable[[Finding, dict[int, Gemm]], "tuple[Callable[[], object], Callable[[], object]] | None"]


def check_finding(f: Finding, gemms: Sequence[Gemm], hw: Hardware, timer: Timer,
                  runner: Callable[[Gemm], Callable[[], object] | None],
                  block_runner: BlockRunner | None = None) -> FindingCheck | None:
    """Time ``f``'s covered GEMMs and their suggested versions. None when the
    finding carries no suggested shapes or none of its kernels can run here.
    A suggestion that fuses work away (attention written by hand → fused SDPA)
    saves more than GEMM time: ``block_runner`` then gives the whole block,
    before and after, forward and backward."""
    if not f.after or len(f.after) != len(f.gemms):
        return None
    by_index = {g.index: g for g in gemms}
    if block_runner is not None:
        block = block_runner(f, by_index)
        if block is not None:  # a fusion: time the whole block before and after
            before_fn, after_fn = block
            tb, ta = Timing(tuple(timer(before_fn))), Timing(tuple(timer(after_fn)))
            return FindingCheck(f.code, f.module, f.est_speedup, tb.median, ta.median, ())
    checks = []
    cache: dict[Any, Timing | None] = {}
    for idx, after in zip(f.gemms, f.after):
        before = by_index[idx]
        t_before = _timed(before, timer, runner, cache)
        t_after = _timed(after, timer, runner, cache)
        checks.append(GemmCheck(idx, before.op, before.phase, t_before, t_after, before.flops, after.flops,
                                hw.peak_tflops(before.dtype)))
    paired = [c for c in checks if c.before is not None and c.after is not None]
    if not paired:
        return None
    scale = 1.0
    if f.gain == "throughput" and f.suggestion and isinstance(f.suggestion.from_, int):
        scale = f.suggestion.from_ / float(f.suggestion.to)  # time per token at the larger batch
    return FindingCheck(
        f.code, f.module, f.est_speedup,
        sum(c.before.median for c in paired if c.before),
        sum(c.after.median for c in paired if c.after),
        tuple(checks), scale,
    )


def _timed(g: Gemm, timer: Timer, runner: Callable[[Gemm], Callable[[], object] | None],
           cache: dict[Any, Timing | None]) -> Timing | None:
    key = _kernel_key(g)
    if key is None:
        return Timing((0.0,))  # part of a fused kernel timed with its first GEMM
    if key not in cache:
        fn = runner(g)
        cache[key] = Timing(tuple(timer(fn))) if fn is not None else None
    return cache[key]


def _kernel_key(g: Gemm) -> Any:
    """What identifies the kernel a GEMM runs in: the fused attention kernels run
    several GEMMs each (timed once, on their first GEMM)."""
    if g.op.startswith("sdpa."):
        part = g.op.split(".", 1)[1]
        if part not in ("qk", "qk_recompute"):
            return None
        return ("sdpa", part, g.m, g.n, g.k, g.batch, g.dtype, g.extra)
    return (g.op, g.phase, g.m, g.n, g.k, g.batch, g.dtype, g.a, g.b, g.out, g.extra)


def apply(findings: Sequence[Finding], checks: dict[int, FindingCheck], threshold: float) -> list[Finding]:
    """Findings with ``measured_speedup`` and verification details; a finding
    measured below ``threshold`` is marked not confirmed."""
    out = []
    for i, f in enumerate(findings):
        c = checks.get(i)
        if c is None:
            out.append(replace(f, verification={"status": "not run"}))
            continue
        frac_b = [x.tflops_fraction("before") for x in c.gemms]
        frac_a = [x.tflops_fraction("after") for x in c.gemms]
        verify: dict[str, object] = {
            "status": "confirmed" if c.confirmed(threshold) else "not confirmed",
            "before_ms": round(c.before_ms, 4),
            "after_ms": round(c.after_ms, 4),
            "gemms": [
                {"index": x.index, "op": x.op, "phase": x.phase,
                 "before_ms": _r(x.before.median if x.before else None),
                 "after_ms": _r(x.after.median if x.after else None),
                 "before_peak_fraction": _r(fb), "after_peak_fraction": _r(fa)}
                for x, fb, fa in zip(c.gemms, frac_b, frac_a)
            ],
        }
        out.append(replace(f, measured_speedup=c.measured_speedup, verification=verify))
    return out


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def confirmed(f: Finding) -> bool:
    return f.verification is None or f.verification.get("status") != "not confirmed"


# -- on the GPU -----------------------------------------------------------------


def cuda_timer(reps: int = REPS, warmup: int = WARMUP, flush_l2: bool = True) -> Timer:
    """CUDA-event timing, with an L2 flush before every repetition unless told not to."""
    import torch

    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20) or (64 << 20)
    flush = torch.empty(2 * l2 // 4 if flush_l2 else 0, dtype=torch.int32, device="cuda")

    def timer(fn: Callable[[], object]) -> list[float]:
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for s, e in zip(starts, ends):
            if flush_l2:
                flush.zero_()
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]

    return timer


def materialize(op: Operand, batch: int, batched: bool, dtype: Any, device: str) -> Any:
    """A random tensor with exactly ``op``'s layout (strides, offset, batch stride)."""
    import torch

    rows, cols = op.rows, op.cols
    if op.copied:  # neither stride is 1: every other element of a wider buffer
        base = torch.randn(batch, rows, 2 * cols, dtype=dtype, device=device)[..., ::2]
        return base if batched else base[0]
    bs = op.batch_stride or (rows * cols if batch > 1 else 0)
    strides = (1, op.ld) if op.transposed else (op.ld, 1)
    extent = ((cols - 1) * op.ld + rows) if op.transposed else ((rows - 1) * op.ld + cols)
    size = op.offset + (batch - 1) * bs + extent
    storage = torch.randn(size, dtype=dtype, device=device)
    if batched:
        return storage.as_strided((batch, rows, cols), (bs, *strides), op.offset)
    return storage.as_strided((rows, cols), strides, op.offset)


def gpu_runner(device: str = "cuda") -> Callable[[Gemm], Callable[[], object] | None]:
    import torch

    def runner(g: Gemm) -> Callable[[], object] | None:
        if g.dtype not in TORCH_DTYPE_NAMES:
            return None
        dtype = getattr(torch, TORCH_DTYPE_NAMES[g.dtype])
        torch.backends.cuda.matmul.allow_tf32 = g.dtype == "tf32"
        torch.backends.cudnn.allow_tf32 = g.dtype == "tf32"
        if g.role == "conv":
            return _conv_runner(g, dtype, device)
        if g.op.startswith("sdpa."):
            return _sdpa_runner(g, dtype, device)
        batched = g.op in ("bmm", "baddbmm") or g.batch > 1
        a = materialize(g.a, g.batch, batched, dtype, device)
        b = materialize(g.b, g.batch, batched, dtype, device)
        if batched:
            return lambda: torch.bmm(a, b)
        if g.op in ("addmm", "_addmm_activation"):
            bias = torch.randn(g.n, dtype=dtype, device=device)
            return lambda: torch.addmm(bias, a, b)
        return lambda: torch.mm(a, b)

    return runner


def _conv_runner(g: Gemm, dtype: Any, device: str) -> Callable[[], object] | None:
    import torch

    from shapelint.physics.conv import ConvCall

    if not g.extra:
        return None
    call = ConvCall(g.module, g.extra)
    if call.transposed:
        return None
    groups = call.groups
    n_batch, _, *spatial = call.shape("input")
    kernel = list(call.kernel_shape)
    rs = math.prod(kernel)
    part = g.op.split(".", 1)[1] if "." in g.op else "forward"
    if part == "forward":
        c_out, c_in = g.n * groups, g.k * groups // rs
    elif part == "grad_input":
        c_out, c_in = g.k * groups, g.n * groups // rs
    else:
        c_out, c_in = g.m * groups, g.n * groups // rs
    channels_last = not g.a.copied
    fmt = torch.channels_last if channels_last and len(spatial) == 2 else torch.contiguous_format
    inp = torch.randn(n_batch, c_in, *spatial, dtype=dtype, device=device).to(memory_format=fmt)
    w = torch.randn(c_out, c_in // groups, *kernel, dtype=dtype, device=device).to(memory_format=fmt)
    stride, padding, dilation = (list(call.shape(k)) for k in ("stride", "padding", "dilation"))
    conv = torch.ops.aten.convolution.default
    if part == "forward":
        return lambda: conv(inp, w, None, stride, padding, dilation, False, [0] * len(spatial), groups)
    out = conv(inp, w, None, stride, padding, dilation, False, [0] * len(spatial), groups)
    grad = torch.randn_like(out).to(memory_format=fmt)
    mask = [part == "grad_input", part == "grad_weight", False]
    back = torch.ops.aten.convolution_backward.default
    return lambda: back(grad, inp, w, None, stride, padding, dilation, False, [0] * len(spatial), groups, mask)


def _sdpa_runner(g: Gemm, dtype: Any, device: str) -> Callable[[], object] | None:
    import torch
    import torch.nn.functional as F

    causal = bool(dict(g.extra).get("is_causal", False))
    bh, tq, tk, d = g.batch, g.m, g.n, g.k
    q = torch.randn(1, bh, tq, d, dtype=dtype, device=device, requires_grad=True)
    k = torch.randn(1, bh, tk, d, dtype=dtype, device=device, requires_grad=True)
    v = torch.randn(1, bh, tk, d, dtype=dtype, device=device, requires_grad=True)
    if g.op == "sdpa.qk":
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    grad = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)


def gpu_block_runner(device: str = "cuda") -> BlockRunner:
    """Hand-written attention (a GEMM fed by a softmax) against the fused kernel:
    QKᵀ, softmax, PV and their backward, or F.scaled_dot_product_attention."""
    import torch
    import torch.nn.functional as F

    def runner(f: Finding, by_index: dict[int, Gemm]) -> tuple[Callable[[], object], Callable[[], object]] | None:
        covered = [by_index[i] for i in f.gemms]
        pv = next((g for g in covered if g.role == "after_softmax"), None)
        if pv is None or pv.dtype not in TORCH_DTYPE_NAMES:
            return None
        bh, tq, tk, dv = pv.batch, pv.m, pv.k, pv.n
        qk = next((g for g in covered if g.phase == "forward" and (g.m, g.n, g.batch) == (tq, tk, bh)), None)
        d = qk.k if qk is not None else dv
        dtype = getattr(torch, TORCH_DTYPE_NAMES[pv.dtype])
        q = torch.randn(1, bh, tq, d, dtype=dtype, device=device, requires_grad=True)
        k = torch.randn(1, bh, tk, d, dtype=dtype, device=device, requires_grad=True)
        v = torch.randn(1, bh, tk, dv, dtype=dtype, device=device, requires_grad=True)
        grad = torch.randn(1, bh, tq, dv, dtype=dtype, device=device)

        def unfused_forward() -> torch.Tensor:
            return torch.softmax((q @ k.transpose(-1, -2)) * d**-0.5, dim=-1) @ v

        def fused_forward() -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v)

        if all(g.phase == "forward" for g in covered):  # inference: the forward pass alone
            return unfused_forward, fused_forward
        return (lambda: torch.autograd.grad(unfused_forward(), (q, k, v), grad),
                lambda: torch.autograd.grad(fused_forward(), (q, k, v), grad))

    return runner


def verify(findings: Sequence[Finding], gemms: Sequence[Gemm], hw: Hardware, threshold: float,
           timer: Timer | None = None, runner: Callable[[Gemm], Callable[[], object] | None] | None = None,
           progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
           block_runner: BlockRunner | None = None) -> list[Finding]:
    """Time every finding that carries suggested shapes; see :func:`apply`. With
    the default (GPU) runners, fusions are timed as whole blocks."""
    if runner is None:
        runner, block_runner = gpu_runner(), block_runner or gpu_block_runner()
    timer = timer or cuda_timer()
    checks: dict[int, FindingCheck] = {}
    indices: Iterable[int] = range(len(findings))
    for i in (progress(indices) if progress else indices):
        c = check_finding(findings[i], gemms, hw, timer, runner, block_runner)
        if c is not None:
            checks[i] = c
    return apply(findings, checks, threshold)
