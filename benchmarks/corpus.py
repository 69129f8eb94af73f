"""Every model of the real-model corpus (tests/corpus) at full depth, as a user
lints it: exit code, GEMM count, whether its GEMM FLOPs equal FlopCounterMode's on
the same step (where that counter is complete: tests/test_models_corpus.py names
its known errors), findings, lint time.

    python benchmarks/corpus.py [--batch 8] [--seq 1024] [--out benchmarks/results/corpus.json] [MODEL...]

Prints a table and writes the rows as JSON. Lint time is the CLI's run on the
target in this process (torch and transformers already imported).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import sys
import time
from pathlib import Path

import torch
import transformers

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_models_corpus import CORPUS, MODELS, expected_counter, traced  # noqa: E402

from shapelint.app.cli import main  # noqa: E402


def lint(config: Path, batch: int, seq: int) -> tuple[int, dict | None, float, str]:
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(config), "--batch", str(batch), "--seq", str(seq), "--format", "json"])
    seconds = time.perf_counter() - start
    doc = json.loads(out.getvalue()) if code in (0, 1) else None
    return code, doc, seconds, err.getvalue().strip()


def row(name: str, batch: int, seq: int) -> dict[str, object]:
    config = CORPUS / name / "config.json"
    code, doc, seconds, error = lint(config, batch, seq)
    result: dict[str, object] = {"model": name, "exit": code, "lint_s": round(seconds, 2)}
    if doc is None:
        return {**result, "error": error}
    gemms, counts = traced(config, batch=batch, seq=seq)
    return {
        **result,
        "gemms": doc["summary"]["gemm_count"],
        "flops": sum(g.flops for g in gemms),
        "flops_equal": counts == expected_counter(gemms),
        "findings": sorted(f["code"] for f in doc["findings"]),
    }


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=MODELS)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "corpus.json"))
    args = parser.parse_args()
    rows = []
    print(f"{'model':32} {'exit':>4} {'GEMMs':>6} {'FLOPs equal':>11} {'findings':>8} {'lint s':>7}")
    for name in args.models:
        r = row(name, args.batch, args.seq)
        rows.append(r)
        equal = {True: "yes", False: "NO"}.get(r.get("flops_equal"), "-")  # type: ignore[arg-type]
        print(f"{name:32} {r['exit']:>4} {r.get('gemms', '-'):>6} {equal:>11} "
              f"{len(r.get('findings', [])):>8} {r['lint_s']:>7}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "batch": args.batch, "seq": args.seq, "torch": torch.__version__, "transformers": transformers.__version__,
        "machine": platform.machine(), "python": platform.python_version(), "rows": rows}, indent=2) + "\n")
    built = sum(1 for r in rows if r["exit"] in (0, 1))
    print(f"{built}/{len(rows)} lint with exit 0 or 1; FLOPs equal on "
          f"{sum(1 for r in rows if r.get('flops_equal'))}; wrote {out}")


if __name__ == "__main__":
    main_()
