"""The convnet kernel rates of the step model, measured alone on a GPU (issue 26): batch
norm and depthwise / 1x1 convolutions in NCHW and channels-last, at the small sizes the
old calibration used (batch 64) and the large ones of a batch-256 MBConv step, each
beside shapelint's estimate of the same call.

For each case (a module, an input shape, a layout) the forward and backward of the call
run under bf16 autocast (fp32 parameters, a bf16 activation that needs its gradient, as
inside a training step); torch.profiler sums the GPU time of the kernels they launch
(weight casts and fills excluded: they are not the kernel being measured), the median
over ``--reps`` profiled calls. The bytes are the ones shapelint records for the same
call (a CPU trace: batch-norm ops' bytes, convolution GEMMs' ``min_bytes``), so the rate
printed is the one the profile's constants mean: batch norm over the datasheet bandwidth
(``step.batch_norm_*_efficiency``), convolutions over the copy rate (0.9 of it:
``depthwise_*``, ``conv_gemm_1x1_efficiency``). About 2 minutes on an H100.

    python benchmarks/conv_bn_rates.py [--reps 5] [--json /tmp/out/conv_bn_rates.json]
    python benchmarks/conv_bn_rates.py --estimate-only     # no GPU: the estimates alone
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: (name, module source, input shape): batch-64 points of the old calibration and the
#: batch-256 MBConv layers (the largest and the smallest of each kind)
CASES: tuple[tuple[str, str, tuple[int, ...]], ...] = (
    ("bn 96 @112^2 b256", "nn.BatchNorm2d(96)", (256, 96, 112, 112)),
    ("bn 144 @56^2 b64", "nn.BatchNorm2d(144)", (64, 144, 56, 56)),
    ("bn 672 @14^2 b256", "nn.BatchNorm2d(672)", (256, 672, 14, 14)),
    ("bn 1152 @7^2 b256", "nn.BatchNorm2d(1152)", (256, 1152, 7, 7)),
    ("dw3 144 @72^2 b64", "nn.Conv2d(144, 144, 3, padding=1, groups=144, bias=False)", (64, 144, 72, 72)),
    ("dw5 288 @36^2 b64", "nn.Conv2d(288, 288, 5, padding=2, groups=288, bias=False)", (64, 288, 36, 36)),
    ("dw3 96 @112^2 b256", "nn.Conv2d(96, 96, 3, padding=1, groups=96, bias=False)", (256, 96, 112, 112)),
    ("dw5 672 @14^2 b256", "nn.Conv2d(672, 672, 5, padding=2, groups=672, bias=False)", (256, 672, 14, 14)),
    ("dw3 32 @112^2 b16", "nn.Conv2d(32, 32, 3, padding=1, groups=32, bias=False)", (16, 32, 112, 112)),
    ("1x1 256->64 @56^2 b64", "nn.Conv2d(256, 64, 1, bias=False)", (64, 256, 56, 56)),
    ("1x1 256->64 @56^2 b256", "nn.Conv2d(256, 64, 1, bias=False)", (256, 256, 56, 56)),
    ("1x1 24->144 @56^2 b256", "nn.Conv2d(24, 144, 1, bias=False)", (256, 24, 56, 56)),
    ("1x1 672->112 @14^2 b256", "nn.Conv2d(672, 112, 1, bias=False)", (256, 672, 14, 14)),
    ("1x1 1024->256 @14^2 b64", "nn.Conv2d(1024, 256, 1, bias=False)", (64, 1024, 14, 14)),
    # ResNet-50's other convolutions at batch 64 (its step's convolutions are priced
    # 1.4-1.7x their profiled time: docs/known-gaps.md)
    ("stem 7x7/2 3->64 @224^2 b64", "nn.Conv2d(3, 64, 7, 2, 3, bias=False)", (64, 3, 224, 224)),
    ("1x1 64->256 @56^2 b64", "nn.Conv2d(64, 256, 1, bias=False)", (64, 64, 56, 56)),
    ("3x3 64 @56^2 b64", "nn.Conv2d(64, 64, 3, padding=1, bias=False)", (64, 64, 56, 56)),
    ("3x3 128 @28^2 b64", "nn.Conv2d(128, 128, 3, padding=1, bias=False)", (64, 128, 28, 28)),
    ("1x1 512->128 @28^2 b64", "nn.Conv2d(512, 128, 1, bias=False)", (64, 512, 28, 28)),
    ("3x3 256 @14^2 b64", "nn.Conv2d(256, 256, 3, padding=1, bias=False)", (64, 256, 14, 14)),
    ("1x1 256->1024 @14^2 b64", "nn.Conv2d(256, 1024, 1, bias=False)", (64, 256, 14, 14)),
    ("3x3 512 @7^2 b64", "nn.Conv2d(512, 512, 3, padding=1, bias=False)", (64, 512, 7, 7)),
    ("1x1 2048->512 @7^2 b64", "nn.Conv2d(2048, 512, 1, bias=False)", (64, 2048, 7, 7)),
)
LAYOUTS = ("nchw", "channels_last")
#: kernels of the call that are not the one measured: autocast's weight casts, fills
EXCLUDED = ("bfloat16_copy", "copy_kernel", "fill", "memset", "memcpy")


def build(module: str, shape: tuple[int, ...], channels_last: bool) -> tuple[Any, Any]:
    """The module and a bf16 activation that needs its gradient (what a layer of a bf16
    autocast step receives: a batch norm on an fp32 input would run, and be traced, in fp32)."""
    import torch
    from torch import nn

    class Bf16(nn.Module):
        """The layer fed a bf16 activation (the trace hands a model fp32 inputs)."""

        def __init__(self, layer: nn.Module) -> None:
            super().__init__()
            self.layer = layer

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layer(x.to(torch.bfloat16))

    model = Bf16(eval(module, {"nn": nn}))  # noqa: S307 - the cases above
    x = torch.randn(*shape, dtype=torch.bfloat16)
    if channels_last:
        model, x = model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
    return model, x.requires_grad_(True)


def estimate(module: str, shape: tuple[int, ...], channels_last: bool, gpu: str) -> dict[str, Any]:
    """shapelint's bytes and ms of the call: its batch-norm ops, or its convolution GEMMs."""
    from shapelint import hardware
    from shapelint.physics.conv_kernels import BATCH_NORM, kernel_of
    from shapelint.pipeline.run import trace
    from shapelint.price.gemm import gemm_ms
    from shapelint.price.kernels import op_ms

    hw = hardware.resolve(gpu)
    cap, _ = trace(lambda: build(module, shape, channels_last))
    bns = [op for op in cap.ops if op.name in BATCH_NORM]
    if bns:
        return {"kind": "batch_norm", "bytes": sum(op.bytes for op in bns), "kernels": len(bns),
                "est_ms": sum(op_ms(op, hw) for op in bns), "bandwidth": hw.memory_bandwidth_gbps * 1e9}
    convs = [g for g in cap.gemms if g.role == "conv"]
    return {"kind": f"conv:{kernel_of(convs[0])}", "bytes": sum(g.min_bytes for g in convs), "kernels": len(convs),
            "est_ms": sum(gemm_ms(g, hw) for g in convs), "bandwidth": hw.bandwidth}


def measure(module: str, shape: tuple[int, ...], channels_last: bool, reps: int) -> dict[str, Any]:
    """Median profiled kernel time of the call's forward and backward, and its kernels."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    model, x = build(module, shape, channels_last)
    model, x = model.cuda(), x.detach().cuda().requires_grad_(True)
    dy = None

    def step() -> None:
        nonlocal dy
        x.grad = None  # no accumulation kernel into the input's gradient
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = model(x)
        if dy is None:
            dy = torch.randn_like(y)
        y.backward(dy)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    totals, names = [], {}
    for _ in range(reps):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        total = 0.0
        for e in prof.events():
            if e.device_type.name != "CUDA" or any(k in e.name.lower() for k in EXCLUDED):
                continue
            ms = e.time_range.elapsed_us() / 1e3  # a kernel's own span on the GPU
            total += ms
            names[e.name[:80]] = names.get(e.name[:80], 0.0) + ms / reps
        totals.append(total)
    return {"ms": statistics.median(totals), "top": sorted(names.items(), key=lambda kv: -kv[1])[:4]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--gpu", default="h100", help="the GPU profile the estimate is made on")
    ap.add_argument("--estimate-only", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows: list[dict[str, Any]] = []
    print(f"{'case':26s} {'layout':14s} {'kind':18s} {'MB':>8s} {'est ms':>8s} {'meas ms':>8s} "
          f"{'est/meas':>8s} {'rate':>6s}")
    started = time.time()
    for name, module, shape in CASES:
        for layout in LAYOUTS:
            est = estimate(module, shape, layout == "channels_last", args.gpu)
            row: dict[str, Any] = {"case": name, "module": module, "shape": list(shape), "layout": layout, **est}
            if not args.estimate_only:
                row.update(measure(module, shape, layout == "channels_last", args.reps))
                row["rate"] = est["bytes"] / (row["ms"] * 1e-3) / est["bandwidth"]
            rows.append(row)
            meas = row.get("ms")
            print(f"{name:26s} {layout:14s} {est['kind']:18s} {est['bytes'] / 1e6:8.1f} {est['est_ms']:8.3f} "
                  + (f"{meas:8.3f} {est['est_ms'] / meas:8.2f} {row['rate']:6.3f}" if meas else f"{'-':>8s}"))
            if args.json:
                out = {"machine": platform.node(), "date": time.strftime("%Y-%m-%d"), "gpu_profile": args.gpu,
                       "rows": rows}
                if not args.estimate_only:
                    import torch

                    out["device"] = torch.cuda.get_device_name(0)
                    out["torch"] = torch.__version__
                    out["cudnn"] = torch.backends.cudnn.version()
                Path(args.json).parent.mkdir(parents=True, exist_ok=True)
                Path(args.json).write_text(json.dumps(out, indent=1))
    print(f"({time.time() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
