"""The 8-GPU layouts of issue 29, priced on paper: what an 8-GPU machine should measure.

For the models of ``multi_gpu_step.py`` (GPT-2 small, OPT with GPT-2 small's shapes,
Llama-3.2-1B's shapes) under DDP 8, FSDP 8, TP 8, TP 4 x DP 2 and TP 2 x FSDP 4, eager,
batch per GPU as there: the estimated step, its host range, the exposed communication
and the GPU and host times, with the shipped collective table (2 ranks measured,
scaled to 8 by the bus factor; ``docs/multi-gpu.md``). No GPU is needed:

    python benchmarks/eight_gpu_paper.py [--gpu h100] [--json docs/data/eight_gpu_paper_h100.json]

On an 8-GPU machine, ``shapelint calibrate`` and ``multi_gpu_step.py`` under
``torchrun --nproc_per_node 8`` give the measurements to set beside these rows.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: the layouts issue 29 names
LAYOUTS = {"DDP 8": {"dp": 8}, "FSDP 8": {"fsdp": 8}, "TP 8": {"tp": 8}, "TP 4 x DP 2": {"tp": 4, "dp": 2},
           "TP 2 x FSDP 4": {"tp": 2, "fsdp": 4}}
MODELS = ("gpt2", "opt125m", "llama1b")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpu", default="h100")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args()
    import multi_gpu_estimate as est  # imports shapelint from this checkout
    import multi_gpu_step as bench

    from shapelint.app.api import lint_target
    from shapelint.errors import ShapelintError

    rows = []
    print(f"{'model':9} {'layout':14} {'step ms':>8} {'host range':>15} {'comm':>6} {'gpu':>7} {'host':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            folder = Path(tmp) / name
            bench.make_config(name, False).save_pretrained(folder)
            _, batch, seq = bench.MODELS[name]
            for layout, options in LAYOUTS.items():
                if name == "gpt2" and "tp" in options:
                    continue  # GPT-2's fused Conv1D c_attn takes no DTensor tensor parallelism
                try:
                    t = lint_target(folder / "config.json", gpu=args.gpu, batch=batch, seq=seq, **options).result.step_time
                except ShapelintError as exc:  # e.g. 12 heads at TP 8
                    print(f"{name:9} {layout:14} refused: {exc}")
                    rows.append({"model": name, "layout": layout, "refused": str(exc)})
                    continue
                assert t is not None
                low, high = t.ms_range
                rows.append({"model": name, "layout": layout, "step_ms": t.ms, "step_ms_range": [low, high],
                             "comm_ms": t.comm_ms, "gpu_ms": t.gpu_ms, "host_ms": t.host_ms})
                print(f"{name:9} {layout:14} {t.ms:8.1f} {low:7.1f}-{high:<7.1f} {t.comm_ms:6.1f} {t.gpu_ms:7.1f}"
                      f" {t.host_ms:7.1f}")
    del est
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": args.gpu, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
