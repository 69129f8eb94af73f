"""The step model against measured training steps (issue 10).

For every step record of ``docs/data/step_h100_2026-11-23.json`` (real Hugging Face
training steps on an H100, eager and compiled, before and after shape changes), build
the same config with shapelint, estimate the step on the ``h100`` profile in the same
mode, and compare: absolute step time (median over runs) and the speedup of each
variant over its group's baseline. Variants whose loss slices padded logits are priced
with the slice's side cost, as shapelint prices its vocabulary suggestion.

    python benchmarks/step_model.py [--data FILE] [--out docs/data/step_model_h100.json]

Prints a Markdown table and writes the numbers as JSON. CPU only (fake tensors).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shapelint import hardware  # noqa: E402
from shapelint.capture.precision import to_precision  # noqa: E402
from shapelint.capture.run import capture  # noqa: E402
from shapelint.load.run import load  # noqa: E402
from shapelint.model.records import Slice  # noqa: E402
from shapelint.price.step import Step, side_ms, step_time  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from step_gpu_models import SECTIONS  # noqa: E402


def config_step(cfg: dict, batch: int, seq: int) -> Step:
    """The bf16 training step of a Hugging Face config, as shapelint captures it."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps(cfg))
        loaded = load(path, batch=batch, seq=seq)
        with loaded.fake_mode:
            inputs = to_precision(loaded.model, loaded.inputs, "bf16")
            cap = capture(loaded.model, inputs, precision="bf16", training=True, defined_at=loaded.defined_at)
    return Step(cap.gemms, cap.ops, cap.params, syncs=cap.syncs, breaks=cap.breaks)


def estimate(record: dict, hw: hardware.Hardware) -> float:
    cfg = dict(record["config"])
    cfg.setdefault("architectures", [SECTIONS[record["model"]]["architecture"]])
    step = config_step(cfg, record["batch"], record["seq"])
    extra = 0.0
    if record.get("loss_mode") == "slice":
        base = int(record.get("base_vocab") or _base_vocab(record))
        extra = side_ms([Slice(record["tokens"], base, int(cfg["vocab_size"]), 2)], hw, record["mode"], True)
    return step_time(step, hw, record["mode"], "adamw", extra_ms=extra).ms


def _base_vocab(record: dict) -> int:
    return {"gpt2": 50257, "bert": 30522}.get(record["model"], int(record["config"]["vocab_size"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT / "docs/data/step_h100_2026-11-23.json"))
    ap.add_argument("--out", default=str(ROOT / "docs/data/step_model_h100.json"))
    args = ap.parse_args()
    hw = hardware.resolve("h100")
    records = [r for r in json.loads(Path(args.data).read_text())["records"] if r.get("kind") == "step"]
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        groups[(r["model"], r["batch"], r["seq"], r["mode"], r["variant"])].append(r)
    rows = []
    est_cache: dict[tuple, float] = {}
    for key, rs in groups.items():
        est_cache[key] = estimate(rs[0], hw)
    for key, rs in groups.items():
        model, batch, seq, mode, variant = key
        base_key = (model, batch, seq, mode, rs[0]["baseline_variant"])
        measured = statistics.median(r["step_ms_median"] for r in rs)
        speedups = [r["speedup_vs_baseline"] for r in rs]
        est = est_cache[key]
        est_speedup = est_cache[base_key] / est if base_key in est_cache else None
        rows.append({
            "model": model, "batch": batch, "seq": seq, "mode": mode, "variant": variant, "runs": len(rs),
            "measured_ms": round(measured, 2), "estimated_ms": round(est, 2),
            "ms_error": round(est / measured - 1, 3),
            "kernel_ms": round(statistics.median(r["kernel_ms"] for r in rs), 2),
            "host_ms": round(statistics.median(r["cpu_ms"] for r in rs), 2),
            "measured_speedup": round(statistics.median(speedups), 3),
            "estimated_speedup": round(est_speedup, 3) if est_speedup else None,
            "speedup_error": round(est_speedup / statistics.median(speedups) - 1, 3) if est_speedup else None,
        })
    print("| model | batch×seq | mode | variant | runs | measured ms | est. ms | error | kernel ms | host ms "
          "| measured × | est. × | error |")
    print("|" + "---|" * 13)
    for r in rows:
        err = "" if r["speedup_error"] is None else f"{100 * r['speedup_error']:+.1f}%"
        print(f"| {r['model']} | {r['batch']}×{r['seq']} | {r['mode']} | {r['variant']} | {r['runs']} "
              f"| {r['measured_ms']} | {r['estimated_ms']} | {100 * r['ms_error']:+.0f}% | {r['kernel_ms']} "
              f"| {r['host_ms']} | {r['measured_speedup']} | {r['estimated_speedup']} "
              f"| {err} |")
    Path(args.out).write_text(json.dumps({"profile": "h100", "data": args.data, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
