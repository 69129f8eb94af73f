"""One rank of ``shapelint calibrate``'s collectives (launched by
:func:`shapelint.measure.collectives.measure` through ``torchrun``): join the process
group (NCCL on this rank's GPU; gloo with ``--device cpu``), run the sweep, and on
rank 0 write what was measured as JSON.

    python -m torch.distributed.run --standalone --nproc_per_node N \\
        -m shapelint.measure.collectives_worker OUT.json [--device cpu] [--min-log2 16 --max-log2 30] [--reps R]
"""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any

from shapelint.measure.collectives import MAX_LOG2, MIN_LOG2, Sweep, sizes, sweep
from shapelint.measure.parallel_wrap import process_group, rank_zero_log, rank_zero_writes
from shapelint.measure.timer import REPS, WARMUP, cuda_timer, wall_timer


def worker(argv: list[str] | None = None) -> int:
    import torch
    import torch.distributed as dist

    p = argparse.ArgumentParser(prog="shapelint.measure.collectives_worker")
    p.add_argument("out")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--min-log2", type=int, default=MIN_LOG2)
    p.add_argument("--max-log2", type=int, default=MAX_LOG2)
    p.add_argument("--reps", type=int, default=REPS)
    args = p.parse_args(argv)
    with process_group(args.device) as device:
        cuda = device.startswith("cuda")
        # a collective's operands are what it moves: no L2 flush between calls
        timer = cuda_timer(args.reps, WARMUP, flush_l2=False) if cuda else wall_timer(args.reps, min(WARMUP, args.reps))
        samples = sweep(device, timer, sizes(args.min_log2, args.max_log2), log=rank_zero_log("shapelint calibrate"))

        def found() -> dict[str, Any]:
            gpu = torch.cuda.get_device_name(device) if cuda else "CPU (gloo)"
            nccl = ".".join(map(str, torch.cuda.nccl.version())) if cuda else "none (gloo)"
            return Sweep(tuple(samples), dist.get_world_size(), gpu, str(torch.__version__), nccl,
                         datetime.date.today().isoformat(), args.reps).to_json()

        rank_zero_writes(args.out, found)
    return 0


if __name__ == "__main__":
    sys.exit(worker())
