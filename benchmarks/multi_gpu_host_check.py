#!/usr/bin/env python3
"""Does calibrate's parallel host probe predict a host's host-bound parallel steps? On
the CPU, from what ``benchmarks/multi_gpu_host_probe.sh`` measured on one 2-GPU host:
held-out sets 1 and 2 (DDP 2, FSDP2 2, TP 2) priced on

- ``shipped``: the shipped profile (``--gpu``, default h200), the typical host;
- ``one-gpu probe``: that profile as calibrate wrote it before the parallel probe: the
  step's host costs and the engines' ``host_us`` all at the one-GPU probe's speed;
- ``parallel probe``: as calibrate writes it now: the step's host costs at the one-GPU
  probe's speed, each engine's ``host_us`` at the parallel probe's speed for it
  (:func:`shapelint.measure.parallel_host.engine_speeds`), from the probe run before
  the held-out steps (``probe_before.json``) and, as a check of its stability, after
  them (``probe_after.json``).

Only the host costs differ between the profiles (no collective table is measured:
these steps are host-bound). Prints, per profile, each step's error and the count
within 15%, and writes ``multi_gpu_host_check.json``.

    python benchmarks/multi_gpu_host_check.py FOLDER [--gpu h200] [--profile NAME=FILE ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import multi_gpu_estimate as estimate  # noqa: E402


def profile_doc(gpu: str, one_gpu_speed: float | None, engines: dict[str, float]) -> dict[str, Any]:
    """The shipped ``gpu`` profile with calibrate's host costs: the step's and the
    engines' at ``one_gpu_speed`` (None: the shipped ones), the engines of ``engines``
    at their own speed: what ``shapelint calibrate`` writes from these measurements."""
    from shapelint.hardware import PROFILE_DIR, resolve
    from shapelint.measure.calibrate import host_table
    from shapelint.measure.collectives import section

    hw = resolve(gpu)
    assert hw.collectives is not None
    doc = dict(yaml.safe_load((PROFILE_DIR / f"{hw.key}.yaml").read_text()))
    if one_gpu_speed is not None:
        step = {k: v for k, v in host_table(hw, one_gpu_speed, None).items() if k.startswith("host_us")}
        doc["step"] = {**(doc.get("step") or {}), **step}
    doc["collectives"] = section(None, hw.collectives, hw.key, one_gpu_speed, engines)
    return doc


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", help="multi_gpu_host_probe.sh's $OUT")
    p.add_argument("--gpu", default="h200")
    p.add_argument("--profile", action="append", default=[], metavar="NAME=FILE",
                   help="also price on this profile file (e.g. the calibrated.yaml of the same host)")
    p.add_argument("--one-gpu-speed", type=float, metavar="X",
                   help="the one-GPU host speed against --gpu where the folder has none (e.g. read off the held-out "
                        "models' one-GPU steps: then only the engines' part is tested)")
    p.add_argument("--out", help="where the JSON goes (default: FOLDER)")
    args = p.parse_args()
    estimate.use_this_checkout()
    from shapelint.hardware import resolve
    from shapelint.measure.parallel_host import engine_speeds

    folder = Path(args.folder)
    one_gpu_file = folder / "one_gpu_host_speed.json"
    one_gpu = json.loads(one_gpu_file.read_text())["eager_host_speed_against_h200"] if one_gpu_file.exists() \
        else args.one_gpu_speed
    hw = resolve(args.gpu)
    probes = {}
    for when in ("before", "after"):
        f = folder / f"probe_{when}.json"
        if f.exists():
            found = engine_speeds(json.loads(f.read_text()), hw, print)
            probes[when] = {e: s.speed for e, s in found.items()}
            print(f"probe {when}: " + ", ".join(f"{e} {s.speed:.3f} ({s.measured_ms:.1f} ms measured, "
                                                 f"{s.modelled_ms:.1f} modelled)" for e, s in found.items()))
    print(f"one-GPU probe: {one_gpu}")
    with tempfile.TemporaryDirectory() as tmp:
        files: dict[str, str | None] = {"shipped": None}
        docs = {"one-gpu probe": profile_doc(args.gpu, one_gpu, {})} if one_gpu is not None else {}
        docs.update({f"parallel probe {when}": profile_doc(args.gpu, one_gpu, speeds) for when, speeds in probes.items()})
        for name, doc in docs.items():
            path = Path(tmp, name.replace(" ", "_") + ".yaml")
            path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
            files[name] = str(path)
        files.update(dict(spec.split("=", 1) for spec in args.profile))
        results = {}
        for which in ("1", "2"):
            bench = folder / f"set{which}" / "multi_gpu_bench.json"
            if not bench.exists():
                continue
            steps = json.loads(bench.read_text())["steps"]
            for name, file in files.items():
                rows = estimate.compare(steps, args.gpu, estimate.heldout_pairs(which), file)
                results[f"set{which} {name}"] = rows
                within = sum(r["within_tolerance"] for r in rows)
                errors = " ".join(f"{100 * r['ms_error']:+.0f}" for r in rows)
                print(f"set {which} on {name:24} {within} of {len(rows)} within 15%   errors (%): {errors}")
    summary = {k: {"within_15": sum(r["within_tolerance"] for r in v), "n": len(v),
                   "errors": [round(r["ms_error"], 4) for r in v],
                   "pairs": [(r["model"], r["layout"]) for r in v]} for k, v in results.items()}
    out = Path(args.out or folder, "multi_gpu_host_check.json")
    out.write_text(json.dumps({"gpu": args.gpu, "one_gpu_speed": one_gpu, "probes": probes, "summary": summary,
                               "rows": results}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
