"""``--verify``: time each finding's GEMMs before and after its suggestion on the local
CUDA GPU, with the operand layouts the records carry, and confirm or refute the estimate.

Each kernel is timed by :func:`shapelint.measure.timer.cuda_timer` (its method: warm-up,
the L2 flushed before every timed call, CUDA events, the median) and run as
:mod:`shapelint.measure.kernels` rebuilds it. A finding's measured speedup is the sum of
its GEMMs' medians before over after (per token, for a throughput finding); at least the
policy's threshold confirms it. The statistics and the confirmation are plain functions
of samples, tested on the CPU with a fake clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from shapelint.hardware import Hardware
from shapelint.measure.kernels import BlockRunner, Runner, gpu_block_runner, gpu_runner, kernel_key
from shapelint.measure.timer import KernelTimer, Timing, cuda_timer
from shapelint.model.records import Finding, Gemm
from shapelint.model.verification import NOT_RUN, FindingVerification, GemmTiming


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

    def timing(self) -> GemmTiming:
        """As the report gives it (ms and fractions of peak to 4 decimals)."""
        return GemmTiming(self.index, self.op, self.phase, _r(self.before.median if self.before else None),
                          _r(self.after.median if self.after else None), _r(self.tflops_fraction("before")),
                          _r(self.tflops_fraction("after")))


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

    def verification(self, threshold: float) -> FindingVerification:
        """As the report gives it: the status against ``threshold``, ms to 4 decimals."""
        return FindingVerification("confirmed" if self.confirmed(threshold) else "not confirmed",
                                   round(self.before_ms, 4), round(self.after_ms, 4),
                                   tuple(c.timing() for c in self.gemms))


def check_finding(f: Finding, gemms: Sequence[Gemm], hw: Hardware, timer: KernelTimer, runner: Runner,
                  block_runner: BlockRunner | None = None) -> FindingCheck | None:
    """Time ``f``'s covered GEMMs and their suggested versions. None when the
    finding carries no suggested shapes or none of its kernels can run here.
    A suggestion that fuses work away (attention written by hand → fused SDPA)
    saves more than GEMM time: ``block_runner`` then gives the whole block,
    before and after, forward and backward."""
    if not f.after or len(f.after) != len(f.gemms):
        return None
    by_index = {g.index: g for g in gemms}
    block = block_runner(f, by_index) if block_runner is not None else None
    if block is not None:  # a fusion: time the whole block before and after
        before_fn, after_fn = block
        tb, ta = Timing(tuple(timer(before_fn))), Timing(tuple(timer(after_fn)))
        return FindingCheck(f.code, f.module, f.est_speedup, tb.median, ta.median, ())
    checks = _gemm_checks(f, by_index, hw, timer, runner)
    paired = [c for c in checks if c.before is not None and c.after is not None]
    if not paired:
        return None
    return FindingCheck(
        f.code, f.module, f.est_speedup,
        sum(c.before.median for c in paired if c.before),
        sum(c.after.median for c in paired if c.after),
        tuple(checks), _throughput_scale(f),
    )


def _gemm_checks(f: Finding, by_index: dict[int, Gemm], hw: Hardware, timer: KernelTimer,
                 runner: Runner) -> list[GemmCheck]:
    """Each covered GEMM and its suggested version timed (a kernel timed once however many
    GEMMs run it)."""
    checks = []
    cache: dict[Any, Timing | None] = {}
    for idx, after in zip(f.gemms, f.after):
        before = by_index[idx]
        t_before = _timed(before, timer, runner, cache)
        t_after = _timed(after, timer, runner, cache)
        checks.append(GemmCheck(idx, before.op, before.phase, t_before, t_after, before.flops, after.flops,
                                hw.peak_tflops(before.dtype)))
    return checks


def _throughput_scale(f: Finding) -> float:
    """The after-time multiplier that makes a throughput finding's times per token: its
    suggestion raises the batch from ``from_`` to ``to``."""
    if f.gain == "throughput" and f.suggestion and isinstance(f.suggestion.from_, int):
        return f.suggestion.from_ / float(f.suggestion.to)
    return 1.0


def _timed(g: Gemm, timer: KernelTimer, runner: Runner, cache: dict[Any, Timing | None]) -> Timing | None:
    key = kernel_key(g)
    if key is None:
        return Timing((0.0,))  # part of a fused kernel timed with its first GEMM
    if key not in cache:
        fn = runner(g)
        cache[key] = Timing(tuple(timer(fn))) if fn is not None else None
    return cache[key]


def apply(findings: Sequence[Finding], checks: dict[int, FindingCheck], threshold: float) -> list[Finding]:
    """Findings with ``measured_speedup`` and their verification; a finding measured
    below ``threshold`` is marked not confirmed."""
    out = []
    for i, f in enumerate(findings):
        c = checks.get(i)
        if c is None:
            out.append(replace(f, verification=NOT_RUN))
            continue
        out.append(replace(f, measured_speedup=c.measured_speedup, verification=c.verification(threshold)))
    return out


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def confirmed(f: Finding) -> bool:
    """Not refuted: unverified, or measured at least the threshold."""
    return f.verification is None or not f.verification.refuted


def verify(findings: Sequence[Finding], gemms: Sequence[Gemm], hw: Hardware, threshold: float,
           timer: KernelTimer | None = None, runner: Runner | None = None,
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


__all__ = ["FindingCheck", "GemmCheck", "apply", "check_finding", "confirmed", "verify"]
