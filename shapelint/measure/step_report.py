"""What ``--verify --step``'s blocks say, and the report it makes of them.

**Confirmation.** Each round of alternating blocks gives a speedup (*before*'s block mean
over the other's); the *noise* is half the range of those, at least :data:`NOISE_FLOOR`.
A change is *confirmed* when its measured speedup (median over median) is at least
``1 + noise``: a suggestion set that does not measure faster than the blocks scatter is
*not confirmed*.

**The report** (:func:`step_verification`) is the measurements beside the step model's
estimate, as :class:`shapelint.model.step_verification.StepVerification` (ms and ratios to
4 decimals).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from shapelint.measure.step_blocks import Samples, Schedule
from shapelint.model.records import Finding
from shapelint.model.step_verification import (
    AppliedFinding,
    FindingRef,
    StepComparison,
    StepVerification,
    UnappliedFinding,
    VariantRun,
)
from shapelint.pipeline.result import Result

#: the smallest noise a comparison assumes (0.5%): below it, a speedup is not confirmed
NOISE_FLOOR = 0.005


@dataclass(frozen=True)
class Comparison:
    """*before* against one other variant, timed in alternating blocks."""

    before: Samples
    after: Samples

    @property
    def speedup(self) -> float:
        return self.before.median / self.after.median if self.after.median > 0 else float("inf")

    @property
    def round_speedups(self) -> tuple[float, ...]:
        return tuple(b / a for b, a in zip(self.before.blocks, self.after.blocks) if a > 0)

    @property
    def noise(self) -> float:
        """Half the range of the per-round speedups, at least :data:`NOISE_FLOOR`."""
        r = self.round_speedups
        return max(NOISE_FLOOR, (max(r) - min(r)) / 2 if len(r) > 1 else 0.0)

    @property
    def threshold(self) -> float:
        return 1.0 + self.noise

    @property
    def confirmed(self) -> bool:
        return self.speedup >= self.threshold

    def reported(self) -> StepComparison:
        """As the report gives it (ms and ratios to 4 decimals)."""
        b, a = self.before.median, self.after.median
        return StepComparison(round(b, 4), round(a, 4), round(b - a, 4), round(self.speedup, 4), round(self.noise, 4),
                              round(self.threshold, 4), self.confirmed)


@dataclass(frozen=True)
class Timed:
    """*before* timed against one changed variant (``after`` set), or alone: the samples,
    each variant's run and the order the blocks ran in."""

    before: Samples
    before_run: VariantRun
    order: tuple[str, ...]
    after: Samples | None = None
    after_run: VariantRun | None = None

    @property
    def comparison(self) -> Comparison | None:
        return Comparison(self.before, self.after) if self.after is not None else None


@dataclass(frozen=True)
class Measurements:
    """What ``verify_result`` measured of one target: the step with every applicable
    suggestion against *before* (or *before* alone, when none applies), and each finding's
    own comparison (or why its variant could not be built), by its index in ``applied``."""

    timed: Timed
    applied: tuple[Finding, ...]
    not_applied: tuple[UnappliedFinding, ...]
    each: dict[int, Timed | str]
    #: how the findings were measured one by one (a note when they were not)
    per_finding_note: str
    fused_optimizer: bool | None


def _r(x: float | None, n: int = 4) -> float | None:
    return None if x is None else round(x, n)


def device_name(device: str) -> str:
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(device)
    return torch.device(device).type


def step_verification(r: Result, m: Measurements, schedule: Schedule, device: str, compiled: bool) -> StepVerification:
    """``r``'s measured step beside its estimate (before and after the applied findings)."""
    assert r.step_model is not None and r.step_time is not None
    est = r.step_time.ms
    est_after = r.step_model.after(list(m.applied)).ms if m.applied else est
    est_speedup = _r(est / est_after if est_after else None)
    c = m.timed.comparison
    compared = c.reported() if c is not None else None
    measured_ms = compared.before_ms if compared is not None else round(m.timed.before.median, 4)
    return StepVerification(
        device=device_name(device), torch=torch.__version__, mode="compile" if compiled else "eager",
        profile=r.hardware.key, precision=r.precision, training=r.training, optimizer=r.step_model.optimizer,
        fused_optimizer=m.fused_optimizer, est_ms=round(est, 4), est_ms_after=round(est_after, 4),
        est_speedup=est_speedup, blocks=schedule.rounds, steps_per_block=schedule.steps, warmup=schedule.warmup,
        probed_graphs=r.step_model.step.graphs if compiled else None, before=m.timed.before_run,
        steps=len(m.timed.before.steps), order=m.timed.order,
        est_error=_r(est / measured_ms - 1) if measured_ms else None, findings=_findings(r, m),
        per_finding=m.per_finding_note or _per_finding(m.applied), not_applied=m.not_applied,
        after=m.timed.after_run, comparison=compared, alone_ms=None if compared is not None else measured_ms,
        speedup_error=_speedup_error(est_speedup, compared))


def _speedup_error(est_speedup: float | None, compared: StepComparison | None) -> float | None:
    """The estimated speedup over the measured one, − 1 (None: either is missing or zero)."""
    if compared is None or not compared.speedup or not est_speedup:
        return None
    return _r(est_speedup / compared.speedup - 1)


def _findings(r: Result, m: Measurements) -> tuple[AppliedFinding, ...]:
    """Each applied finding's entry: measured alone when several were applied, else in the
    one all-at-once comparison."""
    if len(m.applied) > 1:
        return tuple(_applied(r, f, m.each.get(i)) for i, f in enumerate(m.applied))
    return tuple(_applied(r, f, m.timed) for f in m.applied)


def _per_finding(applied: Sequence[Finding]) -> str:
    return "measured" if len(applied) > 1 else "the only finding: all at once"


def _applied(r: Result, f: Finding, got: Timed | str | None) -> AppliedFinding:
    """One applied finding's entry: its estimate and, where measured, its comparison."""
    assert r.step_model is not None and r.step_time is not None
    est_after = r.step_model.after([f]).ms
    ref, saved, speedup = FindingRef.of(f), _r(r.step_time.ms - est_after), _r(r.step_time.ms / est_after
                                                                                 if est_after else None)
    if isinstance(got, str):
        return AppliedFinding(ref, saved, speedup, error=got)
    c = got.comparison if got is not None else None
    if got is None or c is None or got.after_run is None:
        return AppliedFinding(ref, saved, speedup)
    return AppliedFinding(ref, saved, speedup, c.reported(), got.after_run.sliced)


__all__ = ["NOISE_FLOOR", "Comparison", "Measurements", "Timed", "device_name", "step_verification"]
