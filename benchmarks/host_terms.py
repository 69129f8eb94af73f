#!/usr/bin/env python3
"""The engines' host terms one at a time: the OPT-125m shape (GPT-2 small's widths) with
and without its linear layers' biases, under DDP 2, FSDP2 2 and TP 2. The biases are
72 trained tensors (6 a block), 72 DTensor parameters under TP and nothing else, so the
step's difference between the two models is 72 × ``ddp_tensor`` under DDP, 72 ×
``fsdp_tensor`` under FSDP2 and 72 × ``tp_parameter`` under TP, on the host (the GPU
work of a bias is a few µs). Prints, per layout, both steps measured and estimated, and
what the engine adds to the one-GPU step measured beside it, with biases minus without
(the one-GPU step's own work on the biases cancels), and writes JSON.

    # on a machine with 2 GPUs (about 3 minutes)
    torchrun --standalone --nproc_per_node 2 benchmarks/host_terms.py --measure --rounds 4 --steps 8
    # anywhere: compare with a measurement already on disk
    python benchmarks/host_terms.py --from OUT/multi_gpu_bench.json [--gpu h200 | --gpu-profile FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

BIASLESS = "opt125m_nobias"
PAIRS = [(name, layout) for name in ("opt125m", BIASLESS) for layout in ("ddp", "fsdp", "tp_pmi")]
#: the linear layers' biases of the OPT-125m shape: 6 a block, 12 blocks
BIAS_TENSORS = 72
#: the host term each layout's difference measures
TERMS = {"ddp": "ddp_tensor", "fsdp": "fsdp_tensor", "tp_pmi": "tp_parameter"}


def register() -> None:
    """Teach multi_gpu_step.py the bias-free OPT (its own models are unchanged)."""
    import multi_gpu_step as bench

    # q, k, v, out_proj, fc1, fc2 without biases; the LayerNorms keep theirs
    bench.register_variant(BIASLESS, "opt125m", lambda cfg, smoke: setattr(cfg, "enable_bias", False))


def differences(rows: list[dict]) -> list[dict]:
    """Per layout, what the engine adds to the one-GPU step measured (and estimated)
    beside it, with biases minus without: the engine's work on the 72 bias tensors (the
    one-GPU step's own work on them cancels)."""
    by = {(r["model"], r["layout"]): r for r in rows}
    out = []
    for layout, term in TERMS.items():
        a, b = by.get(("opt125m", layout)), by.get((BIASLESS, layout))
        if a is None or b is None:
            continue
        measured = (a["measured_ms"] - a["measured_one_gpu_ms"]) - (b["measured_ms"] - b["measured_one_gpu_ms"])
        est = (a["est_ms"] - a["est_one_gpu_ms"]) - (b["est_ms"] - b["est_one_gpu_ms"])
        out.append({"layout": layout, "term": term, "measured_ms": measured, "est_ms": est,
                    "measured_us_per_tensor": 1e3 * measured / BIAS_TENSORS,
                    "est_us_per_tensor": 1e3 * est / BIAS_TENSORS})
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="source", help="a multi_gpu_step.py JSON of these models (no GPU needed)")
    p.add_argument("--measure", action="store_true", help="measure now (under torchrun, 2 GPUs)")
    p.add_argument("--gpu", default="h100")
    p.add_argument("--gpu-profile", metavar="FILE", help="price on this profile file instead")
    p.add_argument("--out", default=os.environ.get("OUT", str(Path(__file__).resolve().parent / "results")))
    args, rest = p.parse_known_args()
    import multi_gpu_estimate as estimate

    estimate.use_this_checkout()
    register()
    steps = estimate.steps_of(p, args, lambda: estimate.measure(rest, PAIRS))
    if steps is None:
        return 0
    rows = estimate.compare(steps, args.gpu, PAIRS, args.gpu_profile)
    estimate.print_rows(rows)
    diffs = differences(rows)
    print(f"\n{'layout':7} {'term':13} {'measured':>9} {'estimated':>9}   per bias tensor (µs): measured, estimated")
    for d in diffs:
        print(f"{d['layout']:7} {d['term']:13} {d['measured_ms']:7.1f}ms {d['est_ms']:7.1f}ms   "
              f"{d['measured_us_per_tensor']:6.0f} {d['est_us_per_tensor']:6.0f}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "host_terms.json").write_text(json.dumps({"profile": args.gpu_profile or args.gpu, "rows": rows,
                                                             "differences": diffs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
