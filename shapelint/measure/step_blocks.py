"""How ``--verify --step`` times variants against each other (the method of
``benchmarks/step_gpu.py``, docs/step-measurements.md): after each variant's warm-up,
*before* and one other variant alternate in blocks, A B A B ... (:data:`ROUNDS` blocks
each, :data:`STEPS_PER_BLOCK` steps a block), on the same input tensors (a variant whose
inputs change shape, a padded input layer's, gets its own, from the same seed). Each
block is timed by a :class:`shapelint.measure.timer.BlockTimer` (CUDA events around every
step, nothing synchronising inside a block). A variant's time is the median of its
steps; what the blocks say of a change: :mod:`shapelint.measure.step_report`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shapelint.measure.timer import STEP_WARMUP, BlockTimer

#: alternating rounds: blocks per variant in each comparison
ROUNDS = 5
#: timed steps in one block
STEPS_PER_BLOCK = 10


@dataclass(frozen=True)
class Schedule:
    """How many blocks, steps a block, and untimed steps after a variant's first."""

    rounds: int = ROUNDS
    steps: int = STEPS_PER_BLOCK
    warmup: int = STEP_WARMUP


@dataclass(frozen=True)
class Samples:
    """One variant's per-step times and the mean of each of its blocks, in order."""

    steps: tuple[float, ...]
    blocks: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.steps)


def alternate(steps: Sequence[tuple[str, Callable[[], object]]], timer: BlockTimer, rounds: int, n: int
              ) -> tuple[dict[str, Samples], list[str]]:
    """Time the variants in alternating blocks (A B A B ... for two): each round runs
    every variant's block in turn. Returns each variant's samples and the order the
    blocks ran in."""
    per_step: dict[str, list[float]] = {label: [] for label, _ in steps}
    blocks: dict[str, list[float]] = {label: [] for label, _ in steps}
    order = []
    for _ in range(rounds):
        for label, step in steps:
            times = timer(label, step, n)
            per_step[label] += times
            blocks[label].append(statistics.fmean(times))
            order.append(label)
    return {label: Samples(tuple(per_step[label]), tuple(blocks[label])) for label, _ in steps}, order


__all__ = ["ROUNDS", "STEPS_PER_BLOCK", "Samples", "Schedule", "alternate"]
