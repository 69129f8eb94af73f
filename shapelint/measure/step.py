"""``--verify --step``: train the real model, before and after the suggestions, and
compare the measured step with the estimate.

For one linted target (a :class:`shapelint.pipeline.result.Result`):

1. **The variants** (:mod:`shapelint.measure.step_variants`): *before*, the target built
   for real, and *after*, a copy with every applicable suggestion edited in as ``--fix
   --unsafe-fixes`` would; the others are listed with the reason. With two to
   :data:`PER_FINDING_MAX` findings applied, each is also built alone.
2. **The step** (:mod:`shapelint.measure.step_train`): shapelint's documented default
   training step, eager or under ``torch.compile``.
3. **Timing** (:mod:`shapelint.measure.timer`, :mod:`shapelint.measure.step_blocks`): each
   variant is warmed up, then *before* and one other variant alternate in blocks.
4. **Confirmation and the report** (:mod:`shapelint.measure.step_report`): a change is
   confirmed when it measures faster than the blocks scatter;
   :class:`shapelint.model.step_verification.StepVerification` is the result.

Everything runs on a ``device`` argument; the CPU test suite runs the same code on a
tiny model with a wall-clock or scripted timer.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from shapelint.errors import ShapelintError, one_line
from shapelint.measure.parallel_change import layout_change, resizes
from shapelint.measure.parallel_step import verify_parallel
from shapelint.measure.step_blocks import Schedule, alternate
from shapelint.measure.step_report import Measurements, Timed, step_verification
from shapelint.measure.step_train import Trainer, dynamo_limits, make_trainer, release, warm
from shapelint.measure.step_variants import (
    NotApplied,
    build_copy,
    build_original,
    in_memory_formats,
    merged_texts,
    plan,
    scratch_root,
    signature,
    slice_padded_logits,
    write_copy,
)
from shapelint.measure.timer import BlockTimer, block_timer
from shapelint.model.records import Finding
from shapelint.model.step_verification import StepVerification
from shapelint.pipeline.result import Result

#: per-finding variants are built when 2 to this many findings are applied (each
#: costs a build, a compile under --compile, and its own comparison)
PER_FINDING_MAX = 4

#: builds one variant's trainer: (label, built, inputs), and ``wrap=`` for a variant whose
#: findings change the parallel layout
MakeTrainer = Callable[..., Trainer]


@dataclass
class RunOptions:
    """How ``verify_result`` runs (the CLI's defaults; tests shrink them)."""

    device: str = "cuda"
    schedule: Schedule = field(default_factory=Schedule)
    timer: BlockTimer | None = None
    backend: str = "inductor"
    per_finding: bool = True
    seed: int = 0
    #: inside a torchrun worker: the parallel layout's wrapper (``shapelint.measure.parallel_wrap``)
    wrap: Callable[[torch.nn.Module], torch.nn.Module] | None = None
    #: the wrapper of a variant with these findings applied, where they change the layout
    #: (SL602's sharded attention, SL603's FSDP2 groups); None: ``wrap`` for every variant
    wrap_for: Callable[[Sequence[Finding]], Callable[[torch.nn.Module], torch.nn.Module]] | None = None
    note: Callable[[str], None] = lambda _msg: None


def _check_verifiable(r: Result, opts: RunOptions) -> None:
    if r.tp > 1 and r.parallel is None:
        raise ShapelintError(f"{r.target}: --verify --step trains the whole model on one GPU; "
                             f"the lint's shapes are one of {r.tp} tensor-parallel shards")
    if r.parallel is not None and r.parallel.layout.parallel and opts.wrap is None:
        raise ShapelintError(f"{r.target}: a step of {r.parallel.layout.world_size} GPUs is measured under torchrun "
                             "(shapelint.measure.parallel_step)")
    if r.step_model is None or r.step_time is None:
        raise ShapelintError(f"{r.target}: no step estimate to verify")


def _groups(applied: Sequence[Finding], per_finding: bool) -> tuple[list[tuple[str, tuple[Finding, ...]]], str]:
    """The changed variants to build (all applied, then each alone where that is measured)
    and, when the findings are not measured one by one, why."""
    groups = [("after", tuple(applied))]
    if len(applied) > PER_FINDING_MAX or (len(applied) > 1 and not per_finding):
        return groups, f"{len(applied)} findings applied: measured all at once only"
    if len(applied) > 1:
        groups += [(f"finding {i + 1}", (f,)) for i, f in enumerate(applied)]
    return groups, ""


def verify_result(r: Result, opts: RunOptions | None = None) -> StepVerification:
    """Measure ``r``'s step before and after its suggestions; the ``step_verification``
    of the report (docs/json.md)."""
    opts = opts or RunOptions()
    _check_verifiable(r, opts)
    assert r.step_model is not None and r.step_time is not None
    compiled = r.step_time.mode == "compile"
    applied_edits, not_applied = plan(r)
    applied = tuple(f for f, _ in applied_edits)
    timer = opts.timer or block_timer(opts.device)
    groups, per_finding_note = _groups(applied, opts.per_finding)
    root = scratch_root(Path(r.target))
    make = functools.partial(make_trainer, device=opts.device, precision=r.precision, training=r.training,
                             optimizer=r.step_model.optimizer, compile=compiled, backend=opts.backend,
                             wrap=opts.wrap)
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = r.precision == "tf32"
    before: Trainer | None = None
    try:
        with dynamo_limits(len(groups) + 1):
            before = _warm_before(r, opts, make, compiled)
            fused = before.fused
            timed: dict[str, Timed | str] = {}
            for label, findings in groups if applied else ():
                timed[label] = _measure_change(r, label, findings, before, root, opts, make, compiled, timer)
                release(opts.device, False)
            main = timed.pop("after") if applied else _time_alone(r, before, opts, timer)
    finally:
        before = None  # its model and optimizer go before the memory is released
        torch.backends.cuda.matmul.allow_tf32 = old_tf32
        shutil.rmtree(root, ignore_errors=True)
        release(opts.device, compiled)
    assert isinstance(main, Timed)  # the all-applied variant fails the whole target, never alone
    each = {i: timed[f"finding {i + 1}"] for i in range(len(applied)) if f"finding {i + 1}" in timed}
    measured = Measurements(main, applied, tuple(not_applied), each, per_finding_note, fused)
    return step_verification(r, measured, opts.schedule, opts.device, compiled)


def _warm_before(r: Result, opts: RunOptions, make: MakeTrainer, compiled: bool) -> Trainer:
    """*before*, built and warmed up."""
    opts.note(f"{r.target}: building the model")
    torch.manual_seed(opts.seed)
    built = build_original(r, opts.device)
    t = make("before", built, built.inputs)
    warm(t, opts.device, opts.schedule.warmup, compiled)
    return t


def _time_alone(r: Result, before: Trainer, opts: RunOptions, timer: BlockTimer) -> Timed:
    """Nothing applies: *before*'s step timed in its blocks alone."""
    opts.note(f"{r.target}: timing the step")
    samples, order = alternate([("before", before.step)], timer, opts.schedule.rounds, opts.schedule.steps)
    return Timed(samples["before"], before.run(samples["before"].blocks), tuple(order))


def _measure_change(r: Result, label: str, findings: tuple[Finding, ...], before: Trainer, root: Path,
                    opts: RunOptions, make: MakeTrainer, compiled: bool, timer: BlockTimer) -> Timed | str:
    """Build the copy with ``findings`` applied, then time it against *before*; why it
    could not be built, for a single finding's variant."""
    try:
        path = write_copy(r, merged_texts(r, findings), root)
        opts.note(f"{r.target}: building {label} ({', '.join(str(f.suggestion) for f in findings)})")
        torch.manual_seed(opts.seed)
        built = build_copy(r, path, opts.device)
        relaid = layout_change(findings) is not None and opts.wrap_for is not None
        unwrapped = layout_change(findings) is not None and not relaid  # a parallel layout with nothing to apply it
        if signature(built) == signature(before.built) and (resizes(findings) or unwrapped):
            raise NotApplied("the edited copy builds the same parameter and input shapes: the size edit did not "
                             "reach the model")
        sliced = slice_padded_logits(built, findings)
        same_inputs = signature(built)[1] == signature(before.built)[1]
        wrap = opts.wrap_for(findings) if relaid and opts.wrap_for is not None else opts.wrap
        inputs = in_memory_formats(built, before.inputs if same_inputs else built.inputs, findings)
        t = make(label, built, inputs, wrap=wrap)
        t.own_inputs, t.sliced = not same_inputs, sliced
        del built
        warm(t, opts.device, opts.schedule.warmup, compiled)
        opts.note(f"{r.target}: timing before against {label}")
        samples, order = alternate([("before", before.step), (label, t.step)], timer,
                                   opts.schedule.rounds, opts.schedule.steps)
        return Timed(samples["before"], before.run(samples["before"].blocks), tuple(order),
                     samples[label], t.run(samples[label].blocks))
    except NotApplied as exc:
        if label == "after":
            raise ShapelintError(f"{r.target}: cannot apply the suggestions: {exc}") from exc
        return str(exc)


# -- every target (the CLI) ---------------------------------------------------------------


def _verify_one(r: Result, opts: RunOptions | None) -> StepVerification:
    """One target: a parallel layout's under torchrun, else in this process."""
    if r.parallel is not None and r.parallel.layout.parallel:
        run = opts or RunOptions()
        return verify_parallel(r, run.schedule, run.note)
    return verify_result(r, opts)


def verify_results(results: Sequence[Result], opts: RunOptions | None = None) -> tuple[list[Result], list[tuple[str, str]]]:
    """``--verify --step`` over every linted target: each result with its
    ``step_verification``, and (target, message) for each that could not be measured."""
    out, failed = [], []
    for r in results:
        try:
            with contextlib.redirect_stdout(sys.stderr):  # stdout carries the report; the model may print
                v = _verify_one(r, opts)
        except ShapelintError as exc:
            failed.append((r.target, one_line(exc)))
            out.append(r)
            continue
        except Exception as exc:  # noqa: BLE001 - the user's model failing on the device is one line
            failed.append((r.target, f"{r.target}: --verify --step: the training step failed: {one_line(exc)}"))
            out.append(r)
            continue
        out.append(replace(r, step_verification=v))
    return out, failed


def cli_options(console: Any) -> RunOptions:
    """The CLI's options: CUDA, the default schedule, progress lines on ``console`` (stderr)."""
    return RunOptions(note=lambda msg: console.print(f"shapelint: --verify --step: {msg}", style="dim",
                                                  highlight=False, soft_wrap=True))


__all__ = ["PER_FINDING_MAX", "RunOptions", "cli_options", "verify_result", "verify_results"]
