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
   not reported at all, whatever it saves on the GPU: on a host-bound step the kernels
   it adds cost host time where the GEMM time it saves is hidden. Its GPU side costs
   (slicing a padded tensor back) run where the step runs them, next to the layer they
   slice (``shapelint.price.step.side_at``), hidden as that layer's saving is. When
   two rules propose the same change on the same modules, the larger saving is kept.
4. Severity follows the saving: the rule's, but an ``error`` needs a speedup on the
   covered work of at least ``error_speedup`` (1.25x); below it, a ``warning``.

Findings are ranked by the time they save per step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

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
from shapelint.model.thresholds import ERROR_SPEEDUP, MIN_LOSS, MIN_SPEEDUP, MIN_STEP_SHARE, NEAR_BEST
from shapelint.physics.reshape import candidates, smaller
from shapelint.price.gemm import gemm_ms
from shapelint.price.grouping import deduplicated, group
from shapelint.price.kernels import work_ms
from shapelint.price.layout_change import is_layout_change, layout_finding
from shapelint.price.saving import StepModel

#: a step saving within this much of zero is no change (float rounding of the timeline)
STEP_NOISE_MS = 1e-9


@dataclass(frozen=True)
class Policy:
    """The reporting policy (see the module docstring)."""

    min_loss: float = MIN_LOSS
    min_speedup: float = MIN_SPEEDUP
    min_step_share: float = MIN_STEP_SHARE
    error_speedup: float = ERROR_SPEEDUP

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



def price(proposals: Iterable[Proposal], gemms: Sequence[Gemm], hw: Hardware,
          policy: Policy = Policy(), on: StepModel | None = None) -> list[Finding]:
    """The findings the policy keeps, grouped over repeated layers, ranked by saving:
    on the training step ``on`` when given (each finding carries its step saving),
    else on the step's GEMMs."""
    priced = [f for p in proposals if (f := price_one(p, hw, policy)) is not None]
    found = deduplicated(group(priced))
    if on is not None:
        stepped = [on.priced(f) for f in found]
        kept = [f for f, gpu_saved in stepped
                if policy.worth_on_step(gpu_saved, on.before.ms) and not policy.slows_the_step(f.step_ms_saved)]
        return sorted(kept, key=lambda f: (-(f.step_ms_saved or 0.0), -f.saved_ms))
    step_ms = sum(gemm_ms(g, hw) for g in gemms)
    kept = [f for f in found if policy.worth_on_step(f.saved_ms, step_ms)]
    return sorted(kept, key=lambda f: -f.saved_ms)



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
    if is_layout_change(change):  # no GEMM moves: the step model prices it (StepModel.priced)
        return layout_finding(p, change)
    now = p.now or Work(p.gemms)
    before_ms = work_ms(now, hw)
    after_each = _after_ms(p, change, hw)
    added_ms = work_ms(change.added, hw)
    after_ms = sum(after_each) + added_ms
    if not policy.worth(before_ms, after_ms):
        return None
    recorded = [gemm_ms(g, hw) for g in p.gemms]
    total = sum(recorded) or 1.0
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
        facts=tuple(dict(change.facts).items()),
        alternatives=_alternatives(p, sizes, before_ms, hw, policy),
        after=change.after,
        slices=change.slices,
        vocab=change.vocab,
        fuses=change.fuses,
        parallel=change.parallel,
        memory_format=change.memory_format,
        recorded_ms=sum(recorded) if p.now is not None else None,
        reference_ms=tuple((name, work_ms(work, hw)) for name, work in p.references),
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


__all__ = ["NEAR_BEST", "STEP_NOISE_MS", "Policy", "near_best", "price", "price_one"]
