"""``--verify`` and ``--verify --step`` on the local CUDA GPU, with their progress on
stderr (stdout carries the report): each finding's GEMMs timed before and after its
suggestion (:mod:`shapelint.measure.verify`), and with ``--step`` the real model
trained before and after every suggestion (:mod:`shapelint.measure.step`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from shapelint.errors import ShapelintError

if TYPE_CHECKING:
    from shapelint.pipeline.result import Result


def verify(results: Sequence[Result]) -> list[Result]:
    """Measure each finding on the local GPU; findings measured below the reporting
    threshold are marked not confirmed (and do not fail the run)."""
    import torch
    from rich.progress import Progress

    from shapelint.measure import verify as measure
    from shapelint.pipeline.run import with_findings

    if not torch.cuda.is_available():
        raise ShapelintError("--verify needs a CUDA GPU (torch.cuda.is_available() is False)")
    out = []
    with Progress(console=stderr_console(), transient=True) as progress:
        for r in results:
            task = progress.add_task(f"verifying {r.target}", total=len(r.findings))

            def step(indices: Iterable[int], task: Any = task) -> Iterator[int]:
                for i in indices:
                    yield i
                    progress.advance(task)

            threshold = max(r.policy.min_speedup, 1.0)
            checked = measure.verify(r.findings, r.capture.gemms, r.hardware, threshold, progress=step)
            out.append(with_findings(r, checked))
    return out


def verify_steps(results: Sequence[Result]) -> tuple[list[Result], list[tuple[str, str]]]:
    """``--verify --step``: whole training steps, before and after every suggestion;
    the results with what was measured, and each target that could not be measured
    with its reason."""
    from shapelint.measure import step

    return step.verify_results(results, step.cli_options(stderr_console()))


def stderr_console() -> Any:
    """A rich console on stderr."""
    from rich.console import Console

    return Console(stderr=True)


__all__ = ["stderr_console", "verify", "verify_steps"]
