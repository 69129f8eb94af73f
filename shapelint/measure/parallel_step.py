"""``--verify --step`` of a parallel layout: the same alternating-block measurement
as on one GPU (:mod:`shapelint.measure.step`), run by ``torchrun`` on the GPUs of this
machine, one process per rank, each with the model wrapped as the layout runs it
(:mod:`shapelint.measure.parallel_wrap`).

The linted ``Result`` goes to the workers as JSON (``result_to_data``); every rank runs
the same variants in the same blocks (the schedule is fixed, so their collectives
match); rank 0's block times are the measurement (the ranks wait for each other at
every collective, so the slowest rank sets the pace of all) and it writes the
``StepVerification`` back as JSON.

    python -m torch.distributed.run --standalone --nproc_per_node N \\
        -m shapelint.measure.parallel_worker RESULT.json OUT.json [--device cpu] [--rounds R --steps S --warmup W]
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from shapelint.errors import ShapelintError
from shapelint.measure.step_blocks import Schedule
from shapelint.measure.torchrun import ranks_json
from shapelint.model import serial
from shapelint.model.step_verification import StepVerification
from shapelint.pipeline.result import Result, result_to_data

#: seconds a worker group may take before it is stopped (NCCL start, builds, blocks)
TIMEOUT_S = 1800


def verify_parallel(r: Result, schedule: Schedule, note: Callable[[str], None] = lambda _msg: None,
                    device: str | None = None) -> StepVerification:
    """Launch one worker per rank of ``r``'s layout (:mod:`shapelint.measure.parallel_worker`)
    and return what rank 0 measured. ``device`` "cpu" runs the workers on gloo (the test suite)."""
    assert r.parallel is not None
    world = r.parallel.layout.world_size
    kind = device or ("cuda" if torch.cuda.is_available() else "")
    if kind == "cuda" and torch.cuda.device_count() < world:
        raise ShapelintError(f"{r.target}: --verify --step of {r.parallel.layout.describe()} needs {world} GPUs on "
                             f"this machine, found {torch.cuda.device_count()}")
    if not kind:
        raise ShapelintError(f"{r.target}: --verify --step needs CUDA GPUs")
    with tempfile.TemporaryDirectory(prefix="shapelint-parallel-") as tmp:
        given, got = Path(tmp, "result.json"), Path(tmp, "verification.json")
        given.write_text(json.dumps(result_to_data(r)))
        s = schedule
        args = [str(given), str(got), "--device", kind,
                "--rounds", str(s.rounds), "--steps", str(s.steps), "--warmup", str(s.warmup)]
        note(f"{r.target}: torchrun, {r.parallel.layout.describe()}")
        found = ranks_json(world, "shapelint.measure.parallel_worker", args, got, TIMEOUT_S,
                           f"{r.target}: --verify --step", f"{r.target}: --verify --step under torchrun failed")
        v: StepVerification = serial.decode(StepVerification, found)
        return v

