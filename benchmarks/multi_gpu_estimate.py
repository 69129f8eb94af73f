#!/usr/bin/env python3
"""shapelint's estimate of the 2-GPU DDP, FSDP2 and tensor-parallel steps against a
measurement: prints (model, layout, estimated, measured, error) and writes JSON.

    # on a machine with 2 GPUs: measure (benchmarks/multi_gpu_step.py) and compare
    torchrun --standalone --nproc_per_node 2 benchmarks/multi_gpu_estimate.py --measure
    # anywhere: compare with a measurement already on disk
    python benchmarks/multi_gpu_estimate.py --from docs/data/multi_gpu_2xh100_2026-11-25.json

The models and steps are ``multi_gpu_step.py``'s (GPT-2 small, an OPT-125m with GPT-2
small's shapes, a Llama-3.2-1B-shaped model; batch per GPU, 1024 tokens, bf16
autocast over fp32 parameters, fused AdamW, eager). Layouts: ``ddp`` (``--dp 2``),
``fsdp`` (``--fsdp 2``), ``tp_pmi`` (``--tp 2``: Megatron's two all-reduces per block
each way, which ``PrepareModuleInput`` gives DTensor). The estimate prices the step
on the profile named by ``--gpu`` (default h100). Each layout is compared as a ratio
to the one-GPU step measured beside it, and as milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: measured layout → shapelint's options
LAYOUTS = {"none": {}, "ddp": {"dp": 2}, "fsdp": {"fsdp": 2}, "tp_pmi": {"tp": 2}}
#: what the benchmark runs by default; GPT-2's fused Conv1D c_attn takes no DTensor TP
PAIRS = [("gpt2", "ddp"), ("gpt2", "fsdp"), ("opt125m", "ddp"), ("opt125m", "fsdp"), ("opt125m", "tp_pmi"),
         ("llama1b", "ddp"), ("llama1b", "fsdp"), ("llama1b", "tp_pmi")]


def estimate(name: str, layout: str, gpu: str, folder: Path) -> dict[str, float]:
    """shapelint's step for ``name`` under ``layout`` (ms, and the parts)."""
    import multi_gpu_step as bench

    from shapelint.app.api import lint_target

    cfg_dir = folder / name
    if not (cfg_dir / "config.json").exists():
        bench.make_config(name, False).save_pretrained(cfg_dir)
    _, batch, seq = bench.MODELS[name]
    r = lint_target(cfg_dir / "config.json", gpu=gpu, batch=batch, seq=seq, **LAYOUTS[layout]).result
    t = r.step_time
    assert t is not None
    return {"step_ms": t.ms, "gpu_ms": t.gpu_ms, "host_ms": t.host_ms, "comm_ms": t.comm_ms}


def compare(measured: list[dict], gpu: str) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base: dict[str, dict[str, float]] = {}
        for name, layout in PAIRS:
            m = next((s for s in measured if s["model"] == name and s["mode"] == layout), None)
            if m is None:
                continue
            if name not in base:
                base[name] = estimate(name, "none", gpu, Path(tmp))
            est = estimate(name, layout, gpu, Path(tmp))
            est_ratio = est["step_ms"] / base[name]["step_ms"]
            rows.append({"model": name, "layout": layout, "est_ms": est["step_ms"], "est_one_gpu_ms": base[name]["step_ms"],
                         "est_ratio": est_ratio, "measured_ms": m["step_ms"], "measured_one_gpu_ms": m["baseline_ms"],
                         "measured_ratio": m["ratio"], "ratio_error": est_ratio / m["ratio"] - 1,
                         "ms_error": est["step_ms"] / m["step_ms"] - 1, "est": est})
    return rows


def print_rows(rows: list[dict]) -> None:
    print(f"{'model':9} {'layout':7} {'est ms':>8} {'meas ms':>8} {'error':>7}   {'est ×':>6} {'meas ×':>6} {'error':>7}"
          f"   {'comm':>6} {'host':>7} {'gpu':>7}")
    for r in rows:
        e = r["est"]
        print(f"{r['model']:9} {r['layout']:7} {r['est_ms']:8.1f} {r['measured_ms']:8.1f} {100 * r['ms_error']:+6.1f}%"
              f"   {r['est_ratio']:6.2f} {r['measured_ratio']:6.2f} {100 * r['ratio_error']:+6.1f}%"
              f"   {e['comm_ms']:6.1f} {e['host_ms']:7.1f} {e['gpu_ms']:7.1f}")


def measure(argv: list[str]) -> list[dict] | None:
    """Run multi_gpu_step.py's steps (rank 0 gets them; other ranks None)."""
    import multi_gpu_step as bench
    import torch.distributed as dist

    out = Path(os.environ.get("OUT", "."))
    sys.argv = ["multi_gpu_step.py", "--modes", "none,ddp,fsdp,tp_pmi", "--skip", "collectives,contention,dtensor",
                "--out", str(out), *argv]
    bench.main()
    if dist.is_initialized() and dist.get_rank() != 0:
        return None
    return list(json.loads((out / "multi_gpu_bench.json").read_text())["steps"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="source", help="a multi_gpu_step.py JSON to compare with (no GPU needed)")
    p.add_argument("--measure", action="store_true", help="measure now (under torchrun, 2 GPUs)")
    p.add_argument("--gpu", default="h100")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args, rest = p.parse_known_args()
    if args.measure:
        steps = measure(rest)
        if steps is None:
            return 0
    elif args.source:
        steps = json.loads(Path(args.source).read_text())["steps"]
    else:
        p.error("give --from FILE or --measure")
    rows = compare(steps, args.gpu)
    print_rows(rows)
    worst = max((abs(r["ms_error"]) for r in rows), default=0.0)
    print(f"worst step error {100 * worst:.1f}% over {len(rows)} (model, layout) pairs")
    Path(args.out, "multi_gpu_estimate.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
