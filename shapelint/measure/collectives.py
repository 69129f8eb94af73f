"""``shapelint calibrate``'s collectives: the NCCL all-reduce, all-gather and
reduce-scatter times the pricer reads (``collectives:`` in a GPU profile,
:mod:`shapelint.hardware.collectives`), measured between the GPUs of this machine.

One process per rank under ``torchrun`` (:mod:`shapelint.measure.torchrun`: its own
process group, killed whole past :data:`TIMEOUT_S`), each running :func:`sweep`
(:mod:`shapelint.measure.collectives_worker`): for every collective and every size of
the table's grid (:data:`MIN_LOG2` … :data:`MAX_LOG2`, powers of two, the grid of the
shipped table), the ranks meet at a barrier, then time the collective with the one
kernel timer (:func:`shapelint.measure.timer.cuda_timer`: warm-up calls, each timed
call between its own CUDA events, no L2 flush, since a collective's operands are
what it moves), and the median of the slowest rank is the time (a collective ends
when its last rank does). Sizes count the whole array, as nccl-tests does (the
all-reduce buffer, the all-gather's output, the reduce-scatter's input); the log
prints nccl-tests' bus bandwidth beside each.

fp32 only: the pricer keeps one table per collective (DDP and FSDP2 move fp32
gradients and parameters; TP's bf16 forward all-reduces are priced on the same
table), and on the 2×H100 machine fp32 and bf16 all-reduces of the same bytes took
the same time (docs/multi-gpu.md). The rest of the section (the network between
nodes, the compute slowdown beside a collective, the engines' host costs) is not a
property of one machine's NVLink that a sweep measures: it is kept from the base
profile, and the section's ``source`` says which numbers are whose.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from shapelint.errors import ShapelintError
from shapelint.hardware import resolve
from shapelint.hardware.collectives import (
    ENGINE_HOST_KEYS,
    OPS,
    Collectives,
    HostCosts,
    bus_bandwidth_gbps,
    collectives_doc,
    host_costs_by_engine,
)
from shapelint.measure.timer import KernelTimer, Timing
from shapelint.measure.torchrun import ranks_json

#: the table's grid: 64 KiB to 1 GiB by powers of two (below, the latency floor holds;
#: above, time grows with the bytes)
MIN_LOG2, MAX_LOG2 = 16, 30
#: the dtype the table is measured in (see the module docstring) and its bytes
DTYPE, ELEMENT_BYTES = "float32", 4
#: seconds the ranks may take (NCCL start, 3 × 15 sizes, the 1 GiB ones at ~3 ms x 60)
TIMEOUT_S = 600
#: the profile whose non-measured values a base without a ``collectives:`` section takes
FALLBACK_PROFILE = "h100-sxm"


@dataclass(frozen=True)
class Sample:
    """One collective at one size: the slowest rank's median, and its spread."""

    op: str
    #: the whole array (all-reduce buffer, all-gather output, reduce-scatter input)
    nbytes: int
    us: float
    #: inter-quartile range over the median, the slowest rank's
    spread: float
    world: int

    @property
    def busbw_gbps(self) -> float:
        return bus_bandwidth_gbps(self.op, self.nbytes, self.us, self.world)


def sizes(min_log2: int = MIN_LOG2, max_log2: int = MAX_LOG2) -> list[int]:
    """The grid's sizes in bytes."""
    if not 2 <= min_log2 <= max_log2 <= 34:
        raise ShapelintError(f"collective sizes 2^{min_log2}..2^{max_log2} bytes: need 2 <= min <= max <= 34")
    return [1 << k for k in range(min_log2, max_log2 + 1)]


def sweep(device: str, timer: KernelTimer, nbytes: Sequence[int], ops: Sequence[str] = OPS,
          log: Callable[[str], None] = lambda _msg: None) -> list[Sample]:
    """Every ``op`` at every size, in this rank's process group (every rank calls this
    with the same arguments, so the collectives match); the samples, the same on every rank."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size()
    out = []
    for op in ops:
        for size in nbytes:
            n = max(size // ELEMENT_BYTES // world, 1) * world
            whole = torch.randn(n, device=device, dtype=getattr(torch, DTYPE))
            shard = torch.randn(n // world, device=device, dtype=whole.dtype)
            call = _call(op, whole, shard)
            dist.barrier()
            timing = Timing(tuple(timer(call)))
            us, spread = (slowest(x, device) for x in (timing.median * 1e3, timing.spread))
            sample = Sample(op, n * ELEMENT_BYTES, round(us, 2), round(spread, 3), world)
            out.append(sample)
            log(f"{op:14} {sample.nbytes:>11} B {sample.us:10.1f} µs  busbw {sample.busbw_gbps:7.1f} GB/s")
            del whole, shard, call
    return out


def _call(op: str, whole: Any, shard: Any) -> Callable[[], object]:
    import torch.distributed as dist

    if op == "all_reduce":
        return lambda: dist.all_reduce(whole)
    if op == "all_gather":
        return lambda: dist.all_gather_into_tensor(whole, shard)
    if op == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(shard, whole)
    raise ValueError(f"unknown collective {op!r}")


def slowest(value: float, device: str) -> float:
    """The largest of every rank's ``value`` (a step or a collective ends when its last
    rank does)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


# -- the parent: launch the ranks, fold their samples into a profile --------------------------------


@dataclass(frozen=True)
class Sweep:
    """What the ranks measured, and on what."""

    samples: tuple[Sample, ...]
    world: int
    gpu: str
    torch: str
    nccl: str
    date: str
    reps: int

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "samples": [asdict(s) for s in self.samples]}

    @staticmethod
    def from_json(doc: dict[str, Any]) -> Sweep:
        return Sweep(**{**doc, "samples": tuple(Sample(**s) for s in doc["samples"])})


def measure(world: int, device: str = "cuda", min_log2: int = MIN_LOG2, max_log2: int = MAX_LOG2,
            reps: int | None = None, timeout_s: float = TIMEOUT_S) -> Sweep:
    """Run :func:`sweep` on ``world`` ranks of this machine (``device`` "cpu": gloo, the
    tests) and return what they measured; one error line if they fail."""
    sizes(min_log2, max_log2)  # checked here, before any rank starts
    with tempfile.TemporaryDirectory(prefix="shapelint-collectives-") as tmp:
        got = Path(tmp, "collectives.json")
        args = [str(got), "--device", device, "--min-log2", str(min_log2), "--max-log2", str(max_log2)]
        if reps is not None:
            args += ["--reps", str(reps)]
        return Sweep.from_json(ranks_json(world, "shapelint.measure.collectives_worker", args, got, timeout_s,
                                          f"calibrate: collectives on {world} ranks",
                                          f"calibrate: measuring collectives on {world} ranks failed",
                                          "; --no-collectives skips them"))


def collectives_on_this_machine(world_size: int | None, only: bool, log: Callable[[str], None]) -> Sweep | None:
    """The collectives measured on ``world_size`` GPUs (default: all visible); None,
    said in one line, where fewer than two are visible and they were not all that was asked."""
    import torch

    visible = torch.cuda.device_count()
    world = world_size or visible
    if world_size is not None and world_size > visible:
        raise ShapelintError(f"calibrate: --world-size {world_size}, but {visible} GPU(s) visible")
    if world < 2:
        if only or world_size is not None:
            raise ShapelintError(f"calibrate: collectives need 2 GPUs or more, {world} given "
                                 f"({visible} visible)")
        log(f"calibrate: {visible} GPU visible: skipped collectives (they need 2 or more); the profile keeps "
            "its base's collectives table")
        return None
    log(f"calibrate: collectives on {world} GPUs (NCCL, torchrun)")
    sweep = measure(world)
    log(f"calibrate: collectives: {describe(sweep)}")
    return sweep


def base_collectives(base: Collectives | None) -> Collectives:
    """The section whose unmeasured values a calibrated one keeps: ``base``, else
    :data:`FALLBACK_PROFILE`'s."""
    if base is not None:
        return base
    fallback = resolve(FALLBACK_PROFILE).collectives
    assert fallback is not None, f"the shipped {FALLBACK_PROFILE} profile has a collectives table"
    return fallback


def section(sweep: Sweep | None, base: Collectives, base_name: str,
            host_speed: float | None = None, engine_speeds: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The ``collectives:`` mapping of a calibrated profile: ``sweep``'s tables where
    it measured them, everything else ``base``'s (named in ``source``); the engines'
    host costs at ``engine_speeds`` (per engine, calibrate's parallel host probe:
    :mod:`shapelint.measure.parallel_host`) where measured, else at ``host_speed`` (the
    one-GPU eager probe's, assuming the engines' host work slows with the host as the
    kernels' issue does) where calibrate measured this machine's host."""
    samples = sweep.samples if sweep is not None else ()
    measured = [op for op in OPS if any(s.op == op for s in samples)]
    tables = tuple((op, tuple(sorted((s.nbytes, s.us) for s in samples if s.op == op)) if op in measured
                    else base.table(op)) for op in OPS)
    engines = dict(engine_speeds or {})
    host = HostCosts(**host_costs_by_engine(asdict(base.host), engines, host_speed or 1.0))
    made = replace(base, world=sweep.world if sweep is not None else base.world, tables=tables, host=host,
                   source=_source(sweep, measured, base, base_name, host_speed, engines))
    return collectives_doc(made)


def _source(sweep: Sweep | None, measured: list[str], base: Collectives, base_name: str,
            host_speed: float | None, engines: Mapping[str, float]) -> str:
    """What the section's numbers are: measured here, scaled, or kept from ``base``."""
    said = []
    if sweep is not None:
        said.append(f"shapelint calibrate on {sweep.world}x {sweep.gpu}, {sweep.date}, torch {sweep.torch}, NCCL "
                    f"{sweep.nccl}: fp32 {', '.join(measured)} (bytes = the whole array, as nccl-tests counts them), "
                    f"µs per call, the slowest rank's median of {sweep.reps} calls.")
    said += _host_source(base_name, host_speed, engines)
    kept = [op for op in OPS if op not in measured]
    unmeasured = ["network_busbw_gbps, network_latency_us, overlap_slowdown"]
    unmeasured += ["host_us"] if host_speed is None and not engines else []
    unmeasured += [f"the {', '.join(kept)} table{'s' if len(kept) > 1 else ''} at {base.world} GPUs"] if kept else []
    said.append(f"{' and '.join(unmeasured)}: not measured by calibrate, kept from {base_name} "
                f"({base.source.strip() or 'no source given'})")
    return " ".join(said)


def _host_source(base_name: str, host_speed: float | None, engines: Mapping[str, float]) -> list[str]:
    """Where the section's ``host_us`` come from: the parallel host probe's engine
    speeds, the one-GPU probe's speed for the engines it did not measure."""
    said = []
    if engines:
        said.append(f"host_us: {base_name}'s scaled per engine by this host's speed, measured by calibrate's "
                    "parallel host probe (" + ", ".join(f"{e} {v:.3f}" for e, v in engines.items()) + ").")
    if host_speed is not None and set(engines) != set(ENGINE_HOST_KEYS):
        rest = [e for e in ENGINE_HOST_KEYS if e not in engines]
        said.append(f"host_us{' of ' + ', '.join(rest) if engines else ''}: {base_name}'s scaled by "
                    f"{host_speed:.3f}, this host's measured speed (calibrate's eager one-GPU host probe), as "
                    "calibrate scales the step's host costs.")
    return said


def describe(sweep: Sweep) -> str:
    """One line: the largest all-reduce's bus bandwidth, and the latency floor."""
    ar = [s for s in sweep.samples if s.op == "all_reduce"] or list(sweep.samples)
    big, small = max(ar, key=lambda s: s.nbytes), min(ar, key=lambda s: s.nbytes)
    return (f"{big.op} {big.nbytes >> 20} MiB {big.busbw_gbps:.0f} GB/s bus bandwidth, "
            f"{small.nbytes >> 10} KiB {small.us:.0f} µs on {sweep.world} GPUs")


__all__ = ["DTYPE", "MAX_LOG2", "MIN_LOG2", "TIMEOUT_S", "Sample", "Sweep", "base_collectives",
           "collectives_on_this_machine", "describe", "measure", "section", "sizes", "slowest", "sweep"]
