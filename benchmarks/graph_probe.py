"""What torch.compile makes of each model of benchmarks/step_gpu_models.py with the
installed transformers: the compiled graphs a training step calls and the ops it runs
outside them, as ``shapelint --compile`` finds them (``shapelint.load.compile_probe``: one
and two layers, extrapolated to the config's depth). ``--full`` also counts the listed
sections at their full depth, for the extrapolation's check (minutes for a 1B model).
CPU only.

    python benchmarks/graph_probe.py [--sections gpt2,opt,...] [--full opt,marian] [--out FILE]

The default output is docs/data/graph_probe_transformers-VERSION.json; benchmarks/host_fit.py
reads the one of the transformers version its measurements ran with.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402
import transformers  # noqa: E402
from step_gpu_models import SECTIONS  # noqa: E402

from shapelint.load import (  # noqa: E402
    compile_probe,  # noqa: E402
    hf_config,
    hf_target,
)


def default_out() -> Path:
    return ROOT / "docs" / "data" / f"graph_probe_transformers-{transformers.__version__}.json"


def probe(section: str) -> dict:
    spec = SECTIONS[section]
    doc = {**spec["config"], "architectures": [spec["architecture"]]}
    tf, config = hf_config.build_config(doc, section)
    start = time.perf_counter()
    found = hf_target.probe_hf_graph_breaks(tf, config, section, doc)
    return {"probe": found.to_json() if found else None, "probe_s": round(time.perf_counter() - start, 1)}


def full_depth(section: str) -> dict:
    """Counted on the model at its config's depth (no extrapolation), built and fed as
    the probe builds and feeds its one- and two-layer instances."""
    spec = SECTIONS[section]
    doc = {**spec["config"], "architectures": [spec["architecture"]]}
    tf, config = hf_config.build_config(doc, section)
    model, inputs = hf_target.probe_build(tf, config, section, doc)
    counts, _ = compile_probe.count_step(model.to(torch.bfloat16).train(), inputs)
    return {"forward_graphs": counts.forward, "backward_graphs": counts.backward, "eager_ops": counts.eager}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--full", default="", help="comma list of sections also counted at full depth")
    ap.add_argument("--out")
    args = ap.parse_args()
    rows = {}
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    print("| model | forward graphs | backward graphs | eager ops | full depth | probe s | why |")
    print("|---|---|---|---|---|---|---|")
    for section in args.sections.split(","):
        row = probe(section)
        if section in args.full.split(","):
            row["full_depth"] = full_depth(section)
        rows[section] = row
        p = row["probe"] or {}
        full = row.get("full_depth")
        full_s = f"{full['forward_graphs']}/{full['backward_graphs']}/{full['eager_ops']}" if full else "–"
        print(f"| {section} | {p.get('forward_graphs', '–')} | {p.get('backward_graphs', '–')} | "
              f"{p.get('eager_ops', '–')} | {full_s} | {row['probe_s']} | {'; '.join(p.get('reasons', []))[:80]} |",
              flush=True)
    out = Path(args.out) if args.out else default_out()
    out.write_text(json.dumps({"transformers": transformers.__version__, "torch": torch.__version__,
                               "sections": rows}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
