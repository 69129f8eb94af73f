"""Whole training steps of real models, eager and compiled, measured next to shapelint's
estimate (issue 26): MoE experts in fp32, T5's position-bias attention, a convnet in both
layouts, Mamba (where mamba_ssm is installed), a ViT, a host-bound encoder, ResNet-50 and a dense decoder.

Self-contained: every config is in the repository (``benchmarks/real_models/``,
``tests/corpus/``), nothing is downloaded. Each model is linted in this process on the
H100 profile (``--gpu h100``; a calibrated profile with ``--gpu-profile``), then built
for real (``shapelint.load.real.build``) and trained as ``--verify --step`` trains it
(``shapelint.measure.step_train.make_trainer``: bf16 autocast over fp32 weights, the
model's loss, fused AdamW), eager and compiled in alternating blocks
(``shapelint.measure.step_blocks.alternate``, CUDA events through
``shapelint.measure.timer``), the median step of each. Host-bound estimates are a range
over measured hosts (``summary.step_ms_range``): a measured step inside it counts as
within.

    python benchmarks/real_model_steps.py [--only NAME,...] [--rounds 3] [--steps 8]
        [--gpu-profile FILE] [--json docs/data/real_model_steps_h100.json]

Prints one row per model and mode: estimated, the host range, measured, error; writes the
rows as JSON. About 6-8 minutes on an H100 (compilation dominates).
"""

from __future__ import annotations

import argparse
import importlib.util
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

#: (name, target, batch, seq, what it checks, a module it needs or None)
TARGETS: tuple[tuple[str, Path, int, int, str, str | None], ...] = (
    ("qwen1.5-moe-2l", MODELS / "qwen1.5-moe-2l" / "config.json", 8, 1024, "fp32 experts, per-expert fallback", None),
    ("flan-t5-base", CORPUS / "flan-t5-base" / "config.json", 8, 512, "position bias with a gradient", None),
    ("mbconv-nchw", MODELS / "mbconv.py", 256, 224, "depthwise + 1x1 convs, NCHW", None),
    ("mbconv-channels-last", MODELS / "mbconv_channels_last.py", 256, 224, "the same, channels-last", None),
    ("mamba-130m", MODELS / "mamba-130m" / "config.json", 8, 1024, "fused selective scan", "mamba_ssm"),
    ("vit-base", CORPUS / "vit-base-patch16-224" / "config.json", 64, 224, "vision encoder attention", None),
    ("roberta-base", CORPUS / "roberta-base" / "config.json", 8, 512, "host-bound eager step", None),
    ("resnet-50", CORPUS / "resnet-50" / "config.json", 64, 224, "batch norms and convolutions, NCHW", None),
    ("qwen3-0.6b", CORPUS / "qwen3-0.6b" / "config.json", 8, 1024, "a dense decoder, GQA", None),
)
MODES = ("eager", "compile")


def estimate(target: Path, batch: int, seq: int, mode: str, gpu: str | None, profile: str | None) -> dict[str, Any]:
    """shapelint's step estimate of ``target`` (the CLI in this process, JSON)."""
    import io
    from contextlib import redirect_stdout

    from shapelint.app import cli

    argv = [str(target), "--format", "json", "--no-cache", "--no-isolate", "--exit-zero", "--batch", str(batch),
            "--seq", str(seq), "--compile" if mode == "compile" else "--no-compile"]
    argv += ["--gpu-profile", profile] if profile else ["--gpu", gpu or "h100"]
    out = io.StringIO()
    with redirect_stdout(out):
        cli.main(argv)
    summary = json.loads(out.getvalue())["summary"]
    return {"est_ms": summary["step_ms"], "range": summary.get("step_ms_range", [summary["step_ms"]] * 2),
            "bound": summary["step"]["bound"], "ssm_kernels": "ssm_kernels" in summary}


def measure(target: Path, batch: int, seq: int, rounds: int, steps: int) -> dict[str, float]:
    """Median eager and compiled steps of ``target`` on this GPU, in alternating blocks."""
    import torch

    from shapelint.load.real import build
    from shapelint.measure.step_blocks import alternate
    from shapelint.measure.step_train import make_trainer, warm
    from shapelint.measure.timer import cuda_block_timer

    built = build(target, device="cuda", batch=batch, seq=seq)
    trainers = {mode: make_trainer(mode, built, built.inputs, device="cuda", precision="bf16", training=True,
                                   optimizer="adamw", compile=mode == "compile") for mode in MODES}
    for mode, t in trainers.items():
        warm(t, "cuda", 3, mode == "compile")
    samples, _ = alternate([(mode, t.step) for mode, t in trainers.items()], cuda_block_timer(), rounds, steps)
    out = {mode: statistics.median(s.steps) for mode, s in samples.items()}
    del trainers, built
    torch.cuda.empty_cache()
    return out


def row(name: str, mode: str, est: dict[str, Any], measured: float | None, why: str) -> dict[str, Any]:
    low, high = est["range"]
    error = None if measured is None else est["est_ms"] / measured - 1
    inside = measured is not None and low * 0.999 <= measured <= high * 1.001
    return {"model": name, "mode": mode, "estimated_ms": round(est["est_ms"], 2), "range_ms": [round(low, 2),
            round(high, 2)], "bound": est["bound"], "measured_ms": None if measured is None else round(measured, 2),
            "error": None if error is None else round(error, 4), "inside_range": inside, "checks": why}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--gpu", default="h100")
    ap.add_argument("--gpu-profile", default=None)
    ap.add_argument("--estimate-only", action="store_true", help="no GPU: print the estimates")
    ap.add_argument("--json", default=str(ROOT / "docs" / "data" / "real_model_steps.json"))
    args = ap.parse_args(argv)
    only = set(filter(None, args.only.split(",")))
    rows: list[dict[str, Any]] = []
    print(f"{'model':22s} {'mode':8s} {'est ms':>9s} {'host range':>17s} {'measured':>9s} {'error':>7s}  checks")
    for name, target, batch, seq, why, needs in TARGETS:
        if only and name not in only:
            continue
        if needs and not args.estimate_only and importlib.util.find_spec(needs) is None:
            print(f"{name:22s} skipped: {needs} is not installed (the GPU would run transformers' slow path)")
            continue
        started = time.perf_counter()
        try:
            ests = {mode: estimate(target, batch, seq, mode, args.gpu, args.gpu_profile) for mode in MODES}
            measured: dict[str, float] = ({} if args.estimate_only
                                          else measure(target, batch, seq, args.rounds, args.steps))
        except Exception as exc:  # noqa: BLE001 - one model's failure is a row, not the end of the run
            print(f"{name:22s} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            rows.append({"model": name, "error": f"{type(exc).__name__}: {exc}"[:500], "checks": why})
            continue
        for mode in MODES:
            r = row(name, mode, ests[mode], measured.get(mode), why)
            r["seconds"] = round(time.perf_counter() - started, 1)
            rows.append(r)
            rng = f"{r['range_ms'][0]:.1f}-{r['range_ms'][1]:.1f}" if r["bound"] == "host" else "-"
            meas = f"{r['measured_ms']:9.2f}" if r["measured_ms"] is not None else f"{'-':>9s}"
            err = f"{100 * r['error']:+6.1f}%" if r["error"] is not None else f"{'-':>7s}"
            print(f"{name:22s} {mode:8s} {r['estimated_ms']:9.2f} {rng:>17s} {meas} {err}  {why}", flush=True)
    doc = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "rows": rows}
    Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
