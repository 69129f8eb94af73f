"""One rank of ``--verify --step`` under a parallel layout (launched by
:func:`shapelint.measure.parallel_step.verify_parallel` through ``torchrun``): join the
process group, run :func:`shapelint.measure.step.verify_result` with the layout's
wrapper (and, for a variant whose findings change the layout, the changed one: SL602's
sharded attention, SL603's FSDP2 groups), and on rank 0 write the ``StepVerification``
as JSON. Every rank runs the same variants in the same order, each finding's own
variant too (two to four applied), so their collectives match."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from shapelint.measure.parallel_change import describe, layout_change
from shapelint.measure.parallel_wrap import Wrap, layout_wrap, process_group, rank_zero_log, rank_zero_writes
from shapelint.measure.step import RunOptions, verify_result
from shapelint.measure.step_blocks import Schedule
from shapelint.model import serial
from shapelint.model.records import Finding
from shapelint.pipeline.result import result_from_data


def worker(argv: list[str] | None = None) -> int:
    """One rank: join the group, measure, rank 0 writes the verification."""
    p = argparse.ArgumentParser(prog="shapelint.measure.parallel_worker")
    p.add_argument("result")
    p.add_argument("out")
    p.add_argument("--device", default="cuda")
    p.add_argument("--rounds", type=int, default=Schedule().rounds)
    p.add_argument("--steps", type=int, default=Schedule().steps)
    p.add_argument("--warmup", type=int, default=Schedule().warmup)
    args = p.parse_args(argv)
    r = result_from_data(json.loads(Path(args.result).read_text()))
    assert r.parallel is not None
    with process_group(args.device) as device:
        plan = r.parallel
        note = rank_zero_log("shapelint: --verify --step")

        def wrap_for(findings: Sequence[Finding]) -> Wrap:
            change = layout_change(findings)
            if change is not None:
                note(f"{r.target}: the layout after: {describe(change)}")
            return layout_wrap(plan, device, change)

        opts = RunOptions(device=device, schedule=Schedule(args.rounds, args.steps, args.warmup),
                          wrap=layout_wrap(plan, device), wrap_for=wrap_for, note=note)
        v = verify_result(r, opts)
        rank_zero_writes(args.out, lambda: serial.encode(v))
    return 0


if __name__ == "__main__":
    sys.exit(worker())
