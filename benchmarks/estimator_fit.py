"""Compare the estimator with measured H200 GEMM timings (no GPU needed).

Reads the reference timings (plain torch.mm / bmm on contiguous row-major operands,
NVIDIA H200, torch 2.11, CUDA 13.0; see docs/benchmarks.md) and prints, per group of
rows, the median and worst ratio estimate / measured, plus the per-row table with
--all. Writes the numbers to benchmarks/results/estimator_fit.json.

    python benchmarks/estimator_fit.py [--truth PATH] [--all]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from shapelint.hardware import resolve
from shapelint.model.records import Gemm
from shapelint.physics.gemm_shapes import matrix
from shapelint.price.gemm import gemm_time

HERE = Path(__file__).resolve().parent
DEFAULT_TRUTH = HERE.parent.parent / "shared" / "data" / "gemm_truth.json"


def row_gemm(row: dict) -> Gemm:
    m, n, k, batch = row["M"], row["N"], row["K"], row["batch"] or 1
    bs = batch > 1
    a = matrix(m, k, k, 1, 0, m * k if bs else 0)
    b = matrix(k, n, n, 1, 0, k * n if bs else 0)
    c = matrix(m, n, n, 1, 0, m * n if bs else 0)
    return Gemm(0, "bmm" if bs else "mm", "forward", m, n, k, batch, row["dtype"], a, b, c, "", "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--truth", default=str(DEFAULT_TRUTH))
    ap.add_argument("--all", action="store_true")
    args = ap.parse_args()
    truth = json.loads(Path(args.truth).read_text())
    hw = resolve("h200")
    groups: dict[str, list[float]] = defaultdict(list)
    rows = []
    for row in truth["rows"]:
        if row["tag"].startswith("attn"):
            continue  # plain bmm timings of attention shapes: not what the fused kernels run
        est = gemm_time(row_gemm(row), hw).seconds * 1e3
        ratio = est / row["ms"]
        groups[f"{row['tag']}/{row['dtype']}"].append(ratio)
        rows.append({**row, "est_ms": est, "ratio": ratio})
        if args.all:
            print(f"{row['tag']:12} {row['dtype']:5} {row['M']:>6} {row['N']:>6} {row['K']:>6} "
                  f"measured {row['ms']:8.4f} ms  est {est:8.4f} ms  ratio {ratio:5.2f}")
    print(f"{'group':22} {'rows':>4} {'median est/meas':>16} {'worst':>7}")
    for tag, rs in sorted(groups.items()):
        worst = max(rs, key=lambda r: abs(r - 1))
        print(f"{tag:22} {len(rs):4d} {statistics.median(rs):16.2f} {worst:7.2f}")
    every = [r["ratio"] for r in rows]
    within = sum(1 for r in every if abs(r - 1) <= 0.25) / len(every)
    print(f"all rows: {len(every)}, within 25%: {within:.0%}")
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "estimator_fit.json").write_text(json.dumps({"gpu": hw.name, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
