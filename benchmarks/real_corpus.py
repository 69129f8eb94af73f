"""The issue-26 corpus of real models (benchmarks/real_corpus/: Hugging Face configs at
their published hyperparameters, and model.py files that build timm, torchvision,
diffusers and third-party models), each linted as a user lints it, at the defaults:
whether it lints (exit 0 or 1), lint time and peak memory, the step estimate, the host
reads answered and the notes, and (``--flops``) whether its GEMM FLOPs equal
FlopCounterMode's on the same step (tests/test_models_corpus.py names the counter's
known errors). An SSM traced through shapelint's fused stand-ins
(``shapelint.load.ssm_kernels``: its summary has ``ssm_kernels``) is not compared: the
counter would count shapelint's own ops, not the model's code, so agreeing proves nothing.

    python benchmarks/real_corpus.py [--flops] [--timeout 600] [--out FILE] [MODEL...]

Each target runs in a process of its own (``--one``), so times and peak memory are
its own. Prints a table and writes the rows as JSON (default
benchmarks/results/real_corpus.json).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "benchmarks" / "real_corpus"


def targets(names: list[str]) -> list[tuple[str, Path]]:
    out = []
    for folder in sorted(p for p in CORPUS.iterdir() if p.is_dir()):
        if names and folder.name not in names:
            continue
        target = folder / "model.py" if (folder / "model.py").is_file() else folder / "config.json"
        out.append((folder.name, target))
    return out


def one(target: Path, flops: bool) -> dict[str, Any]:
    """Lint ``target`` in this process (``--no-isolate``) and, with ``flops``, count its
    step's FLOPs with FlopCounterMode."""
    from shapelint.app.cli import main

    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(target), "--no-cache", "--no-isolate", "--format", "json"])
    row: dict[str, Any] = {"code": code, "seconds": round(time.perf_counter() - start, 1),
                           "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}
    if code not in (0, 1):
        lines = [line for line in err.getvalue().splitlines() if line.startswith("shapelint: error")]
        row["error"] = (lines or err.getvalue().strip().splitlines() or [""])[-1]
        return row
    summary = json.loads(out.getvalue())["summary"]
    row.update({key: summary.get(key) for key in ("gemm_count", "total_flops", "step_ms", "findings", "trace_notes")})
    row["host_reads"] = len(summary.get("host_reads", []))
    if flops:
        skip = oracle_skip(summary)
        if skip:
            row.update({"flops_equal": None, "flops_skipped": skip})
            return row
        print(json.dumps(row), flush=True)  # the lint's row stands if the FLOP count runs out of time
        row.update(flop_check(target))
    return row


#: why an SSM's FLOPs are not compared (see the module docstring)
SSM_STAND_INS = "fused SSM stand-ins: FlopCounterMode would count shapelint's own ops, not the model's"


def oracle_skip(summary: dict[str, Any]) -> str | None:
    """Why FlopCounterMode is no independent check of this lint (None: it is)."""
    return SSM_STAND_INS if "ssm_kernels" in summary else None


def flop_check(target: Path) -> dict[str, Any]:
    """shapelint's GEMM FLOPs against FlopCounterMode's on the same step, per op."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_models_corpus import expected_counter, traced

    gemms, counts = traced(target, batch=None, seq=None)
    expected = expected_counter(gemms)
    return {"flops_equal": counts == expected, "flop_counter": sum(counts.values()),
            "shapelint_flops": sum(expected.values())}


def run_all(names: list[str], flops: bool, timeout: int) -> list[dict[str, Any]]:
    rows = []
    for name, target in targets(names):
        cmd = [sys.executable, __file__, "--one", str(target), *(["--flops"] if flops else [])]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
            stdout, stderr = proc.stdout, proc.stderr
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
            stderr = f"over {timeout} s"
        rows_printed = [line for line in stdout.splitlines() if line.startswith("{")]
        row = json.loads(rows_printed[-1]) if rows_printed else {"code": "failed", "error": stderr.strip()[-300:]}
        if rows_printed and "flops_equal" not in row and flops:
            row["flops_equal"] = None  # the FLOP count ran out of time
        row.setdefault("seconds", round(time.perf_counter() - start, 1))
        row.update({"model": name, "target": target.name, "lints": row["code"] in (0, 1)})
        print(_line(row), flush=True)
        rows.append(row)
    return rows


def _line(row: dict[str, Any]) -> str:
    step = f"{row['step_ms']:.1f}" if isinstance(row.get("step_ms"), (int, float)) else "-"
    flop = "skip" if row.get("flops_skipped") else {True: "equal", False: "DIFFER", None: "-"}[row.get("flops_equal")]
    tail = row.get("error", "") if not row["lints"] else f"reads {row.get('host_reads', 0)}"
    return (f"{row['model']:<36} {'yes' if row['lints'] else 'no':<4} {row['seconds']:>7.1f} s "
            f"{row.get('max_rss_mib', '-'):>6} MiB {step:>10} ms  {flop:<6} {tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--flops", action="store_true", help="also compare FLOPs with FlopCounterMode")
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "real_corpus.json")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.flops)))
        return
    import torch
    import transformers

    rows = run_all(args.models, args.flops, args.timeout)
    lints = sum(r["lints"] for r in rows)
    print(f"{lints}/{len(rows)} lint at the defaults ({100 * lints / max(len(rows), 1):.1f}%)")
    if args.flops:
        compared = [r for r in rows if r.get("flops_equal") is not None]
        skipped = sum(1 for r in rows if r.get("flops_skipped"))
        print(f"FLOPs equal FlopCounterMode's on {sum(1 for r in compared if r['flops_equal'])} of {len(compared)} "
              f"compared ({skipped} skipped: {SSM_STAND_INS})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "machine": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
        "transformers": transformers.__version__, "date": time.strftime("%Y-%m-%d"), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
