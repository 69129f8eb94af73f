"""What a finding saves: on the whole training step (``StepModel``, the policy's
measure where the pipeline has a step model), and on the step's GEMMs alone
(``step_estimate``). A GEMM two findings cover counts once, at the better after-time
(``best_after``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from shapelint.hardware import Hardware
from shapelint.model.parallel import FSDP_GROUP_PARAMETER, ParallelChange, ParallelPlan
from shapelint.model.records import Finding, Gemm, Suggestion
from shapelint.model.thresholds import NEAR_BEST
from shapelint.price.communication import (
    Communication,
    applied,
    blocks_per_group_options,
    communication,
    with_communication,
)
from shapelint.price.gemm import gemm_ms
from shapelint.price.inductor import inductor_laid_out, pad_mm_padded
from shapelint.price.relaid import Relaid, Retrace, relaid_for
from shapelint.price.step import Mode, Step, StepTime, side_at, step_time


@dataclass(frozen=True)
class StepEstimate:
    """GEMM time of one step (forward + backward), before and after every suggestion."""

    ms: float
    ms_after: float

    @property
    def speedup(self) -> float:
        return self.ms / self.ms_after if self.ms_after else 1.0


def inductor_note(padded: int, laid_out: int, total: int) -> str:
    """What Inductor does itself to ``total`` GEMMs of a finding: pads ``padded`` of them
    (pad_mm) and writes a transposed operand of ``laid_out`` in an aligned layout
    (`inductor_laid_out`)."""
    def some(n: int) -> str:
        return ("these GEMMs" if total > 1 else "this GEMM") if n == total else f"{n} of these {total} GEMMs"
    parts = [f"Inductor's pad_mm pads {some(padded)} itself"] if padded else []
    if laid_out:
        which = ("the other" if laid_out == 1 else f"the other {laid_out}") if padded and padded + laid_out == total \
            else some(laid_out)
        parts.append(f"Inductor writes the transposed operand of {which} in an aligned layout")
    return ", and ".join(parts)


class StepModel:
    """The training step a finding is priced on (``shapelint.price.step``). ``relaid`` is
    the same step traced with the whole model in another memory format: a finding that
    converts the model (``Finding.memory_format``) is priced on it
    (``shapelint.price.relaid``). ``retrace`` traces it when the first such finding is
    priced (a convnet's second trace is paid only where its finding is); ``relaid_refused``
    is why the model did not run in that format, where it did not."""

    def __init__(self, step: Step, hw: Hardware, mode: Mode = "eager", optimizer: str = "adamw",
                 parallel: ParallelPlan | None = None, relaid: Relaid | None = None,
                 retrace: Retrace | None = None) -> None:
        self.step, self.hw, self.mode, self.optimizer, self.parallel = step, hw, mode, optimizer, parallel
        self._relaid, self._refused, self._retrace = relaid, "", retrace
        self.before = self._timed(step_time(self._rank_step, hw, mode, optimizer))
        if mode == "compile":
            eager = self._timed(step_time(self._rank_step, hw, "eager", optimizer))
            if self.before.ms > eager.ms:
                self.before = replace(self.before, note=self._slower_than_eager(eager))

    @property
    def relaid(self) -> Relaid | None:
        """The relaid step, traced on first use."""
        if self._retrace is not None:
            retrace, self._retrace = self._retrace, None
            self._relaid, self._refused = retrace()
        return self._relaid

    def settle(self) -> None:
        """The lint is priced: a relaid step no finding needed is not traced later (the
        retrace holds the loaded model)."""
        self._retrace = None

    @property
    def relaid_traced(self) -> Relaid | None:
        """The relaid step where it was traced (a finding needed it), without tracing it."""
        return self._relaid

    @property
    def relaid_refused(self) -> str:
        return self._refused if self.relaid is None else ""

    @property
    def _rank_step(self) -> Step:
        """The step one rank runs: under a parallel layout, its own parameters' optimizer."""
        return self._step_of(self.parallel)

    def _step_of(self, plan: ParallelPlan | None, step: Step | None = None) -> Step:
        step = step or self.step
        if plan is None or not plan.layout.parallel:
            return step
        return replace(step, params=plan.rank_params)

    def communication(self, one_gpu: StepTime | None = None, plan: ParallelPlan | None = None) -> Communication:
        """What the parallel layout (``plan``, default the step's) adds to the step (nothing on one GPU)."""
        plan = plan or self.parallel
        if plan is None or not plan.layout.parallel:
            return Communication()
        t = one_gpu or step_time(self._rank_step, self.hw, self.mode, self.optimizer)
        return communication(plan, t, self.hw, self.step.training)

    def _timed(self, one_gpu: StepTime, plan: ParallelPlan | None = None) -> StepTime:
        plan = plan or self.parallel
        if plan is None or not plan.layout.parallel:
            return one_gpu
        return with_communication(one_gpu, self.communication(one_gpu, plan), plan.layout.world_size, self.hw)

    def _slower_than_eager(self, eager: StepTime) -> str:
        """Why the compiled step is estimated slower than eager: the attention calls that
        get an explicit mask under torch.compile and run PyTorch's math kernel, the host
        time of graph breaks, or (else) the host."""
        b = self.before
        head = f"compiled, this step is estimated slower than eager ({b.ms:.1f} ms against {eager.ms:.1f} ms)"
        calls = sum(1 for op in self.step.ops if op.kind == "attention" and op.gemms and not op.backward
                    and dict(self.step.gemms[op.gemms[0]].extra).get("compiled") == "math")
        if calls:
            return (f"{head}: under torch.compile transformers passes {calls} attention call"
                    f"{'s' if calls > 1 else ''} an explicit mask that PyTorch's fused kernels refuse, so they run "
                    "its math kernel (fp32 scores in memory); eager they skip the mask")
        if b.graphs_host_ms > 0:
            return f"{head}: its graph breaks cost {b.graphs_host_ms:.1f} ms of host time"
        return f"{head}: the host issues it slower ({b.host_ms:.1f} ms against {eager.host_ms:.1f} ms)"

    def after(self, findings: Iterable[Finding]) -> StepTime:
        """The step with every given (unsuppressed) finding applied; a GEMM two findings
        cover counts once, at the better after-time. Where one converts the whole model's
        memory format, the step is the relaid one (its own GEMM and op times), with the
        other findings' GEMM after-times and fused ops carried over to it."""
        taken = [f for f in findings if f.gain != "throughput"]
        live = [f for f in taken if not f.suppressed]
        plan = self.parallel
        if plan is not None:
            plan = applied(plan, [f.parallel for f in live if f.parallel is not None])
        step, times, fused = self._applied(taken, plan)
        extra = side_at(step, [(s, f.gemms) for f in live for s in f.slices], self.hw, self.mode)
        return self._timed(step_time(step, self.hw, self.mode, self.optimizer, times, fused=fused, extra_at=extra),
                           plan)

    def _applied(self, taken: Sequence[Finding], plan: ParallelPlan | None
                 ) -> tuple[Step, dict[int, float], frozenset[int]]:
        """The step the findings ``taken`` run on (the relaid one where one converts the
        model's memory format), their GEMM after-times and the positions of the ops they fuse."""
        live = [f for f in taken if not f.suppressed]
        fused_at = [op.index for f in live for op in f.fuses]
        formats = [f.memory_format for f in live]
        relaid = relaid_for(formats, self.relaid) if any(m is not None for m in formats) else None
        if relaid is None:
            return self._step_of(plan), best_after(taken), frozenset(fused_at)
        others = best_after(f for f in taken if f.memory_format is None)
        return self._step_of(plan, relaid.step), others, relaid.ops(fused_at)

    def priced(self, f: Finding) -> tuple[Finding, float]:
        """``f`` with its step saving, and the GPU time it saves (the policy's measure)."""
        if f.parallel is not None and f.parallel.fsdp_blocks_per_group > 1:
            return self._grouped(f)
        if f.gain == "throughput":
            return replace(f, step_ms=self.before.ms, step_ms_saved=None), f.saved_ms
        after = self.after([f])
        gpu_saved = self.before.gpu_ms - after.gpu_ms
        note = self._compile_note(f.gemms) if self.mode == "compile" else ""
        if not note and after.bound == "host" and gpu_saved > 0:
            engines = " and the parallel engines' work" if self.before.world_size > 1 else ""
            note = (f"the step is bound by the host issuing its {self.before.kernels} kernels{engines} "
                    f"({self.before.host_ms:.1f} ms of host time; hosts differ up to 2x, `shapelint calibrate` "
                    f"measures yours); this saves {gpu_saved:.2f} ms of GPU time, which shows "
                    "once the step is GPU-bound (torch.compile, CUDA graphs, a larger batch)")
        note = "; ".join(n for n in (self._relaid_note(f), note) if n)  # a format the model refuses comes first
        return replace(f, step_ms=self.before.ms, step_ms_saved=self.before.ms - after.ms, step_note=note), gpu_saved

    def _relaid_note(self, f: Finding) -> str:
        """How a change of the model's memory format was priced: on the relaid step, or,
        where the model did not run in that format, on the covered GEMMs alone and why."""
        if f.memory_format is None:
            return ""
        if relaid_for([f.memory_format], self.relaid) is not None:
            return (f"priced on the step traced with the whole model {f.memory_format}: its batch norms and "
                    "pointwise ops change kernels with the convolutions")
        if self.relaid_refused:
            hint = " (.reshape where it views an activation)" if "view" in self.relaid_refused else ""
            return (f"the model as written does not run {f.memory_format} ({self.relaid_refused}): its forward "
                    f"must change first{hint}; priced on the convolutions alone")
        return ""

    def _grouped(self, f: Finding) -> tuple[Finding, float]:
        """An FSDP2 grouping finding: the smallest block count per group whose step saving
        is within ``NEAR_BEST`` of the best option's (``blocks_per_group_options``).
        Its measure is the step's saving, not the GPU's: merging groups cuts FSDP2's host
        work per group and the latency of each all-gather, and may expose more of them."""
        plan = self.parallel
        options = blocks_per_group_options(plan) if plan is not None else []
        if plan is None or not options:
            return replace(f, step_ms=self.before.ms, step_ms_saved=0.0), 0.0
        one_gpu = step_time(self._rank_step, self.hw, self.mode, self.optimizer)
        saved = {k: self.before.ms - self._timed(one_gpu, applied(plan, [ParallelChange(fsdp_blocks_per_group=k)])).ms
                 for k in options}
        best = max(saved.values())
        k = next(k for k in options if saved[k] >= best - NEAR_BEST * abs(best))
        blocks = len(plan.groups) - 1
        note = (f"{-(-blocks // k)} groups of up to {k} blocks instead of {blocks}; larger groups would gather more "
                "parameters at once than the root group, which FSDP2 keeps unsharded from the forward to the backward")
        parameter, from_ = (f.suggestion.parameter, f.suggestion.from_) if f.suggestion else (FSDP_GROUP_PARAMETER, 1)
        return replace(f, suggestion=Suggestion(parameter, from_, k),
                       parallel=ParallelChange(fsdp_blocks_per_group=k), step_ms=self.before.ms,
                       step_ms_saved=saved[k], step_note=note), saved[k]

    def _compile_note(self, gemms: Sequence[int]) -> str:
        """Why a compiled step saves less, or otherwise, than the GEMMs: Inductor already
        pads or lays out some of them, or the attention runs the math kernel."""
        padded = {i for i in gemms if pad_mm_padded(self.step.gemms[i], self.hw)}
        laid_out = sum(1 for i in gemms if i not in padded and inductor_laid_out(
            self.step.gemms[i], self.step.made_in_graph.get(i, ()), self.hw))
        if padded or laid_out:
            return f"under torch.compile, {inductor_note(len(padded), laid_out, len(gemms))}; this is what remains"
        if any(dict(self.step.gemms[i].extra).get("compiled") == "math" for i in gemms):
            return ("under torch.compile, transformers passes this attention a mask and PyTorch runs its math "
                    "kernel (fp32 scores in memory); after the change a fused kernel takes the mask")
        return ""


def step_estimate(gemms: Sequence[Gemm], findings: Sequence[Finding], hw: Hardware) -> StepEstimate:
    """Each GEMM counts once, at the best time any unsuppressed finding covering it promises."""
    before = {g.index: gemm_ms(g, hw) for g in gemms}
    after = best_after(findings)
    best = {i: min(ms, after.get(i, ms)) for i, ms in before.items()}
    return StepEstimate(sum(before.values()), sum(best.values()))


def best_after(findings: Iterable[Finding]) -> dict[int, float]:
    """Each covered GEMM's best after-time over the unsuppressed findings (a GEMM two
    findings cover counts once)."""
    times: dict[int, float] = {}
    for f in findings:
        if f.suppressed:
            continue
        for i, ms in zip(f.gemms, f.gemm_ms_after):
            times[i] = min(times.get(i, ms), ms)
    return times


__all__ = ["StepEstimate", "StepModel", "best_after", "inductor_note", "step_estimate"]
