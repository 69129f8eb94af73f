"""Fit the batch-norm law's constants (``shapelint.price.batch_norm``) on the kernels
``benchmarks/bn_shape_rates.py --sweep`` timed, and check it on the whole steps
``--steps`` profiled (no GPU: it reads their JSON).

Each measured kernel is matched, by name, to the kernel ``shapelint.physics.batch_norm``
says the shape launches (its grid and block are checked against the trace's). For each
kernel family, a grid search over (thread rate, efficiency) minimises the squared log
error of the law, each kernel weighted by the square root of its time (a step's time is
its large kernels'), for each block start time ``--block-us`` tried; the best start
time's constants are printed as the profile's ``step:`` keys. Then every batch norm of
the linted ResNet-50 (batch 64) and MBConv (batch 256) steps, both layouts, is priced
with the fitted constants and set beside the profiled kernels, total and by
(kernel, blocks, threads).

    python benchmarks/bn_law_fit.py [--sweep docs/data/bn_shape_rates_h100_2026-11-26.json]
        [--steps docs/data/bn_steps_h100_2026-11-26.json] [--gpu h100] [--no-steps]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA = ROOT / "docs" / "data"
#: profile keys of each family: (thread rate, efficiency)
KEYS = {
    "nchw_stats": ("batch_norm_nchw_stats_thread_meps", "batch_norm_nchw_stats_efficiency"),
    "nchw_backward": ("batch_norm_nchw_backward_thread_meps", "batch_norm_nchw_backward_efficiency"),
    "nchw_transform": ("batch_norm_nchw_transform_thread_meps", "batch_norm_nchw_transform_efficiency"),
    "channels_last_stats": ("batch_norm_channels_last_stats_thread_meps", "batch_norm_channels_last_stats_efficiency"),
    "channels_last_reduce": ("batch_norm_channels_last_reduce_thread_meps",
                             "batch_norm_channels_last_reduce_efficiency"),
    "channels_last": ("batch_norm_channels_last_thread_meps", "batch_norm_channels_last_stream_efficiency"),
}
STEP_TARGETS = {"resnet-50": (ROOT / "tests" / "corpus" / "resnet-50" / "config.json", 64),
                "mbconv": (ROOT / "benchmarks" / "real_models" / "mbconv.py", 256)}


def geometric(lo: float, hi: float, n: int) -> list[float]:
    return [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]


def observations(path: Path) -> list[tuple[Any, float]]:
    """(kernel, measured seconds) of every batch-norm kernel of the sweep; a kernel whose
    launch geometry differs from the trace's stops the fit."""
    from shapelint.physics.batch_norm import batch_norm_kernels

    doc = json.loads(path.read_text())
    out = []
    for r in doc["rows"]:
        shape = (r["N"], r["C"], r["side"], r["side"])
        cl = r["layout"] == "channels_last"
        made = {k.name: k for k in batch_norm_kernels(shape, cl, False) + batch_norm_kernels(shape, cl, True)}
        for m in r.get("kernels", []):
            k = made.get(m["kernel"])
            if k is None:
                continue  # the running statistics' update: one short kernel
            grid, block = json.loads(m["grid"]), json.loads(m["block"])
            if (k.blocks, k.threads) != (math.prod(grid), math.prod(block)):
                raise SystemExit(f"{shape} {r['layout']} {k.name}: launch {grid} x {block} is not {k}")
            out.append((k, m["ms"] * 1e-3))
    return out


def with_constants(hw: Any, constants: dict[str, float]) -> Any:
    return replace(hw, step=replace(hw.step, **constants))


def fit(obs: list[tuple[Any, float]], hw: Any, block_us: float) -> tuple[dict[str, float], dict[str, Any]]:
    """The least weighted squared log error constants of every family at ``block_us``."""
    from shapelint.physics.batch_norm import FAMILIES
    from shapelint.price.batch_norm import kernel_ms

    constants: dict[str, float] = {"batch_norm_block_us": block_us}
    stats: dict[str, Any] = {}
    for family in FAMILIES:
        pts = [(k, t) for k, t in obs if k.family == family]
        weights = [math.sqrt(t) for _, t in pts]
        best: tuple[float, float, float, list[float]] | None = None
        for meps in geometric(0.5, 100.0, 70):
            for eff in geometric(0.05, 0.95, 60):
                h = with_constants(hw, {**constants, KEYS[family][0]: meps, KEYS[family][1]: eff})
                errs = [math.log(kernel_ms(k, h) * 1e-3 / t) for k, t in pts]
                loss = sum(w * e * e for w, e in zip(weights, errs)) / sum(weights)
                if best is None or loss < best[0]:
                    best = (loss, meps, eff, errs)
        assert best is not None
        loss, meps, eff, errs = best
        constants[KEYS[family][0]], constants[KEYS[family][1]] = round(meps, 3), round(eff, 3)
        stats[family] = {"kernels": len(pts), "weighted_rms_log": math.sqrt(loss),
                         "within_25pct": sum(abs(e) < math.log(1.25) for e in errs) / len(errs),
                         "worst": max(errs, key=abs)}
    return constants, stats


def check_steps(path: Path, hw: Any) -> list[dict[str, Any]]:
    """Each step's batch norms priced by the law beside the profile, total and by kernel."""
    from shapelint.app import api
    from shapelint.physics.conv_kernels import BATCH_NORM
    from shapelint.price.batch_norm import kernel_ms, op_kernels

    doc = json.loads(path.read_text())
    rows = []
    for name, (target, batch) in STEP_TARGETS.items():
        sm = api.lint_target(target, gpu="h100", batch=batch, seq=224).result.step_model
        assert sm is not None and sm.relaid is not None
        for layout, step in (("nchw", sm.step), ("channels_last", sm.relaid.step)):
            est: dict[tuple[str, int, int], list[float]] = {}
            for op in step.ops:
                for k in op_kernels(op) if op.name in BATCH_NORM else ():
                    e = est.setdefault((k.name, k.blocks, k.threads), [0, 0.0])
                    e[0] += 1
                    e[1] += kernel_ms(k, hw)
            meas: dict[tuple[str, int, int], list[float]] = {}
            row = next(r for r in doc["rows"] if r["model"] == name and r["layout"] == layout)
            for m in row["measured"]["bn_kernels"]:
                if m["kernel"]:
                    key = (m["kernel"], math.prod(json.loads(m["grid"])), math.prod(json.loads(m["block"])))
                    e = meas.setdefault(key, [0, 0.0])
                    e[0] += m["launches"]
                    e[1] += m["ms"]
            rows.append({"model": name, "layout": layout, "est_ms": sum(v[1] for v in est.values()),
                         "meas_ms": sum(v[1] for v in meas.values()),
                         "kernels": [{"kernel": k[0], "blocks": k[1], "threads": k[2],
                                      "est_n": est.get(k, [0, 0.0])[0], "meas_n": meas.get(k, [0, 0.0])[0],
                                      "est_ms": est.get(k, [0, 0.0])[1], "meas_ms": meas.get(k, [0, 0.0])[1]}
                                     for k in sorted(set(est) | set(meas),
                                                     key=lambda k: -meas.get(k, est.get(k, [0, 0.0]))[1])]})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", default=str(DATA / "bn_shape_rates_h100_2026-11-26.json"))
    ap.add_argument("--steps", default=str(DATA / "bn_steps_h100_2026-11-26.json"))
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--block-us", default="1,1.5,2,2.5,3", help="block start times to try, microseconds")
    ap.add_argument("--no-steps", action="store_true", help="the fit alone")
    ap.add_argument("--top", type=int, default=12, help="kernels shown per step")
    args = ap.parse_args(argv)
    from shapelint import hardware

    hw = hardware.resolve(args.gpu)
    obs = observations(Path(args.sweep))
    print(f"{len(obs)} kernels, launch geometry matching the trace for every one")
    fits = [fit(obs, hw, float(us)) for us in args.block_us.split(",")]
    for constants, stats in fits:
        total = sum(s["weighted_rms_log"] ** 2 * s["kernels"] for s in stats.values())
        print(f"block {constants['batch_norm_block_us']:.1f} us: loss {total:.3f}  " + ", ".join(
            f"{f} rms {s['weighted_rms_log']:.3f}" for f, s in stats.items()))
    constants, stats = min(fits, key=lambda f: sum(s["weighted_rms_log"] ** 2 * s["kernels"] for s in f[1].values()))
    print("\nfitted step: keys")
    for key, value in constants.items():
        print(f"    {key}: {value}")
    for family, s in stats.items():
        print(f"  {family:22s} {s['kernels']:3d} kernels: weighted rms log error {s['weighted_rms_log']:.3f}, "
              f"{100 * s['within_25pct']:.0f}% within 25%, worst {math.exp(s['worst']):.2f}x")
    if not args.no_steps:
        fitted = with_constants(hw, constants)
        for row in check_steps(Path(args.steps), fitted):
            print(f"\n{row['model']} {row['layout']}: batch norm estimated {row['est_ms']:.2f} ms, "
                  f"profiled {row['meas_ms']:.2f} ms ({row['est_ms'] / row['meas_ms']:.2f}x)")
            for k in row["kernels"][:args.top]:
                ratio = k["est_ms"] / k["meas_ms"] if k["meas_ms"] else float("nan")
                print(f"  {k['kernel'][:48]:48s} {k['blocks']:6d} x {k['threads']:3d}  n {k['est_n']:3.0f}/"
                      f"{k['meas_n']:3.0f}  est {k['est_ms']:7.3f}  meas {k['meas_ms']:7.3f}  {ratio:5.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
