"""Fit the step model's host costs to measured host times (issue 10).

Joins benchmarks/host_phases.py's measurements (the host time of a training step issued
onto an idle H100, per model, eager and compiled) with what shapelint counts for the same
steps (kernels as the step model counts them, parameter tensors), and fits each host
model by least squares in relative error: one number per kernel; a fixed part plus per
kernel; per kernel plus per parameter tensor (what ``shapelint.price.step.host_costs``
uses). Prints the fits with their RMS error and each model's residual, and writes them.

    python benchmarks/host_fit.py [--data FILE ...] [--out docs/data/host_fit_h100.json]

CPU only (fake tensors); about a minute for 11 models.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from host_phases import NO_DROPOUT  # noqa: E402
from step_gpu_models import SECTIONS  # noqa: E402
from step_model import config_step  # noqa: E402

from shapelint import hardware  # noqa: E402
from shapelint.price.step import step_time  # noqa: E402

DATA = sorted(str(p) for p in (ROOT / "docs/data").glob("host_phases_h100_2026-11-23*.json"))
#: name -> the columns of the design matrix (1: a fixed part, k: kernels, p: parameter tensors)
MODELS = {"per kernel": "k", "fixed + per kernel": "1k", "per kernel + per tensor": "kp",
          "per kernel + per tensor + per extra graph call": "kpg",
          "per kernel + per tensor + per extra graph call + per eager op": "kpge"}
UNITS = {"1": ("ms", 1.0), "k": ("us/kernel", 1e3), "p": ("us/tensor", 1e3), "g": ("us/graph call", 1e3),
         "e": ("us/eager op", 1e3)}
#: the graph columns of a compiled step (benchmarks/graph_probe.py, run with the
#: transformers version the measurements ran with); eager steps have none
COLUMN = {"1": lambda r: 1.0, "k": lambda r: r["kernels"], "p": lambda r: r["tensors"],
          "g": lambda r: r.get("graph_calls", 0), "e": lambda r: r.get("eager_ops", 0)}


def counts(section: str, batch: int, seq: int, hw: hardware.Hardware) -> dict[str, int]:
    cfg = {**SECTIONS[section]["config"], "architectures": [SECTIONS[section]["architecture"]]}
    step = config_step(cfg, batch, seq)
    return {"eager": step_time(step, hw, "eager").kernels, "compile": step_time(step, hw, "compile").kernels,
            "tensors": len(step.params)}


def fit(rows: list[dict], columns: str) -> tuple[list[float], list[float]]:
    """Coefficients (in ms per unit) and each row's relative residual."""
    x = np.array([[float(COLUMN[c](r)) for c in columns] for r in rows])
    y = np.array([r["host_ms"] for r in rows])
    coef, *_ = np.linalg.lstsq(x / y[:, None], np.ones(len(y)), rcond=None)
    return [float(c) for c in coef], [float(v) for v in (x @ coef) / y - 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", nargs="+", default=DATA)
    ap.add_argument("--out", default=str(ROOT / "docs/data/host_fit_h100.json"))
    args = ap.parse_args()
    hw = hardware.resolve("h100")
    cache: dict[tuple[str, int, int], dict[str, int]] = {}
    rows: list[dict] = []
    for file in args.data:
        doc = json.loads(Path(file).read_text())
        probe_file = ROOT / "docs/data" / f"graph_probe_transformers-{doc['transformers']}.json"
        probes = json.loads(probe_file.read_text())["sections"]
        for r in doc["rows"]:
            section = r["model"].removesuffix(NO_DROPOUT)
            key = (section, r["batch"], r["seq"])
            if key not in cache:
                cache[key] = counts(*key, hw)
            c = cache[key]
            row = {"file": Path(file).name, "model": r["model"], "mode": r["mode"], "host_ms": r["step_ms"],
                   "kernels": c[r["mode"]], "tensors": c["tensors"]}
            found = probes.get(section, {}).get("probe")
            if r["mode"] == "compile" and found:
                row["graph_calls"] = found["forward_graphs"] + found["backward_graphs"] - 2
                row["eager_ops"] = found["eager_ops"]
            rows.append(row)
    out: dict[str, dict] = {}
    for mode in ("eager", "compile"):
        sel = [r for r in rows if r["mode"] == mode]
        print(f"\n{mode}: {len(sel)} measured steps")
        print("| host model | fit | RMS error | residuals |\n|---|---|---|---|")
        for name, columns in MODELS.items():
            if mode == "eager" and ("g" in columns or "e" in columns):
                continue
            coef, resid = fit(sel, columns)
            rms = float(np.sqrt(np.mean(np.square(resid))))
            terms = " + ".join(f"{c * UNITS[col][1]:.1f} {UNITS[col][0]}" for c, col in zip(coef, columns))
            print(f"| {name} | {terms} | {rms:.0%} | "
                  + " ".join(f"{r['model']} {v:+.0%}" for r, v in zip(sel, resid)) + " |")
            out.setdefault(mode, {})[name] = {"coefficients": dict(zip(columns, coef)), "rms": rms,
                                              "residuals": {f"{r['file']}:{r['model']}": v for r, v in zip(sel, resid)}}
    Path(args.out).write_text(json.dumps({"data": [Path(d).name for d in args.data], "rows": rows, "fits": out},
                                         indent=1))


if __name__ == "__main__":
    main()
