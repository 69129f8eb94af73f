"""Estimated vs measured speedup of every rule's BAD examples (the snippets each
rule module carries), on the local CUDA GPU. Needs a CUDA GPU.

    python benchmarks/verify_rule_examples.py [--out DIR]

Prints a table and writes rule_examples_<gpu>.json / .md to --out.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from shapelint.check.run import builtin_rules
from shapelint.hardware import default_gpu, resolve
from shapelint.measure.verify import verify
from shapelint.pipeline.examples import trace_example
from shapelint.price import price

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--rules", default="", help="only these codes (comma-separated)")
    args = ap.parse_args()
    only = {c for c in args.rules.split(",") if c}
    local = default_gpu()
    rows = []
    for rule in builtin_rules():
        if only and rule.code not in only:
            continue
        for i, ex in enumerate(rule.bad):
            hw = resolve(ex.gpu)
            if hw.arch != local.arch:
                hw = local  # estimate for the GPU we measure on
            cap, ctx = trace_example(rule, ex)
            findings = [f for f in price(rule.check(cap.gemms, hw, ctx), cap.gemms, hw) if f.code == rule.code]
            for f in verify(findings, cap.gemms, hw, 1.05):
                v = f.verification.to_json() if f.verification else {}
                rows.append({"code": rule.code, "example": i, "model": ex.model, "dtype": ex.dtype,
                             "suggestion": f.suggestion.to_json() if f.suggestion else None,
                             "est_speedup": f.est_speedup, "measured_speedup": f.measured_speedup,
                             "est_ms": f.est_ms, "est_ms_after": f.est_ms_after,
                             "before_ms": v.get("before_ms"), "after_ms": v.get("after_ms"),
                             "kind": f.gain, "status": v.get("status")})
                m = f.measured_speedup
                print(f"{rule.code} BAD{i} {ex.dtype:5} est {f.est_speedup or 0:6.2f}x  measured "
                      f"{(m or 0):6.2f}x  est ms {f.est_ms:.3f} -> {f.est_ms_after:.3f}  measured ms "
                      f"{v.get('before_ms')} -> {v.get('after_ms')}  {ex.model[:50]}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"),
           "rows": rows}
    (out / f"rule_examples_{local.key}.json").write_text(json.dumps(doc, indent=1))
    lines = [f"Device: {doc['device']}, torch {doc['torch']}, {doc['date']}", "",
             "| rule | example | dtype | suggestion | est. | measured | est/measured |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        s = r["suggestion"]
        sug = f"{s['parameter']} {s['from']} → {s['to']}" if s else ""
        m = r["measured_speedup"]
        ratio = f"{r['est_speedup'] / m:.2f}" if m else "n/a"
        lines.append(f"| {r['code']} | `{r['model'][:60]}` | {r['dtype']} | {sug} | {r['est_speedup']:.2f}× | "
                     f"{'n/a' if m is None else f'{m:.2f}×'} | {ratio} |")
    (out / f"rule_examples_{local.key}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
