#!/usr/bin/env python3
"""Fit the parallel engines' host costs (the ``host_us`` of a GPU profile's
``collectives:`` section) to every measured 2-GPU step on disk, and print how well the
fitted costs price each one.

    python benchmarks/host_fit_parallel.py --out OUT          # fit, print the table, write OUT/host_fit_parallel.json
    python benchmarks/host_fit_parallel.py --rescale FILE.yaml  # a calibrated profile's host_us from the shipped ones

The terms are the engines' host work, one per piece of work (``HostCosts``): DDP per
trained tensor and per bucket; FSDP2 per ``fully_shard`` group and per trained tensor;
DTensor per sharded layer, per DTensor parameter and per activation collective. Each
point's count of every term is the pricer's own (``shapelint.price.communication``
priced with one term at 1 ms and the others at 0), so the fit and the pricer cannot
disagree on the formula.

The steps are eager, bf16 autocast over fp32 parameters, fused AdamW, on 2 GPUs
(NVLink): the fitted models on 2×H100 (2026-11-25) and 2×H200 (2026-11-26), held-out
set 1 (Qwen2-0.5B, Pythia-410m, BERT-large shapes) on two 2×H200 hosts, and the
SL602/SL603 measurements (``parallel_findings.py``: OPT with GPT-2 XL's widths at TP 2,
GPT-2 small under FSDP2 with 1 to 6 blocks per group). Held-out set 2 is not read.

The host speed differs between machines, so each point is priced on its run's profile
and its host time scaled by that host's speed, read off the one-GPU step measured beside
it where the estimate says that step is host-bound (else the run's mean): the fit
compares host work, not hosts. The loss is the squared log error of the step.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "docs" / "data"
sys.path.insert(0, str(HERE))


@dataclass(frozen=True)
class Run:
    name: str
    steps: str
    #: a shipped profile's name or a profile file in docs/data
    profile: str


RUNS = (
    Run("2xH100 fitted", "multi_gpu_2xh100_2026-11-25.json", "h100"),
    Run("2xH200 fitted", "multi_gpu_2xh200_2026-11-26.json", "h200"),
    Run("2xH200 held-out 1, run 1", "multi_gpu_heldout_bench_2xh200_2026-11-26.json",
        "calibrated_collectives_2xh200_2026-11-26.yaml"),
    Run("2xH200 held-out 1, run 2", "multi_gpu_heldout_bench_2xh200_2026-11-26_run2.json",
        "calibrated_2xh200_2026-11-26_run2.yaml"),
    Run("2xH200 findings", "parallel_findings_2xh200_2026-11-26.json", "h200"),
)
#: the models fitted on (held-out set 2 stays out of sample)
MODELS = ("gpt2", "opt125m", "llama1b", "llama1b_ffn8200", "qwen2_0_5b", "pythia_410m", "bert_large",
          "opt_h25", "opt_h20", "opt_h25_b32", "opt_h20_b32", "gpt2_b1")
#: measured layouts shapelint prices, and its options for them
LAYOUTS = {"ddp": {"dp": 2}, "fsdp": {"fsdp": 2}, "fsdp_k2": {"fsdp": 2}, "fsdp_k4": {"fsdp": 2},
           "fsdp_k6": {"fsdp": 2}, "tp_pmi": {"tp": 2}, "tp_whole_attn": {"tp": 2}}


def prepare() -> None:
    import multi_gpu_estimate as estimate
    import parallel_findings as findings

    estimate.use_this_checkout()
    estimate.register_shard_model()
    findings.register()


def host_speed_of(profile: Any) -> float:
    """How much slower than the typical host a profile's host is: its per-kernel host
    cost over the shipped profile's (calibrate scales both by the speed it measured)."""
    from shapelint.hardware import resolve

    shipped = resolve(profile.aliases[0] if profile.aliases else profile.key)
    return profile.step.host_us_per_kernel / shipped.step.host_us_per_kernel


def load_profile(spec: str, host_us: dict[str, float] | None = None) -> Any:
    """A run's profile; a file's ``host_us`` replaced (profiles calibrated before the
    costs had their present terms do not load as they are)."""
    import yaml

    from shapelint.hardware import load_profile_file, resolve
    from shapelint.hardware.collectives import HOST_KEYS

    if not spec.endswith(".yaml"):
        return resolve(spec)
    doc = yaml.safe_load((DATA / spec).read_text())
    doc["collectives"]["host_us"] = host_us or dict.fromkeys(HOST_KEYS, 0.0)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(doc, f)
    return load_profile_file(f.name)


@dataclass
class Point:
    run: str
    model: str
    layout: str
    measured_ms: float
    measured_one_gpu_ms: float
    #: the GPU side of the estimate (the rank's step and what communication adds to it)
    gpu_ms: float
    #: the rank's host time without the engines
    host_ms: float
    #: per host-cost term: host ms per ms of that term (the term's count)
    counts: dict[str, float]
    #: the profile's host speed (the engines' host costs are scaled by it)
    profile_speed: float
    est_one_gpu_ms: float
    one_gpu_host_bound: bool
    #: the host's speed relative to the profile's, from the one-GPU step
    speed: float = 1.0

    def est(self, costs: dict[str, float], speed: float = 1.0) -> float:
        engines = self.profile_speed * sum(costs[k] * n for k, n in self.counts.items())
        return max(self.gpu_ms, speed * (self.host_ms + engines))


def points_of(run: Run, one_gpu_ms: dict[tuple[str, str], list[float]]) -> list[Point]:
    """Every priced (model, layout) step of ``run``, with its counts; the one-GPU steps
    measured go into ``one_gpu_ms``."""
    import multi_gpu_step as bench

    from shapelint.hardware.collectives import HOST_KEYS, HostCosts
    from shapelint.model.parallel import ParallelChange
    from shapelint.price.communication import applied, communication
    from shapelint.price.step import step_time

    hw = load_profile(run.profile)
    assert hw.collectives is not None
    speed = host_speed_of(hw)
    steps = json.loads((DATA / run.steps).read_text())["steps"]
    out, one_gpu = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for s in steps:
            name, layout = s["model"], s["mode"]
            if name in MODELS and "error" not in s:
                one_gpu_ms.setdefault((run.name, name), []).append(s["step_ms" if layout == "none" else "baseline_ms"])
            if name not in MODELS or layout not in LAYOUTS or "error" in s:
                continue
            folder = bench.HELDOUT_DIR / name if (bench.HELDOUT_DIR / name).exists() else Path(tmp) / name
            if not (folder / "config.json").exists():
                bench.make_config(name, False).save_pretrained(folder)
            batch, seq = s["batch_per_gpu"], s["seq"]
            if name not in one_gpu:
                one_gpu[name] = lint(folder / "config.json", hw, batch, seq, {}).step_time
            r = lint(folder / "config.json", hw, batch, seq, LAYOUTS[layout])
            plan, model = r.parallel, r.step_model
            if layout.startswith("fsdp_k"):
                plan = applied(plan, [ParallelChange(fsdp_blocks_per_group=int(layout.removeprefix("fsdp_k")))])
            t = step_time(replace(model.step, params=plan.rank_params), hw, model.mode, model.optimizer)

            def priced(**costs: float) -> Any:
                host = HostCosts(**{k: costs.get(k, 0.0) for k in HOST_KEYS})
                c = replace(hw.collectives, host=host)
                return communication(plan, t, replace(hw, collectives=c), model.step.training)

            base = priced()
            gpu = (t.ms if t.ms > t.host_ms + 1e-9 else t.gpu_ms) + base.gpu_ms
            counts = {k: priced(**{k: 1.0}).host_ms * 1e3 for k in HOST_KEYS}
            one = one_gpu[name]
            out.append(Point(run.name, name, layout, s["step_ms"], s["baseline_ms"], gpu, t.host_ms, counts, speed,
                             one.ms, one.host_ms >= one.gpu_ms))
    return out


def lint(config: Path, hw: Any, batch: int, seq: int, layout: dict[str, int]) -> Any:
    from shapelint.check.run import load_rules
    from shapelint.pipeline import run as pipeline
    from shapelint.pipeline.result import Options

    return pipeline.lint_target(config, Options(batch=batch, seq=seq, **layout), hw, load_rules(()))


def host_speeds(points: list[Point], one_gpu: dict[tuple[str, str], list[float]]) -> None:
    """Each point's host speed relative to its profile's: its model's one-GPU steps
    measured in that run (beside each layout and alone; their mean: one baseline varies by
    up to 20%) over the estimate, where the estimate is host-bound; else the run's mean of those."""
    own = {(p.run, p.model): sum(one_gpu[p.run, p.model]) / len(one_gpu[p.run, p.model]) / p.est_one_gpu_ms
           for p in points if p.one_gpu_host_bound}
    for p in points:
        run = [v for (r, _), v in own.items() if r == p.run] or [1.0]
        p.speed = own.get((p.run, p.model), sum(run) / len(run))


def fit(points: list[Point], keys: tuple[str, ...], iters: int = 4000) -> dict[str, float]:
    """Non-negative costs (µs) minimising the squared log error of the host-speed-scaled steps."""
    import torch

    counts = torch.tensor([[p.counts[k] for k in keys] for p in points], dtype=torch.float64)
    gpu = torch.tensor([p.gpu_ms for p in points], dtype=torch.float64)
    host = torch.tensor([p.host_ms for p in points], dtype=torch.float64)
    scale = torch.tensor([p.profile_speed for p in points], dtype=torch.float64)
    speed = torch.tensor([p.speed for p in points], dtype=torch.float64)
    measured = torch.tensor([p.measured_ms for p in points], dtype=torch.float64)
    # the counts are ms per ms of cost: fit in ms, start from 0.1 ms each
    costs = torch.full((len(keys),), 0.1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([costs], lr=0.01)
    for _ in range(iters):
        est = torch.maximum(gpu, speed * (host + scale * (counts @ costs)))
        loss = ((est.log() - measured.log()) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            costs.clamp_(min=0.0)
    return {k: float(v) * 1e3 for k, v in zip(keys, costs.detach())}


def rows(points: list[Point], costs: dict[str, float]) -> list[dict[str, Any]]:
    ms = {k: v * 1e-3 for k, v in costs.items()}
    one = {(p.run, p.model): p for p in points}
    out = []
    for p in points:
        est = p.est(ms)
        ratio = est / one[(p.run, p.model)].est_one_gpu_ms
        measured_ratio = p.measured_ms / p.measured_one_gpu_ms
        out.append({"run": p.run, "model": p.model, "layout": p.layout, "measured_ms": p.measured_ms,
                    "est_ms": est, "error": est / p.measured_ms - 1,
                    "host_speed": p.speed, "est_at_host_speed_ms": p.est(ms, p.speed),
                    "error_at_host_speed": p.est(ms, p.speed) / p.measured_ms - 1,
                    "est_ratio": ratio, "measured_ratio": measured_ratio, "ratio_error": ratio / measured_ratio - 1,
                    "counts": p.counts})
    return out


def print_table(table: list[dict[str, Any]]) -> None:
    print(f"{'run':26} {'model':16} {'layout':13} {'meas':>7} {'est':>7} {'error':>7}  {'speed':>5} "
          f"{'at speed':>8}  {'est ×':>5} {'meas ×':>6} {'error':>7}")
    for r in table:
        print(f"{r['run']:26} {r['model']:16} {r['layout']:13} {r['measured_ms']:7.1f} {r['est_ms']:7.1f} "
              f"{100 * r['error']:+6.1f}%  {r['host_speed']:5.2f} {100 * r['error_at_host_speed']:+7.1f}%  "
              f"{r['est_ratio']:5.2f} {r['measured_ratio']:6.2f} {100 * r['ratio_error']:+6.1f}%")


def rms(xs: list[float]) -> float:
    return math.sqrt(sum(x * x for x in xs) / len(xs)) if xs else 0.0


def rescale(path: Path) -> None:
    """Write the shipped profile's ``host_us`` into a calibrated profile, scaled by the
    host speed it was calibrated at (its per-kernel host cost over the shipped one's; 1
    for a collectives-only calibration, which keeps the shipped host costs): what a full
    ``shapelint calibrate`` on that machine writes now."""
    import yaml

    from shapelint.hardware import resolve
    from shapelint.hardware.collectives import host_costs_at

    doc = yaml.safe_load(path.read_text())
    shipped = resolve((doc.get("aliases") or [doc["name"]])[0])
    assert shipped.collectives is not None
    kernel = (doc.get("step") or {}).get("host_us_per_kernel", shipped.step.host_us_per_kernel)
    speed = dataclasses.replace(shipped.step, host_us_per_kernel=float(kernel)).host_speed_against(shipped.step)
    host = host_costs_at(dataclasses.asdict(shipped.collectives.host), speed)
    lines = path.read_text().split("\n")
    start = lines.index("  host_us:")  # the collectives section's key, not a mention in its source text
    end = start + 1
    while end < len(lines) and lines[end].startswith("    ") and lines[end].strip().split(":")[0].isidentifier():
        end += 1
    lines[start:end] = ["  host_us:", *(f"    {k}: {v}" for k, v in host.items())]
    path.write_text("\n".join(lines))
    print(f"{path}: host_us = {shipped.key}'s x {speed:.3f}: {host}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    p.add_argument("--rescale", metavar="FILE", help="rewrite a calibrated profile's host_us from the shipped ones")
    p.add_argument("--cache", metavar="FILE", help="keep the lints' counts in FILE and reuse them")
    p.add_argument("--exclude", metavar="TEXT", help="fit without the runs whose name holds TEXT (still printed): "
                   "how well the rest predicts them")
    p.add_argument("--keys", help="fit only these terms (comma-separated; the others 0)")
    args = p.parse_args()
    prepare()
    if args.rescale:
        rescale(Path(args.rescale))
        return 0
    from shapelint.hardware import resolve
    from shapelint.hardware.collectives import HOST_KEYS

    one_gpu: dict[tuple[str, str], list[float]] = {}
    cache = Path(args.cache) if args.cache else None
    if cache is not None and cache.exists():  # the counts of a previous run (the lints take minutes)
        saved = json.loads(cache.read_text())
        points = [Point(**x) for x in saved["points"]]
        one_gpu = {(r, m): v for r, m, v in saved["one_gpu"]}
    else:
        points = [x for run in RUNS for x in points_of(run, one_gpu)]
        if cache is not None:
            cache.write_text(json.dumps({"points": [vars(x) for x in points],
                                         "one_gpu": [[r, m, v] for (r, m), v in one_gpu.items()]}))
    host_speeds(points, one_gpu)
    keys = tuple(args.keys.split(",")) if args.keys else HOST_KEYS
    fitted = [x for x in points if not (args.exclude and args.exclude in x.run)]
    costs = {**dict.fromkeys(HOST_KEYS, 0.0), **fit(fitted, keys)}
    shipped = resolve("h100").collectives
    assert shipped is not None
    table = rows(points, costs)
    print_table(table)
    print("fitted host_us (µs):", {k: round(v, 1) for k, v in costs.items()})
    print("shipped host_us (µs):", {k: getattr(shipped.host, k) for k in HOST_KEYS})
    print(f"{len(table)} steps: rms error at each host's speed {100 * rms([r['error_at_host_speed'] for r in table]):.1f}%,"
          f" of the ratio to one GPU {100 * rms([r['ratio_error'] for r in table]):.1f}%")
    if args.exclude:
        out = [r for r in table if args.exclude in r["run"]]
        print(f"left out of the fit ({args.exclude!r}): {len(out)} steps, rms error at each host's speed "
              f"{100 * rms([r['error_at_host_speed'] for r in out]):.1f}%, worst "
              f"{100 * max((abs(r['error_at_host_speed']) for r in out), default=0.0):.1f}%")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "host_fit_parallel.json").write_text(json.dumps({"host_us": costs, "rows": table}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
