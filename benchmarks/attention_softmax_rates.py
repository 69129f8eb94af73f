"""The softmax kernels' rates by row length, forward and backward, against a plain copy
of the same bytes (issue 26: SL302's before side prices the score chain's softmax as a
row reduction at the step's reduction rate, 0.452 of the copy bandwidth; on an H100 the
softmax forward over 1023- and 1024-key fp32 rows ran 287 us for 804 MB, 0.84 of it).

PyTorch's CUDA softmax (``aten/src/ATen/native/cuda/SoftMax.cu``) runs a warp-per-row
kernel where a row fits (``dim_size <= 1024`` and ``dim_size * sizeof(scalar) <= 4096``)
and a block-per-row kernel otherwise; its backward first multiplies the gradient by the
output (one more elementwise kernel) on some paths. Each case is a [rows, R] tensor of
about ``--elements`` elements: forward (``torch._softmax``) and backward
(``torch._softmax_backward_data``) timed with shapelint's CUDA timer, their kernels
profiled, and their bytes (forward: read + write; backward: gradient and output read,
gradient written) over the time of a contiguous copy of the same bytes.

    python benchmarks/attention_softmax_rates.py --json $OUT/attention_softmax_rates.json
    python benchmarks/attention_softmax_rates.py --device cpu --elements 100000   # smoke
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

ROWS = (128, 256, 512, 1000, 1023, 1024, 1025, 2048, 4096, 8192, 32000, 50257)
DTYPES = ("fp32", "bf16")


def case(r: int, dtype_name: str, elements: int, device: str) -> dict[str, Any]:
    import torch
    from attention_finding_profile import profile_kernels, timed_ms

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    rows = max(1, elements // r)
    x = torch.randn(rows, r, device=device, dtype=dtype)
    y = torch._softmax(x, -1, False)
    g = torch.randn_like(y)
    buf = torch.empty(2 * x.numel(), device=device, dtype=dtype)
    src = torch.randn(2 * x.numel(), device=device, dtype=dtype)
    nbytes = x.numel() * x.element_size()
    row: dict[str, Any] = {"row": r, "rows": rows, "dtype": dtype_name, "mb": nbytes / 1e6}
    row["fwd_ms"] = timed_ms(lambda: torch._softmax(x, -1, False), device)
    row["bwd_ms"] = timed_ms(lambda: torch._softmax_backward_data(g, y, -1, dtype), device)
    # a copy moving the forward's bytes (read + write of the tensor): the copy bandwidth here
    row["copy_ms"] = timed_ms(lambda: buf[: x.numel()].copy_(src[: x.numel()]), device)
    row["fwd_of_copy"] = row["copy_ms"] / row["fwd_ms"]
    row["bwd_of_copy"] = 1.5 * row["copy_ms"] / row["bwd_ms"]  # backward moves 3 tensors, the copy 2
    row["bwd_kernels"] = profile_kernels(lambda: torch._softmax_backward_data(g, y, -1, dtype), device, calls=3)
    row["fwd_kernels"] = profile_kernels(lambda: torch._softmax(x, -1, False), device, calls=3)
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--elements", type=int, default=96 * 1024 * 1024)
    args = p.parse_args()
    import torch
    from machine_info import machine

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("attention_softmax_rates: no CUDA GPU; --device cpu smoke-tests")
    rows = []
    print(f"{'dtype':5} {'row':>6} {'MB':>7} {'fwd ms':>8} {'bwd ms':>8} {'copy ms':>8} {'fwd/copy':>8} {'bwd/copy':>8}"
          "  backward kernels")
    for dtype in DTYPES:
        for r in ROWS:
            c = case(r, dtype, args.elements, args.device)
            rows.append(c)
            kernels = ", ".join(f"{k['kernel'][:40]} {k['us']:.0f}" for k in c["bwd_kernels"][:3])
            print(f"{dtype:5} {r:>6} {c['mb']:7.1f} {c['fwd_ms']:8.3f} {c['bwd_ms']:8.3f} {c['copy_ms']:8.3f} "
                  f"{c['fwd_of_copy']:8.2f} {c['bwd_of_copy']:8.2f}  {kernels}", flush=True)
            if args.device == "cuda":
                torch.cuda.empty_cache()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": machine(), "date": time.strftime("%Y-%m-%d"),
                                         "elements": args.elements, "rows": rows}, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
