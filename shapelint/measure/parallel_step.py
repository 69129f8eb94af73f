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
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

from shapelint.errors import ShapelintError
from shapelint.measure.step_blocks import Schedule
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
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
               "-m", "shapelint.measure.parallel_worker", str(given), str(got), "--device", kind,
               "--rounds", str(s.rounds), "--steps", str(s.steps), "--warmup", str(s.warmup)]
        note(f"{r.target}: torchrun, {r.parallel.layout.describe()}")
        returncode = _torchrun(cmd, r.target)
        if returncode != 0 or not got.exists():
            raise ShapelintError(f"{r.target}: --verify --step under torchrun failed (exit {returncode}; "
                                 "its output is above)")
        v: StepVerification = serial.decode(StepVerification, json.loads(got.read_text()))
        return v


def _torchrun(cmd: list[str], target: str) -> int:
    """Run torchrun in a process group of its own: past ``TIMEOUT_S`` (or on an
    interrupt) the whole group is killed, its rank workers too, which would otherwise
    keep holding the GPUs; a timeout is one error line for this target."""
    proc = subprocess.Popen(cmd, stdout=sys.stderr, stderr=sys.stderr, start_new_session=True)
    try:
        return proc.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise ShapelintError(f"{target}: --verify --step under torchrun ran past {TIMEOUT_S} s; stopped it") from None
    except BaseException:
        _kill_group(proc)
        raise


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
