"""Price: every proposal of the rules becomes a finding with its estimated before and
after times, or is dropped, by one reporting policy; and the step estimate.

The reporting policy (``Policy``), in one place:

1. A proposal is priced on the work it covers: its GEMMs (as the GPU runs them now,
   ``Proposal.now``) against the changed GEMMs plus what the change adds. A gain in
   ``throughput`` (a padded layer, a larger batch) is counted per unit of work.
2. It is reported when it saves at least ``min_loss`` (5%) of that work's time and
   its speedup on it is at least ``min_speedup`` (1.05x): below that, the estimate's
   own error (about 10% per GEMM against measurements) can flip the sign. Whatever
   the thresholds (``--min-loss 0``), a saving of zero or less is never reported.
3. Repeated layers (``h.0.mlp``, ``h.1.mlp``...) with the same proposal are grouped
   into one finding; a group is reported only when it saves at least
   ``min_step_share`` (1%) of the training step's estimated time
   (``shapelint.price.step``: the whole step, eager or compiled, side costs
   included; GPU time where the host bounds the step, since that saving shows once
   the step is GPU-bound). Without a step model (``price`` alone) the share is of
   the step's GEMM time. Advice worth less than that is not worth a user's time.
   The saving must be positive here too (``--min-step-share 0`` kept a finding that
   saved nothing), and a change the step model estimates makes the step slower is
   not reported at all, whatever it saves on the GPU: on a host-bound step its own
   costs (slicing a padded tensor back, the kernels it adds) can land on the timeline
   where the GEMM time it saves is hidden (Whisper-small's vocabulary: 5.21 ms of GPU
   time saved, the step 0.68 ms slower, was reported as an error). When two rules
   propose the same change on the same modules, the larger saving is kept.
4. Severity follows the saving: the rule's, but an ``error`` needs a speedup on the
   covered work of at least ``error_speedup`` (1.25x); below it, a ``warning``.

Findings are ranked by the time they save per step.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from shapelint.hardware import Hardware
from shapelint.model.records import (
    Alternative,
    Change,
    Finding,
    Gemm,
    Proposal,
    Severity,
    SizeSearch,
    Work,
)
from shapelint.physics.reshape import candidates, smaller
from shapelint.price.gemm import gemm_ms, work_ms
from shapelint.price.step import Mode, Step, StepTime, inductor_laid_out, pad_mm_padded, side_ms, step_time

#: a candidate size within this fraction of the best time counts as reaching it
NEAR_BEST = 0.01

#: a step saving within this much of zero is no change (float rounding of the timeline)
STEP_NOISE_MS = 1e-9


@dataclass(frozen=True)
class Policy:
    """The reporting policy (see the module docstring)."""

    min_loss: float = 0.05
    min_speedup: float = 1.05
    min_step_share: float = 0.01
    error_speedup: float = 1.25

    def worth(self, before_ms: float, after_ms: float) -> bool:
        """Rule 2: the saving on the covered work is positive and worth reporting."""
        return (before_ms > 0 and 0 < after_ms < before_ms and after_ms <= (1 - self.min_loss) * before_ms
                and before_ms / after_ms >= self.min_speedup)

    def worth_on_step(self, saved_ms: float, step_ms: float) -> bool:
        """Rule 3: the time saved on the step (GPU time, see the module docstring) is
        positive and at least ``min_step_share`` of the step."""
        return saved_ms > 0 and saved_ms >= self.min_step_share * step_ms

    def severity(self, rule: Severity, speedup: float) -> Severity:
        """Rule 4 on the covered work: an error needs ``error_speedup`` there."""
        return "warning" if rule == "error" and speedup < self.error_speedup else rule

    @staticmethod
    def slows_the_step(step_ms_saved: float | None) -> bool:
        """Rule 3: the step model estimates the step slower with the change
        (``step_ms_saved`` None: a gain in throughput, not priced as step time)."""
        return step_ms_saved is not None and step_ms_saved < -STEP_NOISE_MS


@dataclass(frozen=True)
class StepEstimate:
    """GEMM time of one step (forward + backward), before and after every suggestion."""

    ms: float
    ms_after: float

    @property
    def speedup(self) -> float:
        return self.ms / self.ms_after if self.ms_after else 1.0


def price(proposals: Iterable[Proposal], gemms: Sequence[Gemm], hw: Hardware,
          policy: Policy = Policy(), on: StepModel | None = None) -> list[Finding]:
    """The findings the policy keeps, grouped over repeated layers, ranked by saving:
    on the training step ``on`` when given (each finding carries its step saving),
    else on the step's GEMMs."""
    priced = [f for p in proposals if (f := price_one(p, hw, policy)) is not None]
    found = _deduplicated(group(priced))
    if on is not None:
        stepped = [on.priced(f) for f in found]
        kept = [f for f, gpu_saved in stepped
                if policy.worth_on_step(gpu_saved, on.before.ms) and not policy.slows_the_step(f.step_ms_saved)]
        return sorted(kept, key=lambda f: (-(f.step_ms_saved or 0.0), -f.saved_ms))
    step_ms = sum(gemm_ms(g, hw) for g in gemms)
    kept = [f for f in found if policy.worth_on_step(f.saved_ms, step_ms)]
    return sorted(kept, key=lambda f: -f.saved_ms)


def _inductor_note(padded: int, laid_out: int, total: int) -> str:
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
    """The training step a finding is priced on (``shapelint.price.step``)."""

    def __init__(self, step: Step, hw: Hardware, mode: Mode = "eager", optimizer: str = "adamw") -> None:
        self.step, self.hw, self.mode, self.optimizer = step, hw, mode, optimizer
        self.before = step_time(step, hw, mode, optimizer)

    def after(self, findings: Iterable[Finding]) -> StepTime:
        """The step with every given (unsuppressed) finding applied; a GEMM two findings
        cover counts once, at the better after-time."""
        applied = [f for f in findings if f.gain != "throughput"]
        slices = dict.fromkeys(s for f in applied if not f.suppressed for s in f.slices)
        extra = side_ms(slices, self.hw, self.mode, self.step.training)
        return step_time(self.step, self.hw, self.mode, self.optimizer, best_after(applied), extra)

    def priced(self, f: Finding) -> tuple[Finding, float]:
        """``f`` with its step saving, and the GPU time it saves (the policy's measure)."""
        if f.gain == "throughput":
            return replace(f, step_ms=self.before.ms, step_ms_saved=None), f.saved_ms
        after = self.after([f])
        gpu_saved = self.before.gpu_ms - after.gpu_ms
        note = ""
        padded = {i for i in f.gemms if pad_mm_padded(self.step.gemms[i], self.hw)}
        laid_out = sum(1 for i in f.gemms if i not in padded and inductor_laid_out(
            self.step.gemms[i], self.step.made_in_graph.get(i, ()), self.hw))
        if self.mode == "compile" and (padded or laid_out):
            note = f"under torch.compile, {_inductor_note(len(padded), laid_out, len(f.gemms))}; this is what remains"
        elif self.mode == "compile" and any(dict(self.step.gemms[i].extra).get("compiled") == "math" for i in f.gemms):
            note = ("under torch.compile, transformers passes this attention a mask and PyTorch runs its math "
                    "kernel (fp32 scores in memory); after the change a fused kernel takes the mask")
        elif after.bound == "host" and gpu_saved > 0:
            note = (f"the step is bound by the host issuing its {self.before.kernels} kernels "
                    f"({self.before.host_ms:.1f} ms of host time; hosts differ up to 2x, `shapelint calibrate` "
                    f"measures yours); this saves {gpu_saved:.2f} ms of GPU time, which shows "
                    "once the step is GPU-bound (torch.compile, CUDA graphs, a larger batch)")
        return replace(f, step_ms=self.before.ms, step_ms_saved=self.before.ms - after.ms, step_note=note), gpu_saved


def price_one(p: Proposal, hw: Hardware, policy: Policy = Policy()) -> Finding | None:
    """Rules 1, 2 and 4 for one proposal: a finding, or None when it is not worth it."""
    sizes: tuple[int, ...] = ()
    if isinstance(p.change, SizeSearch):
        sizes = _search(p, p.change, hw)
        change = p.change.at(sizes)
        if p.change.fits and not p.change.fits(sizes[0]):
            return None
    else:
        change = p.change
    if change.suggestion.from_ == change.suggestion.to:
        return None
    now = p.now or Work(p.gemms)
    before_ms = work_ms(now, hw)
    after_each = _after_ms(p, change, hw)
    added_ms = work_ms(change.added, hw)
    after_ms = sum(after_each) + added_ms
    if not policy.worth(before_ms, after_ms):
        return None
    recorded = [gemm_ms(g, hw) for g in p.gemms]
    total = sum(recorded) or 1.0
    facts = dict(change.facts)
    if p.now is not None:
        facts["recorded_ms"] = sum(recorded)
    for name, work in p.references:
        facts[f"{name}_ms"] = work_ms(work, hw)
    return Finding(
        code=p.code,
        name=p.name,
        severity=policy.severity(p.severity, before_ms / after_ms),
        module=p.module,
        message=change.message,
        gemms=tuple(g.index for g in p.gemms),
        est_ms=before_ms,
        est_ms_after=after_ms,
        suggestion=change.suggestion,
        source=p.source or p.gemms[0].defined_at,
        gain=p.gain,
        gemm_ms_after=tuple(a + added_ms * r / total for a, r in zip(after_each, recorded)),
        facts=tuple(facts.items()),
        alternatives=_alternatives(p, sizes, before_ms, hw, policy),
        after=change.after,
        slices=change.slices,
    )


def _after_ms(p: Proposal, change: Change, hw: Hardware) -> list[float]:
    """Time after the change of each covered GEMM; per unit of the current work when
    the gain is in throughput."""
    if p.gain == "throughput":
        return [gemm_ms(a, hw) * g.flops / a.flops for g, a in zip(p.gemms, change.after)]
    return [gemm_ms(a, hw) for a in change.after]


def _cost(p: Proposal, change: Change, hw: Hardware) -> float:
    return sum(_after_ms(p, change, hw)) + work_ms(change.added, hw)


def near_best(sizes: Sequence[int], costs: Sequence[float]) -> int:
    """The first (smallest) size whose cost is within NEAR_BEST of the least."""
    floor = min(costs)
    return next(s for s, c in zip(sizes, costs) if c <= floor * (1 + NEAR_BEST))


def _search(p: Proposal, search: SizeSearch, hw: Hardware) -> tuple[int, ...]:
    """The sizes the search picks, each dimension in turn, the others held at their
    current choice (first, their smallest candidate)."""
    sizes = [candidates(d)[0] for d in search.dims]
    for i, dim in enumerate(search.dims):
        options = candidates(dim)
        costs = [_cost(p, search.at((*sizes[:i], c, *sizes[i + 1:])), hw) for c in options]
        sizes[i] = near_best(options, costs)
    return tuple(sizes)


def _alternatives(p: Proposal, sizes: tuple[int, ...], before_ms: float, hw: Hardware,
                  policy: Policy) -> tuple[Alternative, ...]:
    """The proposal's other changes and, for a size search with a ``fits`` test, the
    largest smaller size that passes it; each kept when worth it on its own, in wall
    clock time (a smaller layer does less work, and that is the point)."""
    others: list[tuple[Change, str]] = [(c, c.message) for c in p.alternatives]
    search = p.change
    if isinstance(search, SizeSearch) and search.fits is not None:
        down = next((c for c in smaller(search.dims[0]) if search.fits(c)), None)
        if down is not None:
            others.append((search.at((down, *sizes[1:])), "smaller and faster"))
    out = []
    for alt, note in others:
        after_ms = work_ms(Work(alt.after), hw) + work_ms(alt.added, hw)
        if policy.worth(before_ms, after_ms):
            out.append(Alternative(alt.suggestion, before_ms / after_ms, note))
    return tuple(out)


# -- grouping repeated layers -----------------------------------------------------------

#: a layer index inside a module path: ``h.3.mlp`` → ``h.*.mlp`` (also at the start: ``3.mlp``)
_INDEX = re.compile(r"(?:(?<=\.)|^)\d+(?=\.|$)")


def module_glob(paths: Sequence[str]) -> str:
    """``transformer.h.0.mlp`` + ``transformer.h.1.mlp`` → ``transformer.h.*.mlp``."""
    if len(paths) == 1:
        return paths[0]
    globbed = {_INDEX.sub("*", p) for p in paths}
    return globbed.pop() if len(globbed) == 1 else paths[0]


def group(findings: Sequence[Finding]) -> list[Finding]:
    """One finding per (rule, suggestion, location, message shape): repeated layers
    (every block of a transformer) become one finding listing their modules."""
    groups: dict[object, list[Finding]] = {}
    for f in findings:
        key = (f.code, f.suggestion, f.source, _INDEX.sub("*", f.module), f.message)
        groups.setdefault(key, []).append(f)
    out = []
    for members in groups.values():
        first = members[0]
        modules = tuple(dict.fromkeys(m.module for m in members))
        if len(members) == 1:
            out.append(replace(first, modules=modules))
            continue
        out.append(replace(
            first,
            module=module_glob(modules),
            modules=modules,
            gemms=tuple(i for m in members for i in m.gemms),
            after=tuple(a for m in members for a in m.after),
            est_ms=sum(m.est_ms for m in members),
            est_ms_after=sum(m.est_ms_after for m in members),
            gemm_ms_after=tuple(x for m in members for x in m.gemm_ms_after),
            slices=tuple(dict.fromkeys(x for m in members for x in m.slices)),
        ))
    return out


def _deduplicated(findings: Sequence[Finding]) -> list[Finding]:
    """Of the findings that propose the same change on the same modules, the one that
    saves most (two rules can reach the same size for different reasons)."""
    best: dict[object, Finding] = {}
    for f in findings:
        key = (f.suggestion, f.modules)
        if key not in best or f.saved_ms > best[key].saved_ms:
            best[key] = f
    return [f for f in findings if best[(f.suggestion, f.modules)] is f]


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
