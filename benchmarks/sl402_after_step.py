"""SL402's step saving against the GPU (issue 26): each convnet is linted NCHW, and its
SL402 finding's step (``step_ms``) and after-step (``step_ms - step_ms_saved``: the model
traced again channels-last) are set beside the same model trained on the GPU as written
and with ``model.to(memory_format=torch.channels_last)`` and channels-last inputs.

Self-contained (``benchmarks/real_models/``, ``tests/corpus/``; nothing is downloaded).
Each model is built for real (``shapelint.load.real.build``, random weights) twice and
trained as ``--verify --step`` trains it (bf16 autocast over fp32 weights, the model's
loss, fused AdamW), NCHW and channels-last in alternating blocks
(``shapelint.measure.step_blocks.alternate``, CUDA events), the median step of each.
Under ``--modes compile`` Inductor lays an NCHW graph's convolutions out channels-last
itself, and SL402 is expected to save little or nothing (no finding: its estimate is
the compiled step of each layout).

    python benchmarks/sl402_after_step.py [--only NAME,...] [--modes eager,compile]
        [--rounds 3] [--steps 8] [--json docs/data/sl402_after_step_h100.json]

Prints per model and mode: estimated NCHW and channels-last steps and their ratio,
measured the same, and the ratio's error; writes the rows as JSON. About 3 minutes on an
H100 with both modes (``--estimate-only``: the estimates alone, no GPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.machine_info import machine  # noqa: E402

MODELS = ROOT / "benchmarks" / "real_models"
CORPUS = ROOT / "tests" / "corpus"

#: (name, target, batch, seq): GPU-bound eager steps
TARGETS: tuple[tuple[str, Path, int, int], ...] = (
    ("mbconv", MODELS / "mbconv.py", 256, 224),
    ("resnet-50", CORPUS / "resnet-50" / "config.json", 64, 224),
    ("convnext-tiny", CORPUS / "convnext-tiny-224" / "config.json", 64, 224),
)


def estimate(target: Path, batch: int, seq: int, mode: str, gpu: str) -> dict[str, Any]:
    """The NCHW step, and the step traced with the whole model channels-last: SL402's
    after-step where it is reported (``step_ms - step_ms_saved``), else the relaid step
    the pipeline traced for its proposal (None where SL402 proposed nothing)."""
    from shapelint.app import api
    from shapelint.price.step import step_time

    report = api.lint_target(target, gpu=gpu, batch=batch, seq=seq, compile=mode == "compile")
    model = report.result.step_model
    assert model is not None
    found = [f for f in report.findings if f.code == "SL402"]
    after: float | None = None
    if found and found[0].step_ms_saved is not None:
        after = model.before.ms - found[0].step_ms_saved
    elif model.relaid is not None:
        after = step_time(model.relaid.step, model.hw, model.mode, model.optimizer).ms
    return {"nchw_ms": model.before.ms, "after_ms": after, "finding": bool(found),
            "est_speedup": found[0].est_speedup if found else None}


def measure(target: Path, batch: int, seq: int, mode: str, rounds: int, steps: int,
            device: str = "cuda") -> dict[str, float]:
    """Median steps of the model as written and converted channels-last, alternating."""
    import torch

    from shapelint.capture.memory_format import converted_inputs
    from shapelint.load.real import build
    from shapelint.measure.step_blocks import alternate
    from shapelint.measure.step_train import make_trainer, warm
    from shapelint.measure.timer import block_timer

    trainers = {}
    for layout in ("nchw", "channels_last"):
        built = build(target, device=device, batch=batch, seq=seq)
        inputs = built.inputs
        if layout == "channels_last":
            built.model.to(memory_format=torch.channels_last)
            inputs = converted_inputs(inputs, "channels_last")
        trainers[layout] = make_trainer(layout, built, inputs, device=device, precision="bf16", training=True,
                                        optimizer="adamw", compile=mode == "compile")
        warm(trainers[layout], device, 3, mode == "compile")
    samples, _ = alternate([(layout, t.step) for layout, t in trainers.items()], block_timer(device), rounds, steps)
    out = {layout: statistics.median(s.steps) for layout, s in samples.items()}
    del trainers
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--estimate-only", action="store_true", help="no GPU: print the estimates")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of the script (with --batch, --seq)")
    ap.add_argument("--batch", type=int, help="every model at this batch (default: each its own)")
    ap.add_argument("--seq", type=int, help="every model at this image size")
    ap.add_argument("--json", default=str(ROOT / "docs" / "data" / "sl402_after_step.json"))
    args = ap.parse_args(argv)
    only = set(filter(None, args.only.split(",")))
    rows: list[dict[str, Any]] = []
    print(f"{'model':14s} {'mode':8s} {'est NCHW':>9s} {'est CL':>8s} {'est x':>6s} {'NCHW':>8s} {'CL':>8s} "
          f"{'x':>6s} {'error':>7s}")
    for name, target, batch, seq in TARGETS:
        if only and name not in only:
            continue
        batch, seq = args.batch or batch, args.seq or seq
        for mode in args.modes.split(","):
            try:
                est = estimate(target, batch, seq, mode, args.gpu)
                got = {} if args.estimate_only else measure(target, batch, seq, mode, args.rounds, args.steps,
                                                            args.device)
            except Exception as exc:  # noqa: BLE001 - one model's failure is a row, not the end of the run
                print(f"{name:14s} {mode:8s} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                rows.append({"model": name, "mode": mode, "error": f"{type(exc).__name__}: {exc}"[:500]})
                continue
            after = est["after_ms"] if est["after_ms"] is not None else est["nchw_ms"]
            est_x = est["nchw_ms"] / after
            x = got["nchw"] / got["channels_last"] if got else None
            err = None if x is None else est_x / x - 1
            rows.append({"model": name, "mode": mode, "batch": batch, "seq": seq, **est, "est_step_speedup": est_x,
                         "measured_nchw_ms": got.get("nchw"), "measured_channels_last_ms": got.get("channels_last"),
                         "measured_speedup": x, "error": err})
            meas = f"{got['nchw']:8.2f} {got['channels_last']:8.2f} {x:6.2f} {100 * err:+6.1f}%" if got else \
                f"{'-':>8s} {'-':>8s} {'-':>6s} {'-':>7s}"
            print(f"{name:14s} {mode:8s} {est['nchw_ms']:9.2f} {after:8.2f} {est_x:6.2f} {meas}"
                  f"{'' if est['finding'] else '  (no SL402 finding)' if est['after_ms'] else '  (SL402 proposed nothing)'}",
                  flush=True)
    doc = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "rows": rows}
    Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
