"""The level of the host costs the h100 profile ships (issue 10).

benchmarks/host_fit.py fits the host model's structure (per kernel plus per parameter
tensor) on host times measured onto an idle GPU; the profile holds it at some level, a
"typical host". This sets that level on every real training step measured on an H100:
each ``--verify --step`` run (docs/data/verify_step_h100*.json), each step_gpu.py run
(docs/data/step_h100_2026-11-23_run*.json, _smollm.json: baselines) and each
host_timeline.py run. For every scale of the shipped host costs it prices each model's
step (shapelint's h100 profile, its GPU side unchanged) and counts the measured steps
within 25%; a host-bound step follows the host, so one level cannot fit every machine.

    python benchmarks/host_level.py [--out docs/data/host_level_h100.json]

CPU only (fake tensors); about 30 s.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from step_gpu_models import SECTIONS  # noqa: E402
from step_model import config_step  # noqa: E402

from shapelint import hardware  # noqa: E402
from shapelint.measure.calibrate import host_table  # noqa: E402
from shapelint.price.step import step_time  # noqa: E402

DATA = ROOT / "docs" / "data"
SCALES = (0.7, 0.8, 0.9, 1.0, 1.1, 1.2)
Key = tuple[str, str, int, int]


def measured_steps() -> dict[Key, list[tuple[float, str]]]:
    """(model, mode, batch, seq) -> [(measured step ms, source file)], each run once."""
    out: dict[Key, list[tuple[float, str]]] = defaultdict(list)
    for path in sorted(DATA.glob("verify_step_h100*.json")):
        for r in json.loads(path.read_text())["records"]:
            ms = (r.get("step_verification") or {}).get("measured_ms")
            if ms:
                out[(r["model"], r["mode"], r["batch"], r["seq"])].append((ms, path.name))
    for path in [*sorted(DATA.glob("step_h100_2026-11-23_run*.json")), DATA / "step_h100_2026-11-23_smollm.json"]:
        for r in json.loads(path.read_text())["records"]:
            if r.get("kind") == "step" and r["variant"] == r.get("baseline_variant"):
                out[(r["model"], r["mode"], r["batch"], r["seq"])].append((r["step_ms_median"], path.name))
    for path in sorted(DATA.glob("host_timeline_h100*.json")):
        for r in json.loads(path.read_text())["rows"]:
            out[(r["model"], r["mode"], r["batch"], r["seq"])].append((r["step_ms"], path.name))
    return dict(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(DATA / "host_level_h100.json"))
    args = ap.parse_args()
    hw = hardware.resolve("h100")
    measured = measured_steps()
    steps = {}
    for model, _, batch, seq in measured:
        if (model, batch, seq) not in steps:
            cfg = dict(SECTIONS[model]["config"])
            cfg.setdefault("architectures", [SECTIONS[model]["architecture"]])
            steps[(model, batch, seq)] = config_step(cfg, batch, seq)
    rows = []
    print("| mode | scale of the shipped host costs | µs/kernel, µs/tensor | within 25% | RMS error "
          "| most over | most under |")
    print("|---|---|---|---|---|---|---|")
    for mode in ("eager", "compile"):
        for scale in SCALES:
            scaled = replace(hw, step=replace(hw.step, **host_table(hw, scale, scale)))
            errors = []
            for key, values in measured.items():
                if key[1] != mode:
                    continue
                model, _, batch, seq = key
                est = step_time(steps[(model, batch, seq)], scaled, mode).ms
                errors += [(est / ms - 1, model, source) for ms, source in values]
            within = sum(abs(e) <= 0.25 for e, _, _ in errors)
            rms = math.sqrt(sum(e * e for e, _, _ in errors) / len(errors))
            table = host_table(hw, scale, scale)
            prefix = "compile_" if mode == "compile" else ""
            costs = f"{table[prefix + 'host_us_per_kernel']:.1f}, {table[prefix + 'host_us_per_tensor']:.1f}"
            hi, lo = max(errors), min(errors)
            print(f"| {mode} | {scale} | {costs} | {within}/{len(errors)} | {rms:.3f} | {hi[0]:+.0%} {hi[1]} "
                  f"| {lo[0]:+.0%} {lo[1]} |")
            rows.append({"mode": mode, "scale": scale, "costs_us": costs, "within_25": within, "steps": len(errors),
                         "rms": round(rms, 4), "misses": [(round(e, 3), m, s) for e, m, s in errors if abs(e) > 0.25]})
    Path(args.out).write_text(json.dumps({
        "profile": "h100", "shipped": {k: getattr(hw.step, k) for k in host_table(hw, 1.0, 1.0)},
        "measured": {"/".join(map(str, k)): v for k, v in measured.items()}, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
