"""The whole training step: every kernel of forward, backward and the optimizer,
priced on a GPU profile, in eager mode or as ``torch.compile`` runs it.

The default step (what the H100 measurements in ``docs/step-measurements.md`` ran):
bf16 autocast over fp32 weights, the model's own loss, ``loss.backward()``, fused
AdamW, ``zero_grad(set_to_none=True)``. Per kernel, from the profile (``Hardware``
and its ``step`` table):

    GEMM              shapelint.price.gemm (one kernel per op)
    attention         its GEMMs (shapelint.price.gemm) on the kernel PyTorch picks
                      (shapelint.physics.attention), each kernel at its own rate: cuDNN
                      and flash at the fitted fused rate, the memory-efficient kernel at
                      efficient_attention_efficiency of it (its own bias rate and
                      dropout cost); dropout per score element it computes, a bias's
                      gradient written expanded, flash's copies in and out of a padded
                      head dimension; PyTorch's math kernel as unfused fp32 GEMMs and
                      softmax passes
    memory-bound op   max(bytes / (bandwidth · efficiency of its class), min_kernel_us);
                      a copy or pointwise op on a strided tensor at the strided rate
    optimizer         passes · parameter bytes / (bandwidth · optimizer_efficiency),
                      in ceil(tensors / 36) or ceil(elements / (65536 · 320)) launches
    GPU time          kernel time + kernels · kernel_gap_us
    host time         kernels · host_us_per_kernel + parameter tensors · host_us_per_tensor
                      (training); the CPU issuing the step (compile_host_* under
                      torch.compile, where the per-tensor part dominates: ``host_costs``)
    graph breaks      under torch.compile, where dynamo splits the step into more graphs
                      (``shapelint.load.compile_probe`` runs the model to find them): the ops
                      between the graphs eager, and compile_host_us_per_graph of host
                      time per graph beyond one forward and one backward graph
    step              max(GPU time, host time); in eager mode, where the host reads a
                      value from the GPU inside the step (transformers' packed-sequence
                      check in a causal LM's forward), the timeline of host and GPU
                      through those waits (``serialised_ms``)

**torch.compile**: GEMMs as Inductor runs them (pad_mm, its layouts) and the
memory-bound ops as the kernels it fuses them into (``shapelint.price.inductor``); the
optimizer stays eager, as ``torch.compile(model)`` leaves it. Attention: a Hugging Face
model whose mask transformers skips in eager gets an explicit mask under compile (torch
< 2.14), and PyTorch picks the kernel for that call
(``shapelint.physics.attention.compiled_call``): a fused kernel then computes every
score tile (no causal skipping) at ``masked_attention_efficiency`` of its rate, and
the math kernel runs its forward GEMMs in fp32 and its backward GEMMs in the compute
dtype, with one softmax kernel each way (``docs/step-measurements.md``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from shapelint.hardware import Hardware
from shapelint.model.graphs import GraphBreaks
from shapelint.model.parallel import Communication
from shapelint.model.records import Gemm, Op, Slice
from shapelint.physics.conv import as_channels_last
from shapelint.price.gemm import gemm_ms, kernels
from shapelint.price.host import Issued, between_graphs, host_costs, serialised_ms
from shapelint.price.inductor import (
    Fused,
    compiled_gemm_ms,
    fused_regions,
    layout_optimized,
    transposed_made_in_graph,
)
from shapelint.price.kernels import (
    MODES,
    OPTIMIZER_PASSES,
    Mode,
    attention_ms,
    eager_launches,
    memory_kernel_ms,
    op_ms,
    optimizer_ms,
)


@dataclass(frozen=True)
class StepTime:
    """One training step's estimate: ``ms`` is the step, the larger of the GPU time
    and the host time to issue its kernels."""

    ms: float
    gpu_ms: float
    host_ms: float
    gemm_ms: float
    kernels: int
    mode: Mode
    #: kernel time per class (gemm, attention, pointwise, reduction, copy, fill, fused,
    #: between_graphs, optimizer)
    by_class: tuple[tuple[str, float], ...] = ()
    #: times the host waits for the GPU inside the step (eager: a value read on the host)
    syncs: int = 0
    #: host time of the graphs beyond one forward and one backward graph and of the ops
    #: run eagerly between them (``between_graphs``; compile mode, where probed)
    graphs_host_ms: float = 0.0
    #: the step on the fastest and the slowest measured host (the profile's
    #: ``host_speed_fastest`` / ``host_speed_slowest``): one number where the GPU bounds
    #: the step on both, a range where the host does
    ms_range: tuple[float, float] = (0.0, 0.0)
    #: why a compiled step is estimated slower than the same step eager ("" otherwise;
    #: ``shapelint.price.saving.StepModel``)
    note: str = ""
    #: GPU time the step waits for communication (``shapelint.price.communication``;
    #: several GPUs only), and the GPUs the step runs on (this is each one's step)
    comm_ms: float = 0.0
    world_size: int = 1
    #: every collective of the step and what it adds (several GPUs only)
    communication: Communication | None = None

    @property
    def bound(self) -> str:
        return "host" if self.host_ms > self.gpu_ms else "gpu"

    @property
    def gemm_share(self) -> float:
        return self.gemm_ms / self.ms if self.ms else 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "step_ms": round(self.ms, 4), "gpu_ms": round(self.gpu_ms, 4), "host_ms": round(self.host_ms, 4),
            "gemm_ms": round(self.gemm_ms, 4), "kernels": self.kernels, "mode": self.mode, "bound": self.bound,
            "by_class": {k: round(v, 4) for k, v in self.by_class}, "host_syncs": self.syncs,
            "step_ms_range": [round(v, 4) for v in self.ms_range],
            **({"note": self.note} if self.note else {}),
            **({"comm_ms": round(self.comm_ms, 4), "world_size": self.world_size} if self.world_size > 1 else {}),
        }


@dataclass(frozen=True)
class Step:
    """What the step model needs from a capture."""

    gemms: Sequence[Gemm]
    ops: Sequence[Op]
    #: (element count, bytes per element) of each trained parameter
    params: Sequence[tuple[int, int]]
    training: bool = True
    #: positions in ``ops`` before which an eager step's host reads a value from the GPU
    #: (``shapelint.capture.recorder.note_host_sync``), waiting for every kernel issued before
    syncs: tuple[int, ...] = ()
    #: positions in ``ops`` where torch.compile's graph breaks (``shapelint.capture.recorder.note_graph_break``)
    breaks: tuple[int, ...] = ()
    #: the graphs torch.compile calls and the ops it runs eagerly between them, where
    #: probed (``shapelint.load.compile_probe``); None: one forward and one backward graph
    graphs: GraphBreaks | None = None

    @cached_property
    def host_reads(self) -> tuple[int, ...]:
        """Where the host waits for the GPU: the loader's and capture's syncs, and each
        GEMM op that aten runs group by group (it copies the group offsets to the host
        first: MoE experts in fp32), in eager and compiled steps alike (transformers'
        compiled fallback reads them too)."""
        grouped = (at for at, op in enumerate(self.ops)
                   if op.kind == "gemm" and any(kernels(self.gemms[i]) > 1 for i in op.gemms))
        return tuple(sorted({*self.syncs, *grouped}))

    @cached_property
    def regions(self) -> list[Fused]:
        """The fused kernels of a compiled step (they do not depend on GEMM times)."""
        return fused_regions(self.ops)

    @cached_property
    def channels_last_convs(self) -> bool:
        """Whether torch.compile runs this step's convolutions channels-last whatever
        their layout (``shapelint.price.inductor.layout_optimized``)."""
        return layout_optimized(self.gemms, sum(1 for op in self.ops if not op.backward))

    @cached_property
    def made_in_graph(self) -> dict[int, tuple[str, ...]]:
        """Per 2-D GEMM, its transposed operands that Inductor makes in the same compiled
        graph (``shapelint.price.inductor.transposed_made_in_graph``)."""
        return transposed_made_in_graph(self.ops, self.gemms, self.breaks)


# -- the step ----------------------------------------------------------------------------


@dataclass
class Timeline:
    """What the host issues, in order (``issued``: one entry per eager op, so that a
    host sync keeps its position), and the kernel time per class."""

    per_kernel_us: float
    classes: dict[str, float] = field(default_factory=dict)
    issued: list[Issued] = field(default_factory=list)

    def add(self, kind: str, ms: float, launched: int, host_ms: float = 0.0) -> None:
        """``launched`` kernels of class ``kind`` taking ``ms``; the host pays
        ``per_kernel_us`` each, plus ``host_ms``."""
        self.classes[kind] = self.classes.get(kind, 0.0) + ms
        self.issued.append((ms, launched, launched * self.per_kernel_us * 1e-3 + host_ms))

    def add_at(self, at: int, kind: str, ms: float) -> None:
        """``ms`` more kernel time of class ``kind`` on the GPU where the host issued
        entry ``at`` (its kernels run there; no entry moves, so the syncs keep their
        positions)."""
        self.classes[kind] = self.classes.get(kind, 0.0) + ms
        kernel_ms, launched, host_ms = self.issued[at]
        self.issued[at] = (kernel_ms + ms, launched, host_ms)

    def time(self, hw: Hardware, mode: Mode, syncs: tuple[int, ...], graphs_host: float) -> StepTime:
        """The step: the larger of GPU and host time, or the timeline through the host's
        waits; and the same on the fastest and the slowest measured host."""
        kernels = sum(n for _, n, _ in self.issued)
        gpu = sum(self.classes.values()) + kernels * hw.step.kernel_gap_us * 1e-3
        host = sum(h for _, _, h in self.issued)
        gemm = self.classes.get("gemm", 0.0) + self.classes.get("attention", 0.0)
        low, ms, high = (self._ms(gpu, syncs, hw, speed)
                         for speed in (hw.step.host_speed_fastest, 1.0, hw.step.host_speed_slowest))
        return StepTime(ms, gpu, host, gemm, kernels, mode, tuple(sorted(self.classes.items())), len(syncs),
                        graphs_host, (min(low, ms), max(high, ms)))

    def _ms(self, gpu: float, syncs: tuple[int, ...], hw: Hardware, host_speed: float) -> float:
        """The step on a host that takes ``host_speed`` times the profile's host time."""
        issued = self.issued if host_speed == 1.0 else [(k, n, h * host_speed) for k, n, h in self.issued]
        if syncs:
            return serialised_ms(issued, syncs, hw.step.kernel_gap_us)
        return max(gpu, sum(h for _, _, h in issued))


def step_time(step: Step, hw: Hardware, mode: Mode = "eager", optimizer: str = "adamw",
              gemm_times: Mapping[int, float] | None = None, extra_ms: float = 0.0,
              fused: frozenset[int] = frozenset(), extra_at: Mapping[int, float] | None = None) -> StepTime:
    """The step's estimate. ``gemm_times`` overrides GEMM records' times (a finding's
    after-times); ``extra_ms`` adds GPU time (a change's side costs) at the end of the
    step, ``extra_at`` at the positions in ``step.ops`` where it runs (``side_at``);
    ``fused`` are the positions of memory-bound ops a change folds into its kernels
    (``Change.fuses``), which the step then runs no more."""
    per_kernel_us, per_tensor_us = host_costs(hw, mode)
    t = Timeline(per_kernel_us)
    _issue_ops(t, step, hw, mode, gemm_times or {}, fused)
    graphs_host = _issue_compiled(t, step, hw, fused) if mode == "compile" else 0.0
    if step.training:
        opt_ms, launches = optimizer_ms(step.params, optimizer, hw)
        if launches:
            t.add("optimizer", opt_ms, launches, len(step.params) * per_tensor_us * 1e-3)
    if extra_ms:
        t.add("side", extra_ms, 0)
    for at, ms in (extra_at or {}).items():
        t.add_at(at, "side", ms)
    fallback_reads = tuple(i for i in step.host_reads if i not in step.syncs)
    return t.time(hw, mode, step.host_reads if mode == "eager" else fallback_reads, graphs_host)


def _issue_ops(t: Timeline, step: Step, hw: Hardware, mode: Mode, gemm_times: Mapping[int, float],
               fused: frozenset[int] = frozenset()) -> None:
    """The ops of the capture in order: GEMM and attention kernels; the memory-bound ops
    eager (compiled, they are the fused regions of `_issue_compiled`)."""

    def record_ms(i: int) -> float:
        if i in gemm_times:
            return gemm_times[i]
        g = step.gemms[i]
        if mode != "compile":
            return gemm_ms(g, hw)
        if g.role == "conv" and step.channels_last_convs:
            g = as_channels_last(g)
        return compiled_gemm_ms(g, hw, step.made_in_graph.get(i, ()))

    for op in step.ops:
        if op.kind == "attention" and op.gemms:
            t.add("attention", *attention_ms([step.gemms[i] for i in op.gemms], hw, mode, gemm_times))
        elif op.kind in ("gemm", "attention"):
            launched = max((kernels(step.gemms[i]) for i in op.gemms), default=1)
            # compiled, transformers' per-expert fallback is a Python loop: eager launches
            python = (hw.step.host_us_per_kernel - t.per_kernel_us) * 1e-3 * launched if launched > 1 else 0.0
            t.add(op.kind, sum(record_ms(i) for i in op.gemms) if op.gemms else hw.min_gemm_us * 1e-3, launched,
                  python if mode == "compile" else 0.0)
        elif mode == "eager" and op.index not in fused:
            t.add(op.kind, op_ms(op, hw), eager_launches(op))
        else:
            t.issued.append((0.0, 0, 0.0))  # fused into the regions; keeps positions for syncs


def _issue_compiled(t: Timeline, step: Step, hw: Hardware, fused: frozenset[int] = frozenset()) -> float:
    """A compiled step's fused kernels (without the ops a change folds away), and what
    its graph breaks run between graphs; the host time of the latter."""
    regions = fused_regions([op for op in step.ops if op.index not in fused]) if fused else step.regions
    for region in regions:
        t.add("fused", region.ms(hw), region.kernels(hw))
    if step.graphs is None:
        return 0.0
    kernel_ms, ops, host_ms = between_graphs(step.graphs, hw, step.training)
    t.issued.append((kernel_ms, ops, host_ms))
    t.classes["between_graphs"] = kernel_ms
    return host_ms


# -- side costs of a change ---------------------------------------------------------------


def slice_ms(s: Slice, hw: Hardware, mode: Mode, training: bool) -> float:
    """What slicing a padded tensor back costs a step: in eager mode the forward's
    consumer reads the slice strided (the ``.float()`` upcast of sliced logits) and
    the backward zero-fills the padded gradient and copies the slice's gradient into
    it; compiled, one fused kernel writes the padded gradient strided."""
    st = hw.step
    bw = hw.memory_bandwidth_gbps * 1e9
    cols_bytes = s.rows * s.cols * s.element_bytes
    padded_bytes = s.rows * s.padded * s.element_bytes
    if mode == "compile":
        return memory_kernel_ms(padded_bytes, st.strided_copy_efficiency, hw) if training else 0.0
    strided_read = 1e3 * cols_bytes * (1 / st.strided_copy_efficiency - 1 / st.elementwise_efficiency) / bw
    if not training:
        return strided_read
    fill = memory_kernel_ms(padded_bytes, st.elementwise_efficiency, hw)
    copy_in = memory_kernel_ms(2 * cols_bytes, st.strided_copy_efficiency, hw)
    return strided_read + fill + copy_in


def side_ms(slices: Iterable[Slice], hw: Hardware, mode: Mode, training: bool) -> float:
    return sum(slice_ms(s, hw, mode, training) for s in slices)


def side_at(step: Step, placed: Iterable[tuple[Slice, Sequence[int]]], hw: Hardware, mode: Mode
            ) -> dict[int, float]:
    """Each slice's cost (``slice_ms``) at the position in ``step.ops`` of the first op that
    runs one of its GEMMs (the output layer whose logits it slices: the strided read and
    the padded gradient run next to it). There the GPU runs it in the host's shadow
    wherever the host bounds that part of the step, as it runs the GEMM time the padding
    saves; at the end of the step, after the host has issued everything, it would show
    in full (Whisper-small's padded vocabulary was priced 0.68 ms slower so). A slice
    whose GEMMs no op runs stays at the end (position -1)."""
    where = {i: at for at, op in enumerate(step.ops) for i in op.gemms}
    first: dict[Slice, Sequence[int]] = {}
    for s, gemms in placed:  # two findings that slice the same tensor pay for it once
        first.setdefault(s, gemms)
    out: dict[int, float] = {}
    for s, gemms in first.items():
        at = min((where[i] for i in gemms if i in where), default=-1)
        out[at] = out.get(at, 0.0) + slice_ms(s, hw, mode, step.training)
    return out


__all__ = ["MODES", "OPTIMIZER_PASSES", "Mode", "Step", "StepTime", "Timeline", "between_graphs", "side_at",
           "side_ms", "slice_ms", "step_time"]
