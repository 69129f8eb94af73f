"""Estimated vs measured speedup of every finding on the shipped examples and on
GPT-2 small (transformers GPT2Config(), bf16, 8 x 1024 tokens). Needs a CUDA GPU.

    python benchmarks/verify_examples.py [--gpu NAME] [--out DIR]

Prints a table and writes verify_<gpu>.json and verify_<gpu>.md to --out
(default benchmarks/results).
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
from shapelint.pipeline.result import Options
from shapelint.pipeline.run import lint_target

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ["examples/nanogpt.py", "examples/mlp.py", "examples/mlp.yaml", "examples/convnet.py",
           "examples/clean.py", "examples/gpt2/config.json"]
THRESHOLD = 1.05


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", help="profile to estimate with (default: the local GPU's)")
    ap.add_argument("--gpu-profile", help="a calibrated profile file")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args()
    if args.gpu_profile:
        from shapelint.hardware import load_profile_file

        hw = load_profile_file(args.gpu_profile)
    else:
        hw = resolve(args.gpu) if args.gpu else default_gpu()
    rows = []
    for target in TARGETS:
        t0 = time.time()
        result = lint_target(ROOT / target, Options(batch=8, seq=1024) if target.endswith(".json") else Options(),
                             hw, builtin_rules())
        checked = verify(result.findings, result.capture.gemms, hw, THRESHOLD)
        for f in checked:
            v = f.verification.to_json() if f.verification else {}
            rows.append({
                "target": target, "code": f.code, "module": f.module,
                "suggestion": f.suggestion.to_json() if f.suggestion else None,
                "est_speedup": f.est_speedup, "measured_speedup": f.measured_speedup,
                "status": v.get("status"), "before_ms": v.get("before_ms"), "after_ms": v.get("after_ms"),
                "est_ms": f.est_ms, "est_ms_after": f.est_ms_after, "gemms": v.get("gemms"),
            })
        print(f"{target}: {len(checked)} findings, {time.time() - t0:.1f} s", flush=True)
    device = torch.cuda.get_device_name()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"device": device, "profile": hw.key, "torch": torch.__version__, "cuda": torch.version.cuda,
           "date": time.strftime("%Y-%m-%d"), "threshold": THRESHOLD, "rows": rows}
    (out / f"verify_{hw.key}.json").write_text(json.dumps(doc, indent=1))
    lines = [f"Device: {device}, torch {torch.__version__}, CUDA {torch.version.cuda}, profile {hw.key}, "
             f"{doc['date']}", "",
             "| target | code | module | suggestion | est. | measured | est/measured | before → after ms "
             "| peak fraction before → after |",
             "|---|---|---|---|---|---|---|---|---|"]
    ok = 0
    measured = 0
    for r in rows:
        if r["measured_speedup"] is None:
            continue
        measured += 1
        ratio = r["est_speedup"] / r["measured_speedup"]
        ok += abs(ratio - 1) <= 0.25
        s = r["suggestion"]
        sug = f"{s['parameter']} {s['from']} → {s['to']}" if s else ""
        fr = [(g["before_peak_fraction"], g["after_peak_fraction"]) for g in r["gemms"] or []
              if g["before_peak_fraction"] is not None and g["after_peak_fraction"] is not None]
        frac = ", ".join(f"{b:.2f}→{a:.2f}" for b, a in fr[:3])
        lines.append(f"| {r['target']} | {r['code']} | {r['module']} | {sug} | {r['est_speedup']:.2f}× | "
                     f"{r['measured_speedup']:.2f}× | {ratio:.2f} | {r['before_ms']:.3f} → {r['after_ms']:.3f} | {frac} |")
    lines.append("")
    lines.append(f"{ok} of {measured} findings estimated within 25% of the measured speedup; "
                 f"slower after the suggestion: {sum(1 for r in rows if (r['measured_speedup'] or 2) < 1)}")
    (out / f"verify_{hw.key}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
