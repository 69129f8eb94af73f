#!/usr/bin/env python3
"""``shapelint --verify --step`` of the parallel-shape findings on 2 GPUs: the CLI itself
measures SL603 (FSDP2 groups too small) and SL602 (heads not divisible by TP) on their
changed layout, each against the step as the lint found it.

- **SL603**: GPT-2 small (``parallel_findings_configs/gpt2_small``), ``--fsdp 2``,
  1 × 1024 tokens per GPU. *before* wraps every block in its own ``fully_shard``;
  *after* wraps the suggested k consecutive blocks in one (and pads the vocabulary for
  SL501, which the lint also reports: each finding is then measured alone too).
- **SL602**: an OPT decoder with GPT-2 XL's widths and 25 heads
  (``parallel_findings_configs/opt_xl_widths_25_heads``: hidden 1600, FFN 6400, 12
  layers), ``--tp 2``, 32 × 1024 tokens per GPU. *before* runs the attention whole on
  both GPUs (only the MLP and the LM head sharded); *after* is built with 20 heads of 80
  (``num_attention_heads`` edited as ``--fix`` would) and shards the attention too
  (colwise q/k/v, rowwise ``out_proj``).

    # on a machine with 2 GPUs (about 3 minutes)
    python benchmarks/verify_parallel_findings.py --out $OUT
    # print a saved run's table
    python benchmarks/verify_parallel_findings.py --table $OUT/verify_parallel_findings.json
    # the same code path on the CPU, two gloo ranks, tiny configs (about 1 minute)
    python benchmarks/verify_parallel_findings.py --smoke --out /tmp/vpf

Writes ``OUT/verify_parallel_findings.json`` (each run's ``step_verification`` and
findings as the JSON report gives them) and prints one row per measured comparison.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CONFIGS = HERE / "parallel_findings_configs"

#: (name, config, CLI options): each run is one shapelint command
RUNS = [
    ("SL603 GPT-2 small, FSDP 2, 1 x 1024", CONFIGS / "gpt2_small" / "config.json",
     ["--fsdp", "2", "--batch", "1", "--seq", "1024"]),
    ("SL602 OPT 1600 wide, 25 heads, TP 2, 32 x 1024", CONFIGS / "opt_xl_widths_25_heads" / "config.json",
     ["--tp", "2", "--batch", "32", "--seq", "1024"]),
]


def run_cli(name: str, config: Path, options: list[str], out: Path) -> dict[str, Any]:
    """``shapelint CONFIG OPTIONS --verify --step --format json``; its JSON report's summary."""
    report = out / (name.split()[0].lower() + ".json")
    cmd = [sys.executable, "-m", "shapelint", str(config), *options, "--verify", "--step", "--format", "json",
           "--no-cache", "-o", str(report)]
    print("$ " + " ".join(cmd[2:]), file=sys.stderr, flush=True)
    report.unlink(missing_ok=True)  # never read an earlier run's report as this one's
    rc = subprocess.run(cmd, check=False).returncode
    if rc not in (0, 1) or not report.is_file():  # 1: findings reported; anything else failed
        raise SystemExit(f"verify_parallel_findings: {name}: shapelint exited {rc} without a report")
    data = json.loads(report.read_text())
    # one target: "summary" is its summary ("targets" lists the same for several)
    summary: dict[str, Any] = data["summary"]
    return {"name": name, "command": " ".join(["shapelint", *cmd[3:]]), "summary": summary,
            "findings": [{"code": f["code"], "suggestion": f.get("suggestion"), "step_ms_saved": f.get("step_ms_saved")}
                         for f in data.get("findings", [])]}


def smoke(out: Path) -> list[dict[str, Any]]:
    """The tiny configs of tests/test_verify_parallel_findings.py, verified on two gloo
    ranks through the same worker (the CLI needs CUDA)."""
    import transformers

    from shapelint import hardware
    from shapelint.check.run import load_rules
    from shapelint.measure.parallel_step import verify_parallel
    from shapelint.measure.step_blocks import Schedule
    from shapelint.pipeline import run as pipeline
    from shapelint.pipeline.result import Options
    from shapelint.price import Policy

    transformers.GPT2Config(n_layer=4, n_embd=128, n_head=4, vocab_size=8192, n_positions=256, bos_token_id=0,
                            eos_token_id=0).save_pretrained(out / "gpt2")
    transformers.OPTConfig(hidden_size=1600, ffn_dim=64, num_hidden_layers=1, num_attention_heads=25,
                           word_embed_proj_dim=1600, vocab_size=512,
                           max_position_embeddings=2048).save_pretrained(out / "opt")
    rows = []
    for name, target, layout, lint_size, run_size in [
            ("SL603 tiny GPT-2, FSDP 2", out / "gpt2" / "config.json", {"fsdp": 2}, (1, 128), (1, 128)),
            ("SL602 tiny OPT, TP 2", out / "opt" / "config.json", {"tp": 2}, (64, 1024), (1, 16))]:
        opts = Options(policy=Policy(min_speedup=1.0, min_loss=0.0, min_step_share=0.0), batch=lint_size[0],
                       seq=lint_size[1], fsdp=layout.get("fsdp", 1), tp=layout.get("tp", 1))
        r = pipeline.lint_target(target, opts, hardware.resolve("h100"), load_rules(()))
        r = replace(r, options=replace(opts, batch=run_size[0], seq=run_size[1]))
        v = verify_parallel(r, Schedule(2, 2, 1), device="cpu")
        rows.append({"name": name, "command": "(smoke, CPU)", "summary": {"step_verification": v.to_json()},
                     "findings": [{"code": f.code, "suggestion": f.suggestion.to_json() if f.suggestion else None,
                                   "step_ms_saved": f.step_ms_saved} for f in r.findings]})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """One line per comparison: all applied (where several are), then each finding alone."""
    head = f"{'run':<48} {'variant':<44} {'est. ms':>17} {'measured ms':>17} {'est.':>6} {'meas.':>6}  verdict"
    lines = [head, "-" * len(head)]
    for row in rows:
        v = row["summary"].get("step_verification")
        if v is None:
            lines.append(f"{row['name']:<48} not measured (see the log)")
            continue
        name = row["name"]
        if v.get("measured_ms_after") is not None and len(v["findings"]) != 1:
            lines.append(_line(name, "all applied", v["est_ms"], v["est_ms_after"], v["est_speedup"],
                               v["measured_ms"], v["measured_ms_after"], v["measured_speedup"], v["confirmed"]))
            name = ""
        for f in v["findings"]:
            label = f"{f['code']} {_suggestion(f.get('suggestion'))}"
            if not f.get("measured"):
                lines.append(f"{name:<48} {label:<44} not measured alone {f.get('error') or ''}")
                name = ""
                continue
            est_after = v["est_ms"] - (f["est_step_ms_saved"] or 0.0)
            lines.append(_line(name, label, v["est_ms"], est_after, f["est_speedup"], f["measured_ms"],
                               f["measured_ms_after"], f["measured_speedup"], f["confirmed"]))
            name = ""
        lines += [f"{'':<48} not applied: {n['code']}: {n['reason']}" for n in v.get("not_applied", [])]
    return "\n".join(lines)


def _line(name: str, label: str, est: float, est_after: float, est_speedup: float | None, measured: float,
          measured_after: float, speedup: float, confirmed: bool) -> str:
    return (f"{name:<48} {label:<44} {est:>7.1f} → {est_after:>7.1f} {measured:>7.1f} → {measured_after:>7.1f} "
            f"{est_speedup or 0:>5.2f}× {speedup:>5.2f}×  {'confirmed' if confirmed else 'not confirmed'}")


def _suggestion(s: dict[str, Any] | None) -> str:
    return f"{s['parameter']}: {s['from']} → {s['to']}" if s else ""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=None, help="folder for the reports and the JSON")
    p.add_argument("--table", type=Path, default=None, help="print the table of a saved verify_parallel_findings.json")
    p.add_argument("--smoke", action="store_true", help="tiny configs on the CPU (two gloo ranks)")
    args = p.parse_args()
    if args.table is not None:
        print(table(json.loads(args.table.read_text())["runs"]))
        return
    out = args.out or Path(tempfile.mkdtemp(prefix="verify-parallel-findings-"))
    out.mkdir(parents=True, exist_ok=True)
    rows = smoke(out) if args.smoke else [run_cli(name, config, options, out) for name, config, options in RUNS]
    (out / "verify_parallel_findings.json").write_text(json.dumps({"runs": rows}, indent=1))
    print(table(rows))
    print(f"\nwritten: {out / 'verify_parallel_findings.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
