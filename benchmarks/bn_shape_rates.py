"""PyTorch's eager batch-norm kernels by shape, and where they sit in a convnet's step
(issue 26): the data the batch-norm law of ``shapelint.physics.batch_norm`` is fitted on.

**Sweep** (``--sweep``): ``nn.BatchNorm2d(C)`` forward and backward under bf16 autocast
(fp32 weight and bias, a bf16 activation that needs its gradient, as inside a training
step), NCHW and channels-last, over C, H·W and N (``CASES``). One profiled session of
``--reps`` calls per case; every batch-norm kernel's GPU time per call, with its grid
and block, and the elements it covers (N·C·H·W), so that each kernel's rate (bytes it
must move over its time) can be read without shapelint's byte model. Other kernels
(autocast's weight casts, fills) are left out.

**Steps** (``--steps``): whole eager training steps (``shapelint.load.real.build``,
trained as ``--verify --step`` trains them: bf16 autocast, the model's loss, fused
AdamW) of ResNet-50 at batch 64 and the MBConv network at batch 256, as written (NCHW)
and converted channels-last: the median step (CUDA events), the profiled kernel time by
class and detail (``benchmarks/step_profile.classify_kernel``), each batch-norm kernel
by (name, grid, block) with its launches and time, and beside them shapelint's estimate
of the same step by class (NCHW: the linted step; channels-last: the step the pipeline
traced channels-last for SL402).

    python benchmarks/bn_shape_rates.py [--sweep] [--steps] [--reps 4] [--out DIR]
    python benchmarks/bn_shape_rates.py --dry      # CPU: the cases, estimates, no GPU

Writes ``DIR/bn_shape_rates.json`` (sweep) and ``DIR/bn_steps.json`` (steps) and prints
tables. About 3 minutes on an H100.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.machine_info import machine  # noqa: E402

#: (C, H·W side, N): channels against the GPU's SMs, pixels per channel per image, batch
CHANNELS = (16, 32, 64, 96, 144, 256, 512, 1024, 2048)
SIDES = (7, 14, 28, 56, 112)
BATCHES = (8, 64, 256)
#: the sweep keeps shapes convnets have (C·H·W per image 12K-1.6M) that fit a timed call
#: (N·C·H·W at most MAX_ELEMENTS) and is not launch-bound (at least MIN_ELEMENTS)
MIN_ELEMENTS = 2_000_000
MIN_IMAGE = 12_000
MAX_IMAGE = 1_700_000
MAX_ELEMENTS = 420_000_000


#: held-out shapes (none of the fit's channels, sides or batches): a check of the law
HELDOUT = ((24, 40, 80, 112, 192, 320, 672, 1152, 1280), (10, 20, 36, 72, 150), (16, 32, 128))


def sweep_cases(heldout: bool = False) -> list[tuple[int, int, int]]:
    """(C, side, N) of the sweep: every combination a convnet has, pruned to ~60."""
    channels, sides, batches = HELDOUT if heldout else (CHANNELS, SIDES, BATCHES)
    cases = []
    for c in channels:
        for s in sides:
            image = c * s * s
            if not MIN_IMAGE <= image <= MAX_IMAGE:
                continue
            for n in batches:
                if MIN_ELEMENTS <= n * image <= MAX_ELEMENTS:
                    cases.append((c, s, n))
    return cases


MODELS = ROOT / "benchmarks" / "real_models"
CORPUS = ROOT / "tests" / "corpus"
#: (name, target, batch, image side)
STEP_TARGETS: tuple[tuple[str, Path, int, int], ...] = (
    ("resnet-50", CORPUS / "resnet-50" / "config.json", 64, 224),
    ("mbconv", MODELS / "mbconv.py", 256, 224),
)
LAYOUTS = ("nchw", "channels_last")


# -- traces --------------------------------------------------------------------------------


def trace_events(prof: Any) -> list[dict[str, Any]]:
    """The Chrome-trace events of a finished torch.profiler session."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        doc = json.loads(path.read_text())
    return list(doc["traceEvents"] if isinstance(doc, dict) else doc)


def short(name: str) -> str:
    """A batch-norm kernel's name without its template arguments."""
    name = name.replace("void ", "").replace("at::native::", "")
    return name.split("<", 1)[0].split("(", 1)[0]


def bn_kernels(events: Iterable[dict[str, Any]], calls: int) -> list[dict[str, Any]]:
    """Batch-norm kernels of a trace by (name, grid, block): launches and ms per call."""
    out: dict[tuple[str, str, str], list[float]] = {}
    for ev in events:
        if ev.get("ph") != "X" or ev.get("cat") != "kernel" or "batch_norm" not in str(ev.get("name", "")):
            continue
        args = ev.get("args", {})
        key = (short(str(ev["name"])), str(args.get("grid")), str(args.get("block")))
        entry = out.setdefault(key, [0.0, 0.0])
        entry[0] += 1
        entry[1] += float(ev.get("dur", 0.0)) / 1e3
    return sorted(({"kernel": k[0], "grid": k[1], "block": k[2], "launches": v[0] / calls, "ms": v[1] / calls}
                   for k, v in out.items()), key=lambda r: -r["ms"])


# -- the sweep -----------------------------------------------------------------------------


def sweep_one(c: int, side: int, n: int, channels_last: bool, reps: int,
              device: str = "cuda") -> list[dict[str, Any]]:
    """The batch-norm kernels of one BatchNorm2d forward + backward, per call (on a CPU:
    none, a check of the plumbing)."""
    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile

    bn = nn.BatchNorm2d(c).to(device)
    x = torch.randn(n, c, side, side, device=device, dtype=torch.bfloat16)
    if channels_last:
        bn = bn.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_(True)
    dy = torch.randn_like(x)

    def call() -> None:
        x.grad = None
        with torch.autocast(device, dtype=torch.bfloat16):
            y = bn(x)
        y.backward(dy)

    for _ in range(2):
        call()
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            call()
        if cuda:
            torch.cuda.synchronize()
    rows = bn_kernels(trace_events(prof), reps)
    return rows


def save(path: Path | None, rows: list[dict[str, Any]], **meta: Any) -> None:
    """Write the rows so far (a run cut short by its time limit keeps what it did)."""
    if path is not None:
        doc = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), **meta, "rows": rows}
        path.write_text(json.dumps(doc, indent=1) + "\n")


def sweep(reps: int, dry: bool, device: str = "cuda", limit: int = 0, path: Path | None = None,
          heldout: bool = False) -> list[dict[str, Any]]:
    cases = sweep_cases(heldout)[:limit or None]
    print(f"\n## sweep: {len(cases)} shapes x {len(LAYOUTS)} layouts, {reps} calls each")
    print(f"{'C':>5s} {'HW':>6s} {'N':>4s} {'layout':14s} {'MB/pass':>8s} {'total ms':>9s}  kernels (ms)")
    rows = []
    for c, side, n in cases:
        elements = n * c * side * side
        for layout in LAYOUTS:
            row: dict[str, Any] = {"C": c, "HW": side * side, "side": side, "N": n, "layout": layout,
                                   "elements": elements, "bytes_per_pass": 2 * elements}
            if not dry:
                try:
                    row["kernels"] = sweep_one(c, side, n, layout == "channels_last", reps, device)
                except Exception as exc:  # noqa: BLE001 - one shape's failure is a row
                    row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                import torch

                if device == "cuda":
                    torch.cuda.empty_cache()
            ks = row.get("kernels", [])
            total = sum(k["ms"] for k in ks)
            row["ms"] = total
            rows.append(row)
            detail = ", ".join(f"{k['kernel'].replace('batch_norm_', '')} {k['ms']:.3f} g{k['grid']}" for k in ks)
            print(f"{c:5d} {side * side:6d} {n:4d} {layout:14s} {2 * elements / 1e6:8.1f} {total:9.3f}  "
                  f"{row.get('error', detail)}", flush=True)
        save(path, rows, reps=reps)
    return rows


# -- whole steps ---------------------------------------------------------------------------


def estimate(target: Path, batch: int, seq: int, gpu: str) -> dict[str, Any]:
    """shapelint's eager step by class, NCHW as linted and channels-last as traced for SL402."""
    from shapelint.app import api
    from shapelint.price.breakdown import by_detail, priced_kernels
    from shapelint.price.step import step_time

    report = api.lint_target(target, gpu=gpu, batch=batch, seq=seq)
    sm = report.result.step_model
    assert sm is not None
    out: dict[str, Any] = {}
    steps = {"nchw": sm.step, "channels_last": sm.relaid.step if sm.relaid is not None else None}
    for layout, step in steps.items():
        if step is None:
            continue
        st = step_time(step, sm.hw, sm.mode, sm.optimizer)
        entries = priced_kernels(step, sm.hw, sm.mode, sm.optimizer)
        bn = [e for e in entries if "batch_norm" in e.label]
        out[layout] = {"step_ms": st.ms, "gpu_ms": st.gpu_ms, "by_class": dict(st.by_class),
                       "by_detail": by_detail(entries), "bn_ms": sum(e.ms for e in bn), "bn_ops": len(bn)}
    found = [f for f in report.findings if f.code == "SL402"]
    out["sl402"] = {"est_speedup": found[0].est_speedup, "step_ms_saved": found[0].step_ms_saved} if found else None
    return out


def measure_step(target: Path, batch: int, seq: int, layout: str, steps: int) -> dict[str, Any]:
    """The median eager step of the model in ``layout`` and a profile of ``steps`` steps."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.step_profile import kernels_of_trace
    from shapelint.capture.memory_format import converted_inputs
    from shapelint.load.real import build
    from shapelint.measure.step_blocks import alternate
    from shapelint.measure.step_train import make_trainer, release, warm
    from shapelint.measure.timer import cuda_block_timer

    built = build(target, device="cuda", batch=batch, seq=seq)
    inputs = built.inputs
    if layout == "channels_last":
        built.model.to(memory_format=torch.channels_last)
        inputs = converted_inputs(inputs, "channels_last")
    t = make_trainer(layout, built, inputs, device="cuda", precision="bf16", training=True, optimizer="adamw",
                     compile=False)
    warm(t, "cuda", 3, False)
    samples, _ = alternate([(layout, t.step)], cuda_block_timer(), 2, 5)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            t.step()
        torch.cuda.synchronize()
    events = trace_events(prof)
    out = {"step_ms": statistics.median(samples[layout].steps), **kernels_of_trace(events, steps),
           "bn_kernels": bn_kernels(events, steps)}
    out["top"] = out["top"][:40]
    del t, built
    release("cuda", False)
    return out


def steps_run(args: argparse.Namespace, path: Path | None = None) -> list[dict[str, Any]]:
    rows = []
    for name, target, batch, seq in STEP_TARGETS:
        batch = args.batch or batch
        est = estimate(target, batch, seq, args.gpu)
        for layout in LAYOUTS:
            row: dict[str, Any] = {"model": name, "batch": batch, "seq": seq, "layout": layout,
                                   "estimate": est.get(layout), "sl402": est["sl402"]}
            if not args.dry:
                try:
                    row["measured"] = measure_step(target, batch, seq, layout, args.profile_steps)
                except Exception as exc:  # noqa: BLE001 - a failed model is a row
                    row["error"] = f"{type(exc).__name__}: {exc}"[:500]
            rows.append(row)
            print_step(row)
            save(path, rows, gpu_profile=args.gpu)
    return rows


def print_step(row: dict[str, Any]) -> None:
    est, meas = row.get("estimate") or {}, row.get("measured") or {}
    print(f"\n== {row['model']} b{row['batch']} {row['layout']}: est step {est.get('step_ms', 0):.2f} ms, "
          f"measured {meas.get('step_ms', 0):.2f} ms (busy {meas.get('busy_ms', 0):.2f}) {row.get('error', '')}")
    for key in ("by_class", "by_detail"):
        e, m = est.get(key, {}), meas.get(key, {})
        for k in sorted(set(e) | set(m), key=lambda k: -max(e.get(k, 0.0), m.get(k, 0.0))):
            print(f"  {key[3:]:6s} {k:22s} est {e.get(k, 0.0):8.3f}  meas {m.get(k, 0.0):8.3f}")
    print(f"  est batch-norm ops {est.get('bn_ms', 0):.3f} ms ({est.get('bn_ops', 0)} ops)")
    for k in meas.get("bn_kernels", [])[:60]:
        print(f"    {k['ms']:7.3f} ms x{k['launches']:4.1f} {k['kernel']:52s} grid {k['grid']} block {k['block']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", action="store_true", help="the BatchNorm2d sweep")
    ap.add_argument("--steps", action="store_true", help="ResNet-50 and MBConv whole steps")
    ap.add_argument("--only", default="", help="comma-separated step models (default: all)")
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--profile-steps", type=int, default=2)
    ap.add_argument("--gpu", default="h100", help="the GPU profile the estimate is made on")
    ap.add_argument("--dry", action="store_true", help="no GPU: the cases and the estimates")
    ap.add_argument("--device", default="cuda", help="cpu: a check of the sweep's plumbing (no kernels)")
    ap.add_argument("--limit", type=int, default=0, help="the first this many sweep shapes (0: all)")
    ap.add_argument("--heldout", action="store_true", help="the sweep over held-out shapes (a check of the law)")
    ap.add_argument("--batch", type=int, default=None, help="every step model at this batch (default: its own)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="directory for the JSON files")
    args = ap.parse_args(argv)
    if not args.sweep and not args.steps:
        args.sweep = args.steps = True
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.sweep:
        t0 = time.perf_counter()
        name = "bn_shape_rates_heldout.json" if args.heldout else "bn_shape_rates.json"
        sweep(args.reps, args.dry, args.device, args.limit, out / name, args.heldout)
        print(f"(sweep: {time.perf_counter() - t0:.0f} s)")
    if args.steps:
        global STEP_TARGETS
        only = set(filter(None, args.only.split(",")))
        STEP_TARGETS = tuple(t for t in STEP_TARGETS if not only or t[0] in only)
        t0 = time.perf_counter()
        steps_run(args, out / (f"bn_steps_b{args.batch}.json" if args.batch else "bn_steps.json"))
        print(f"(steps: {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
