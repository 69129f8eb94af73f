"""The ``collectives:`` section of a GPU profile: what NCCL's collectives cost between
GPUs of this kind, and the host time the parallel engines add.

A table per collective (``all_reduce``, ``all_gather``, ``reduce_scatter``) of
``[bytes, µs]`` pairs measured at ``world`` GPUs within one node (NVLink), bytes
being the whole array as nccl-tests counts it (the all-reduce buffer, the gathered
output, the reduce-scatter input). Between the measured sizes the time is
interpolated linearly in log(bytes) → log(time) (interpolating bandwidth instead
would make time fall with size); below the smallest it is the smallest's time (the
latency floor); above the largest it grows in proportion to the bytes. Another world
size on the same link scales the time by the ring's bus factor, ``2(n−1)/n`` over
its value at the measured size (nccl-tests' bus bandwidth is nearly independent of
the rank count: 329, 355, 361 GB/s at 2, 4, 8 H100s for a 1 GiB all-reduce). A
group that leaves one node runs at ``network_busbw_gbps`` (an assumption: one
400 Gb/s NIC per GPU) plus ``network_latency_us`` per call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shapelint.errors import ShapelintError
from shapelint.files import show

#: the collectives a profile tables
OPS = ("all_reduce", "all_gather", "reduce_scatter")
#: host time the parallel engines add, microseconds (see :class:`HostCosts`)
HOST_KEYS = ("ddp_tensor", "fsdp_group", "fsdp_tensor", "tp_layer", "tp_parameter", "tp_collective")
#: each engine's terms of :data:`HOST_KEYS`: what one measured speed of that engine scales
ENGINE_HOST_KEYS = {"ddp": ("ddp_tensor",), "fsdp": ("fsdp_group", "fsdp_tensor"),
                    "tp": ("tp_layer", "tp_parameter", "tp_collective")}


@dataclass(frozen=True)
class HostCosts:
    """Host time per step that a parallel engine adds to an eager step, µs, one term per
    piece of work the engine does on the host (``docs/multi-gpu.md``, "The engines' host
    work"; fitted by ``benchmarks/host_fit_parallel.py``)."""

    #: DDP, per trained tensor: the Reducer's autograd hook, the copy of its gradient
    #: into its bucket (divided by the world size as it copies) and, after the
    #: all-reduce, back out (gradient_as_bucket_view=False); the per-bucket work (the
    #: all-reduce's launch, its future's callback) fitted to nothing beside it, so it has no term
    ddp_tensor: float
    #: FSDP2, per ``fully_shard`` group: its pre/post forward and backward hooks, the
    #: all-gather copy-in and copy-out, the reduce-scatter and the stream waits
    fsdp_group: float
    #: FSDP2, per trained tensor: its unsharded view set and freed in the forward and
    #: again in the backward, its gradient made a sharded DTensor, its DTensor optimizer step
    fsdp_tensor: float
    #: tensor parallelism (DTensor), per sharded linear layer: the input and output
    #: hooks of its ``ParallelStyle``
    tp_layer: float
    #: tensor parallelism, per DTensor parameter (a sharded layer's weight, its bias):
    #: the ops dispatched on it in the forward, the backward and the optimizer
    tp_parameter: float
    #: tensor parallelism, per activation collective: ``from_local``/``redistribute``,
    #: the gradients summed as partial DTensors, the collective's issue and wait
    tp_collective: float


@dataclass(frozen=True)
class Collectives:
    """A GPU's collective costs (see the module docstring)."""

    world: int
    #: per op: ((bytes, µs), ...) ascending by bytes
    tables: tuple[tuple[str, tuple[tuple[int, float], ...]], ...]
    network_busbw_gbps: float
    network_latency_us: float
    #: fraction by which compute slows while a collective overlaps it (NCCL's kernels hold SMs)
    overlap_slowdown: float
    host: HostCosts
    source: str = ""

    def table(self, op: str) -> tuple[tuple[int, float], ...]:
        return dict(self.tables)[op]

    def us(self, op: str, nbytes: float, world: int, across_nodes: bool = False) -> float:
        """One ``op`` of ``nbytes`` over ``world`` GPUs, µs (0 for one GPU or no bytes)."""
        if world <= 1 or nbytes <= 0:
            return 0.0
        factor = bus_factor(world) / bus_factor(self.world)
        if across_nodes:
            return nbytes * op_bus_factor(op, world) / (self.network_busbw_gbps * 1e3) + self.network_latency_us
        return interpolate(self.table(op), nbytes) * factor


def bus_factor(world: int) -> float:
    """nccl-tests' bus factor of a ring all-reduce, 2(n−1)/n (all-gather and
    reduce-scatter scale alike with n, at half the value)."""
    return 2 * (world - 1) / world


def op_bus_factor(op: str, world: int) -> float:
    """nccl-tests' bus factor of ``op`` (``doc/PERFORMANCE.md``): bus bandwidth = bytes /
    time × this, bytes being the whole array (:data:`OPS`' convention); all-reduce
    2(n−1)/n, all-gather and reduce-scatter (n−1)/n."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r} (known: {', '.join(OPS)})")
    return bus_factor(world) / (1 if op == "all_reduce" else 2)


def bus_bandwidth_gbps(op: str, nbytes: float, us: float, world: int) -> float:
    """nccl-tests' bus bandwidth of one ``op`` of ``nbytes`` that took ``us``, GB/s: what
    compares across rank counts (a ring moves this much over each GPU's link)."""
    return nbytes / (us * 1e3) * op_bus_factor(op, world)


def interpolate(table: tuple[tuple[int, float], ...], nbytes: float) -> float:
    """µs of ``nbytes`` from a ``(bytes, µs)`` table, log-log (module docstring), over the
    table's lower envelope from above: a measured size can come out faster than a smaller
    one (the shipped H100 all-gather: 102.0 µs at 16 MiB, 95.7 at 32 MiB), but fewer bytes
    never take longer (they could be sent as the larger message), so each size takes the
    fastest time of any size at or above it, and halving a collective's bytes never prices
    it slower. (A running maximum would let one slow small size price every larger one.)"""
    table = _non_decreasing(table)
    (b0, t0), (bn, tn) = table[0], table[-1]
    if nbytes <= b0:
        return t0
    if nbytes >= bn:
        return tn * nbytes / bn
    for (b1, t1), (b2, t2) in zip(table, table[1:]):
        if b1 <= nbytes <= b2:
            x = (math.log(nbytes) - math.log(b1)) / (math.log(b2) - math.log(b1))
            return math.exp(math.log(t1) + x * (math.log(t2) - math.log(t1)))
    return tn  # unreachable: the table is ascending


def _non_decreasing(table: tuple[tuple[int, float], ...]) -> tuple[tuple[int, float], ...]:
    out, fastest = [], math.inf
    for nbytes, us in reversed(table):
        fastest = min(fastest, us)
        out.append((nbytes, fastest))
    return tuple(reversed(out))


def host_costs_at(shipped: Mapping[str, float], speed: float) -> dict[str, float]:
    """The engines' host costs ``shipped`` (a typical host's, µs) on a host ``speed``
    times as slow, as a calibrated profile states them: every engine at that one speed."""
    return host_costs_by_engine(shipped, {}, speed)


def host_costs_by_engine(shipped: Mapping[str, float], speeds: Mapping[str, float],
                         default: float = 1.0) -> dict[str, float]:
    """The engines' host costs ``shipped`` (a typical host's, µs) on a host where each
    engine of :data:`ENGINE_HOST_KEYS` runs ``speeds[engine]`` times as slow (``default``
    for an engine not measured): what ``shapelint calibrate``'s parallel host probe
    writes, each engine's terms scaled together."""
    unknown = set(speeds) - set(ENGINE_HOST_KEYS)
    if unknown:
        raise ValueError(f"unknown engine(s) {sorted(unknown)} (known: {', '.join(ENGINE_HOST_KEYS)})")
    return {k: round(float(shipped[k]) * speeds.get(engine, default), 1)
            for engine, keys in ENGINE_HOST_KEYS.items() for k in keys}


def parse_collectives(doc: Any, where: str) -> Collectives | None:
    """The checked ``collectives:`` mapping of a profile, None where it has none."""
    if doc is None:
        return None
    if not isinstance(doc, Mapping):
        raise ShapelintError(f"{where}: collectives must be a mapping, got {show(doc)}")
    tables = tuple((op, _table(doc.get(op), f"{where}: collectives.{op}")) for op in OPS)
    host = doc.get("host_us")
    if not isinstance(host, Mapping) or set(host) != set(HOST_KEYS):
        found = ", ".join(sorted(map(str, host))) if isinstance(host, Mapping) else show(host)
        raise ShapelintError(f"{where}: collectives.host_us must give {', '.join(HOST_KEYS)}, got {found} "
                             "(`shapelint calibrate` writes them)")
    return Collectives(
        world=int(_positive(doc.get("world"), f"{where}: collectives.world", minimum=2)),
        tables=tables,
        network_busbw_gbps=_positive(doc.get("network_busbw_gbps"), f"{where}: collectives.network_busbw_gbps"),
        network_latency_us=_positive(doc.get("network_latency_us"), f"{where}: collectives.network_latency_us",
                                     minimum=0),
        overlap_slowdown=_positive(doc.get("overlap_slowdown"), f"{where}: collectives.overlap_slowdown", minimum=0),
        host=HostCosts(**{k: _positive(host[k], f"{where}: collectives.host_us.{k}", minimum=0) for k in HOST_KEYS}),
        source=str(doc.get("source", "")),
    )


def collectives_doc(c: Collectives) -> dict[str, Any]:
    """``c`` as the ``collectives:`` mapping :func:`parse_collectives` reads back (what
    ``shapelint calibrate`` writes into a profile): ``parse_collectives(collectives_doc(c))
    == c``."""
    doc: dict[str, Any] = {"source": c.source, "world": c.world}
    doc.update({op: [[b, us] for b, us in c.table(op)] for op in OPS})
    doc.update({"network_busbw_gbps": c.network_busbw_gbps, "network_latency_us": c.network_latency_us,
                "overlap_slowdown": c.overlap_slowdown,
                "host_us": {k: getattr(c.host, k) for k in HOST_KEYS}})
    return doc


def _positive(value: Any, what: str, minimum: float = 1e-12) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < minimum:
        raise ShapelintError(f"{what} must be a number of at least {minimum:g}, got {show(value)}")
    return float(value)


def _table(value: Any, what: str) -> tuple[tuple[int, float], ...]:
    if not isinstance(value, list) or not value:
        raise ShapelintError(f"{what} must be a list of [bytes, µs] pairs, got {show(value)}")
    rows = []
    for row in value:
        if not isinstance(row, list) or len(row) != 2:
            raise ShapelintError(f"{what} must be a list of [bytes, µs] pairs, got {show(row)}")
        rows.append((int(_positive(row[0], what, minimum=1)), _positive(row[1], what)))
    if any(b2 <= b1 for (b1, _), (b2, _) in zip(rows, rows[1:])):
        raise ShapelintError(f"{what}: sizes must ascend")
    return tuple(rows)


__all__ = ["ENGINE_HOST_KEYS", "HOST_KEYS", "OPS", "Collectives", "HostCosts", "bus_bandwidth_gbps", "bus_factor",
           "collectives_doc", "host_costs_at", "host_costs_by_engine", "interpolate", "op_bus_factor", "parse_collectives"]
