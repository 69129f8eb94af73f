"""Two corpus findings whose estimate missed the per-call measurement by more than
25% (issue 9), measured as GPU kernel time as well as per call:

- ResNet-50 (the corpus config, batch 8 x 3 x 224 x 224, bf16 autocast) forward +
  backward in NCHW against channels-last: every convolution kernel and every
  NCHW <-> NHWC transpose cuDNN launches, summed by the profiler, beside the
  event-timed step. SL402 estimates the covered convolutions' GPU time.
- Fused attention (``F.scaled_dot_product_attention``, bf16, forward + backward,
  1024 x 1024, head dim 64) at the batch x heads of GPT-Neo-125m (96), BLOOM-560m
  and CodeGen-350m (128): as shapelint.measure.verify's block runner lays it out
  ([1, B*H, T, D]) and as the models do ([B, H, T, D]), timed per call with CUDA
  events (the verify timer) and as kernel time (the profiler).

    python benchmarks/kernel_probe.py --out $OUT/kernel_probe.json

Prints a table and writes the numbers. Needs a CUDA GPU, torch and transformers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def kernel_ms(fn: Callable[[], object], steps: int = 10) -> dict[str, float]:
    """GPU kernel time per call by kernel-name class (profiler), after warm-up."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
        if not us or e.key.startswith("cuda") or "Memcpy" in e.key:
            continue
        name = e.key.lower()
        cls = ("transpose" if ("nchwtonhwc" in name or "nhwctonchw" in name or "transpose" in name)
               else "conv" if any(s in name for s in ("conv", "dgrad", "wgrad", "fprop", "implicit", "xmma", "sm90",
                                                      "cutlass", "cudnn"))
               else "attention" if any(s in name for s in ("flash", "fmha", "attention", "mha"))
               else "other")
        out[cls] = out.get(cls, 0.0) + us / 1e3 / steps
    out["total"] = sum(out.values())
    return out


def event_ms(fn: Callable[[], object], reps: int = 30) -> float:
    from shapelint.measure.timer import cuda_timer

    return statistics.median(cuda_timer(reps=reps)(fn))


def resnet(channels_last: bool) -> Callable[[], object]:
    import torch
    import transformers

    config = transformers.AutoConfig.from_pretrained(ROOT / "tests" / "corpus" / "resnet-50")
    model = transformers.ResNetForImageClassification(config).cuda()
    x = torch.randn(8, 3, 224, 224, device="cuda")
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (8,), device="cuda")

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(pixel_values=x, labels=labels).loss
        loss.backward()

    return step


def sdpa(bh_layout: bool, batch: int, heads: int) -> Callable[[], object]:
    import torch
    import torch.nn.functional as F

    shape = (1, batch * heads, 1024, 64) if bh_layout else (batch, heads, 1024, 64)
    q, k, v = (torch.randn(shape, dtype=torch.bfloat16, device="cuda", requires_grad=True) for _ in range(3))
    grad = torch.randn(shape, dtype=torch.bfloat16, device="cuda")
    return lambda: torch.autograd.grad(F.scaled_dot_product_attention(q, k, v), (q, k, v), grad)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    import torch

    doc: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": []}
    cases: list[tuple[str, Callable[[], Callable[[], object]]]] = [
        ("resnet-50 b8 nchw", lambda: resnet(False)),
        ("resnet-50 b8 channels_last", lambda: resnet(True)),
    ]
    for batch, heads in ((8, 12), (8, 16)):
        cases.append((f"sdpa [1,{batch * heads},1024,64]", lambda b=batch, h=heads: sdpa(True, b, h)))
        cases.append((f"sdpa [{batch},{heads},1024,64]", lambda b=batch, h=heads: sdpa(False, b, h)))
    for rep in range(2):
        for name, make in cases:
            fn = make()
            row = {"case": name, "rep": rep, "event_ms": event_ms(fn), "kernel_ms": kernel_ms(fn)}
            doc["rows"].append(row)
            print(f"{name:32s} rep {rep}  per call {row['event_ms']:.3f} ms  kernels "
                  + "  ".join(f"{k} {v:.3f}" for k, v in row["kernel_ms"].items()), flush=True)
            del fn
            torch.cuda.empty_cache()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
