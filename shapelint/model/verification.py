"""What ``--verify`` measured for one finding (``Finding.verification``): its GEMMs timed on
the local GPU before and after the suggestion (``shapelint.measure.verify``), and whether
that confirms the estimate. The types hold the values as the report gives them (times in
ms and fractions of peak, to 4 decimals); :meth:`FindingVerification.to_json` writes the
JSON report's ``details.verify`` object (docs/json.md), a public contract.

Nothing here imports the records: ``shapelint.model.records`` types a finding's
verification with this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

#: what --verify concluded: the measured speedup reached the policy's threshold, fell
#: short of it, or no kernel of the finding could be timed
VerifyStatus = Literal["confirmed", "not confirmed", "not run"]


@dataclass(frozen=True)
class GemmTiming:
    """One covered GEMM timed before and after (None: its kernel could not run here)."""

    index: int
    op: str
    phase: str
    before_ms: float | None
    after_ms: float | None
    #: achieved FLOP/s over the profile's peak for the GEMM's dtype
    before_peak_fraction: float | None
    after_peak_fraction: float | None

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "op": self.op, "phase": self.phase, "before_ms": self.before_ms,
                "after_ms": self.after_ms, "before_peak_fraction": self.before_peak_fraction,
                "after_peak_fraction": self.after_peak_fraction}


@dataclass(frozen=True)
class FindingVerification:
    """A finding's covered work timed before and after its suggestion: the GEMMs one by
    one, or (a fusion) the whole block, when ``gemms`` is empty."""

    status: VerifyStatus
    before_ms: float = 0.0
    after_ms: float = 0.0
    gemms: tuple[GemmTiming, ...] = ()

    @property
    def ran(self) -> bool:
        return self.status != "not run"

    @property
    def refuted(self) -> bool:
        """Measured below the threshold: the finding is not confirmed."""
        return self.status == "not confirmed"

    def to_json(self) -> dict[str, Any]:
        if not self.ran:
            return {"status": self.status}
        return {"status": self.status, "before_ms": self.before_ms, "after_ms": self.after_ms,
                "gemms": [g.to_json() for g in self.gemms]}


#: a finding none of whose kernels could be timed here
NOT_RUN = FindingVerification("not run")

__all__ = ["NOT_RUN", "FindingVerification", "GemmTiming", "VerifyStatus"]
