"""What ``--verify --step`` measured for one target (``Result.step_verification``): the
real training step before and after the suggestions, timed in alternating blocks
(``shapelint.measure.step``), beside the step model's estimate. The types hold the values
as the report gives them (ms and ratios to 4 decimals); :meth:`StepVerification.to_json`
writes the JSON report's ``step_verification`` object (docs/json.md), a public contract.

Apart from :mod:`shapelint.model.verification` (which the records import) because these
types name the records' ``Suggestion`` and ``GraphBreaks``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from shapelint.model.records import Finding, GraphBreaks, Suggestion


@dataclass(frozen=True)
class FindingRef:
    """A finding as the step verification names it."""

    code: str
    module: str
    suggestion: Suggestion | None = None

    @classmethod
    def of(cls, f: Finding) -> FindingRef:
        return cls(f.code, f.module, f.suggestion)

    def __str__(self) -> str:
        return f"{self.code} {self.suggestion}" if self.suggestion else self.code

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "module": self.module,
                "suggestion": self.suggestion.to_json() if self.suggestion else None}


@dataclass(frozen=True)
class UnappliedFinding:
    """A finding the edited copy could not carry, and why."""

    finding: FindingRef
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {**self.finding.to_json(), "reason": self.reason}


@dataclass(frozen=True)
class StepComparison:
    """*before* against one changed variant: the median steps, what the change saved, the
    speedup, the blocks' noise and whether the speedup clears it."""

    before_ms: float
    after_ms: float
    saved_ms: float
    speedup: float
    noise: float
    threshold: float
    confirmed: bool


@dataclass(frozen=True)
class AppliedFinding:
    """One applied finding: its estimate, and its own comparison where it was measured
    (alone, or all at once when it is the only one)."""

    finding: FindingRef
    est_step_ms_saved: float | None
    est_speedup: float | None
    comparison: StepComparison | None = None
    #: the output layers its variant sliced back to the tokenizer's vocabulary
    sliced: tuple[str, ...] = ()
    #: why its variant could not be measured
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.finding.to_json(), "est_step_ms_saved": self.est_step_ms_saved,
                               "est_speedup": self.est_speedup}
        c = self.comparison
        if c is None:
            out["measured"] = False
            if self.error is not None:
                out["error"] = self.error
            return out
        out.update(measured=True, measured_ms=c.before_ms, measured_ms_after=c.after_ms,
                   measured_step_ms_saved=c.saved_ms, measured_speedup=c.speedup, noise=c.noise,
                   threshold=c.threshold, confirmed=c.confirmed, sliced=list(self.sliced))
        return out


@dataclass(frozen=True)
class VariantRun:
    """One variant's timed run: its blocks' mean step times, and what its build and first
    step showed."""

    block_ms: tuple[float, ...]
    #: the first step's seconds under torch.compile (None: eager)
    compile_s: float | None = None
    #: the graphs dynamo compiled for it (None: eager)
    graphs: int | None = None
    sliced: tuple[str, ...] = ()
    #: its inputs changed shape (a padded input layer's): it ran on its own, from the same seed
    own_inputs: bool = False


@dataclass(frozen=True)
class StepVerification:
    """One target's step, measured. ``after`` and ``comparison`` are the variant with every
    applicable suggestion; without one (nothing applies) *before* is timed alone and
    ``alone_ms`` is its median step."""

    #: the GPU's name ("cpu" off one) and the torch version that ran the step
    device: str
    torch: str
    #: "eager" or "compile"
    mode: str
    #: the step as the lint priced it: GPU profile, precision, training or inference, optimizer
    profile: str
    precision: str
    training: bool
    optimizer: str
    #: the optimizer ran its fused kernel (None: no optimizer step)
    fused_optimizer: bool | None
    #: the step model's ms before and after the applied findings, and its speedup
    est_ms: float
    est_ms_after: float
    est_speedup: float | None
    #: the schedule: blocks per variant, steps a block, untimed steps after the first
    blocks: int
    steps_per_block: int
    warmup: int
    #: what the estimate priced of torch.compile's graphs (written under --compile only)
    probed_graphs: GraphBreaks | None
    before: VariantRun
    #: *before*'s timed steps, and the variants' blocks in the order they ran
    steps: int
    order: tuple[str, ...]
    #: the estimated step over the measured one, − 1
    est_error: float | None
    findings: tuple[AppliedFinding, ...]
    #: how the findings were measured one by one (or why they were not)
    per_finding: str
    not_applied: tuple[UnappliedFinding, ...]
    after: VariantRun | None = None
    comparison: StepComparison | None = None
    alone_ms: float | None = None
    #: the estimated speedup over the measured one, − 1 (None: nothing to compare)
    speedup_error: float | None = None
    status: Literal["measured"] = "measured"

    def __post_init__(self) -> None:
        if (self.after is None) != (self.comparison is None) or (self.comparison is None) == (self.alone_ms is None):
            raise ValueError("a step verification has an after variant and its comparison, or before timed alone")

    @property
    def measured_ms(self) -> float:
        """*before*'s median step."""
        if self.comparison is not None:
            return self.comparison.before_ms
        assert self.alone_ms is not None
        return self.alone_ms

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "status": self.status, "device": self.device, "torch": self.torch, "mode": self.mode,
            "profile": self.profile, "precision": self.precision, "training": self.training,
            "optimizer": self.optimizer, "fused_optimizer": self.fused_optimizer, "est_ms": self.est_ms,
            "est_ms_after": self.est_ms_after, "est_speedup": self.est_speedup, "blocks": self.blocks,
            "steps_per_block": self.steps_per_block, "warmup": self.warmup,
            "compile_s": self._per_variant(lambda v: v.compile_s), "graphs": self._per_variant(lambda v: v.graphs),
        }
        if self.mode == "compile":
            out["probed_graphs"] = self.probed_graphs.to_json() if self.probed_graphs is not None else None
        out.update(self._measured())
        if self.after is not None:
            out["sliced"] = list(self.after.sliced)
            out["own_inputs"] = self.after.own_inputs
        out["est_error"] = self.est_error
        if self.speedup_error is not None:
            out["speedup_error"] = self.speedup_error
        out["findings"] = [e.to_json() for e in self.findings]
        out["per_finding"] = self.per_finding
        out["not_applied"] = [n.to_json() for n in self.not_applied]
        return out

    def _per_variant(self, value: Callable[[VariantRun], Any]) -> dict[str, Any]:
        """``{"before": ..., "after": ...}`` of one variant property (no ``after`` when alone)."""
        variants = {"before": self.before, "after": self.after}
        return {label: value(v) for label, v in variants.items() if v is not None}

    def _measured(self) -> dict[str, Any]:
        c = self.comparison
        return {"measured_ms": self.measured_ms, "measured_ms_after": c.after_ms if c else None,
                "measured_speedup": c.speedup if c else None, "noise": c.noise if c else None,
                "threshold": c.threshold if c else None, "confirmed": c.confirmed if c else None,
                "block_ms": self._per_variant(lambda v: list(v.block_ms)), "steps": self.steps,
                "order": list(self.order)}


__all__ = ["AppliedFinding", "FindingRef", "StepComparison", "StepVerification", "UnappliedFinding", "VariantRun"]
