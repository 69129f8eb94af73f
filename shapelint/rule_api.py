"""What a rule module is made of, and the helpers rules share.

A rule is one module under ``rules/`` (shipped as ``shapelint.rules``) with:

- ``CODE`` (``SL101``), ``NAME`` (``misaligned-leading-dim``), ``SEVERITY``;
- a docstring: a one-line summary, then ``## What it does``, ``## Why is this bad?``
  (with the measured number), ``## Example`` and ``## Use instead``;
- ``BAD`` and ``GOOD``: lists of :class:`Example` that one generated test runs;
- ``check(gemms, hardware, context) -> Iterable[Finding]``: pure, typed, no I/O;
- named thresholds as module constants.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

from shapelint.estimate import total_ms
from shapelint.hardware import Hardware
from shapelint.records import Finding, Gemm, Suggestion


@dataclass(frozen=True)
class Example:
    """A model snippet a rule must flag (``BAD``) or pass (``GOOD``).

    ``model`` and ``inputs`` are Python expressions evaluated with ``torch``, ``nn``,
    ``F`` and the rule module itself (as ``_rule``) in scope, on fake tensors. For ``BAD`` examples, ``expect`` holds the
    suggestion the rule must make: ``{"parameter": ..., "from": ..., "to": ...}``
    (any subset), and ``min_speedup`` the least estimated speedup it must claim.
    """

    model: str
    inputs: str
    dtype: str = "bf16"
    gpu: str = "h100"
    training: bool = True
    expect: dict[str, Any] = field(default_factory=dict)
    min_speedup: float = 1.0


@dataclass(frozen=True)
class RuleContext:
    """What rules may know besides the GEMMs and the GPU."""

    precision: str = "bf16"
    training: bool = True
    tokens: int | None = None
    #: sizes of the model's embedding tables (vocabularies)
    vocab_sizes: frozenset[int] = frozenset()
    #: tensor-parallel degree: suggested sizes must divide by it
    tp: int = 1
    #: least estimated loss (fraction of a layer's GEMM time) worth reporting
    min_loss: float = 0.05
    options: dict[str, Any] = field(default_factory=dict)

    def is_vocab_dim(self, value: int) -> bool:
        """``value`` is a vocabulary size, or one GPU's shard of one."""
        return any(value in (v, -(-v // self.tp)) for v in self.vocab_sizes)


def by_module(gemms: Iterable[Gemm]) -> dict[str, list[Gemm]]:
    """GEMMs grouped by owning module, in first-seen order."""
    out: dict[str, list[Gemm]] = {}
    for g in gemms:
        out.setdefault(g.module, []).append(g)
    return out


def make_finding(
    code: str,
    name: str,
    severity: str,
    gemms: Sequence[Gemm],
    after: Sequence[Gemm] | Callable[[Gemm], Gemm],
    hardware: Hardware,
    message: str,
    suggestion: Suggestion | None = None,
    details: dict[str, object] | None = None,
) -> Finding:
    """A finding covering ``gemms``, with the estimated time of those GEMMs before
    and after the change (``after``: the changed GEMMs, or a function making them)."""
    changed = [after(g) for g in gemms] if callable(after) else list(after)
    before_ms = [total_ms([g], hardware) for g in gemms]
    after_ms = [total_ms([g], hardware) for g in changed]
    est_ms, est_after = sum(before_ms), sum(after_ms)
    return Finding(
        code=code,
        name=name,
        severity=severity,
        module=gemms[0].module,
        message=message,
        gemms=tuple(g.index for g in gemms),
        suggestion=suggestion,
        source=gemms[0].defined_at if suggestion else gemms[0].source,
        est_ms=est_ms,
        est_ms_after=est_after,
        est_speedup=est_ms / est_after if est_after > 0 else None,
        details=tuple((details or {}).items()) + (("gemm_ms_after", tuple(after_ms)),),
        after=tuple(changed),
    )


def graded(f: Finding, error_speedup: float) -> Finding:
    """Downgrade an error whose estimated speedup is below ``error_speedup`` to a warning."""
    if f.severity == "error" and f.est_speedup is not None and f.est_speedup < error_speedup:
        return replace(f, severity="warning")
    return f
