"""The one timer behind every measurement shapelint makes on a GPU: ``--verify`` (one
kernel at a time), ``--verify --step`` (training steps in blocks) and ``calibrate``
(kernels, a queued stream, the host's issue rate). Each caller picks a method; this
module states each method once.

- **A kernel** (:func:`cuda_timer`): :data:`WARMUP` untimed calls, a synchronisation,
  then :data:`REPS` timed calls, each between its own pair of CUDA events. Before each
  timed call, unless the caller says not to, the L2 cache is flushed by zeroing a buffer
  twice its size (ahead of the start event: the flush is not timed), so that no operand
  is cached from the call before (triton's ``do_bench`` method). One synchronisation
  after the last call. The samples are returned; :class:`Timing` gives their median (the
  time reported) and spread. The caller makes the operands (random, never zeros).
- **A block of training steps** (:func:`cuda_block_timer`): each step between its own
  pair of CUDA events, nothing synchronising inside the block, one synchronisation
  after it; no warm-up and no flush (the step's own traffic is what is timed). A
  variant is warmed once beforehand: its first step (which compiles, under
  ``torch.compile``) synchronised and wall-clocked (:func:`first_call_s`), then
  :data:`STEP_WARMUP` more untimed (:data:`COMPILE_EXTRA_WARMUP` more again when
  compiled; :func:`warm_up`). How blocks alternate and what their times say:
  ``shapelint.measure.step_blocks`` and ``shapelint.measure.step_report``.
- **The wall clock** (:func:`wall_timer`, :func:`wall_block_timer`): ``time.perf_counter``
  around each call, for the CPU, where a call runs synchronously (the tests' runs, a CPU
  smoke run of a benchmark), with the same warm-up and repetition counts.
- **The host's time to issue a call** (:func:`host_times`): the GPU synchronised before
  each call, ``perf_counter`` around issuing it, no synchronisation after: the time the
  CPU takes to queue work onto an idle GPU.
- **A queued stream** (:func:`queued_ms`): one pair of events around calls queued back to
  back: the stream's time per call, the GPU's idle gaps between kernels included.

The statistics are plain functions of samples, tested on the CPU with a fake clock.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

#: timed repetitions and untimed warm-up calls per kernel
REPS = 50
WARMUP = 10
#: untimed steps after a variant's first step (which compiles under --compile)
STEP_WARMUP = 3
#: more untimed steps under --compile (Inductor's autotuned kernels settle; the choice of
#: benchmarks/step_gpu.py, whose method docs/step-measurements.md states)
COMPILE_EXTRA_WARMUP = 2
#: the L2 size assumed where the device does not report one
DEFAULT_L2_BYTES = 64 << 20


class KernelTimer(Protocol):
    """Runs ``fn`` repeatedly and returns one sample per timed call, in milliseconds."""

    def __call__(self, fn: Callable[[], object]) -> list[float]: ...


class BlockTimer(Protocol):
    """Runs ``step`` ``n`` times (a block of variant ``label``) and returns each step's ms."""

    def __call__(self, label: str, step: Callable[[], object], n: int) -> list[float]: ...


@dataclass(frozen=True)
class Timing:
    """A kernel's samples: the median is its time, the spread the run-to-run noise."""

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


# -- the two clocks -------------------------------------------------------------------


def event_times(fn: Callable[[], object], n: int, before: Callable[[], object] | None = None) -> list[float]:
    """``fn`` called ``n`` times, each call between its own pair of CUDA events (``before``,
    untimed, ahead of each start event); one synchronisation after the last call. Each
    call's milliseconds."""
    import torch

    marks = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for start, end in marks:
        if before is not None:
            before()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in marks]


def wall_times(fn: Callable[[], object], n: int) -> list[float]:
    """``fn`` called ``n`` times, ``time.perf_counter`` around each call: each call's ms."""
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1e3)
    return out


# -- kernels --------------------------------------------------------------------------------


def cuda_timer(reps: int = REPS, warmup: int = WARMUP, flush_l2: bool = True) -> KernelTimer:
    """CUDA-event timing of a kernel, the L2 flushed before every timed call unless told not to."""
    import torch

    flush = None
    if flush_l2:
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", DEFAULT_L2_BYTES) or DEFAULT_L2_BYTES
        flush = torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")

    def timer(fn: Callable[[], object]) -> list[float]:
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        return event_times(fn, reps, flush.zero_ if flush is not None else None)

    return timer


def wall_timer(reps: int = REPS, warmup: int = WARMUP) -> KernelTimer:
    """The wall-clock fallback of :func:`cuda_timer` (no cache to flush on the CPU)."""

    def timer(fn: Callable[[], object]) -> list[float]:
        for _ in range(warmup):
            fn()
        return wall_times(fn, reps)

    return timer


# -- training steps -------------------------------------------------------------------------


def cuda_block_timer() -> BlockTimer:
    """A pair of CUDA events around every step, one synchronisation after the block."""

    def timer(label: str, step: Callable[[], object], n: int) -> list[float]:
        return event_times(step, n)

    return timer


def wall_block_timer() -> BlockTimer:
    """``time.perf_counter`` around every step (the CPU runs a step synchronously)."""

    def timer(label: str, step: Callable[[], object], n: int) -> list[float]:
        return wall_times(step, n)

    return timer


def block_timer(device: str) -> BlockTimer:
    """The block timer for ``device``: CUDA events on a GPU, the wall clock elsewhere."""
    import torch

    return cuda_block_timer() if torch.device(device).type == "cuda" else wall_block_timer()


def synchronize(device: str) -> None:
    """Wait for ``device`` to finish what was queued (nothing to wait for off a GPU)."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def first_call_s(step: Callable[[], object], device: str) -> float:
    """A variant's first call, synchronised and wall-clocked: its seconds (under
    torch.compile, its compilation)."""
    start = time.perf_counter()
    step()
    synchronize(device)
    return time.perf_counter() - start


def warm_up(step: Callable[[], object], device: str, warmup: int) -> None:
    """``warmup`` untimed calls, synchronised after (the calls after :func:`first_call_s`)."""
    for _ in range(warmup):
        step()
    synchronize(device)


# -- calibrate's host and stream probes -------------------------------------------------------


def host_times(fn: Callable[[], object], n: int) -> list[float]:
    """The host's time to issue each of ``n`` calls onto an idle GPU (synchronised before
    each, ``perf_counter`` around the call, none after), in ms."""
    import torch

    out = []
    for _ in range(n):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1e3)
    torch.cuda.synchronize()
    return out


def queued_ms(fn: Callable[[], object], count: int) -> float:
    """``count`` calls queued back to back between one pair of CUDA events: the stream's
    ms per call, the GPU's idle time between the kernels included."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(count):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / count


__all__ = ["COMPILE_EXTRA_WARMUP", "REPS", "STEP_WARMUP", "WARMUP", "BlockTimer", "KernelTimer", "Timing",
           "block_timer", "cuda_block_timer", "cuda_timer", "event_times", "first_call_s", "host_times", "queued_ms",
           "synchronize", "wall_block_timer", "wall_times", "wall_timer", "warm_up"]
