"""PyTorch's SDPA kernels against each other on one GPU, forward + backward, with and
without an additive mask and dropout: the data a rate for the memory-efficient kernel
needs (issue 26: SL302's fix on SpeechT5's encoder, a bias with dropout 0.1, runs that
kernel — cuDNN refuses the dropout's resolution, flash any mask — and measured 0.74 ms a
layer where a cuDNN-rate estimate has 0.45).

Each case is timed with shapelint's CUDA timer (``shapelint.measure.timer``), medians,
the kernel forced with ``torch.nn.attention.sdpa_kernel``; the table gives each case's
time over the same shape's cuDNN time without a mask.

    python benchmarks/attention_kernel_rates.py --json $OUT/attention_kernel_rates.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from shapelint.measure.timer import Timing, cuda_timer

#: (batch·heads, sequence, head dim): SpeechT5's and WavLM's encoders, GPT-2's, a long one
SHAPES = ((96, 1024, 64), (192, 1024, 64), (32, 2048, 128))
BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
#: (backend, additive [T, T] mask, dropout)
CASES = (("cudnn", False, 0.0), ("flash", False, 0.0), ("efficient", False, 0.0), ("cudnn", True, 0.0),
         ("efficient", True, 0.0), ("flash", False, 0.1), ("efficient", False, 0.1), ("efficient", True, 0.1))


def fwd_bwd_ms(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, dropout: float,
               causal: bool, backend: str | None) -> float | None:
    """Median ms of one SDPA forward and backward (the mask's gradient too, where it
    needs one) on ``backend``, or on the kernel PyTorch picks (None); None where the
    backend refuses the call."""
    inputs = (q, k, v, mask) if mask is not None and mask.requires_grad else (q, k, v)
    grad = torch.randn_like(q)

    def step() -> object:
        if backend is None:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal)
        else:
            with sdpa_kernel(BACKENDS[backend]):
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal)
        return torch.autograd.grad(out, inputs, grad)

    try:
        step()
    except RuntimeError:  # the backend refuses this call
        return None
    return Timing(tuple(cuda_timer()(step))).median


def case_ms(bh: int, t: int, d: int, backend: str, masked: bool, dropout: float) -> float | None:
    q, k, v = (torch.randn(1, bh, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    mask = torch.randn(t, t, device="cuda", dtype=torch.bfloat16) if masked else None
    return fwd_bwd_ms(q, k, v, mask, dropout, False, backend)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    rows: list[dict[str, Any]] = []
    print(f"{'shape (BH, T, d)':18} {'kernel':10} {'mask':5} {'drop':5} {'ms':>8} {'÷ cudnn':>8}")
    for bh, t, d in SHAPES:
        base = None
        for backend, masked, dropout in CASES:
            ms = case_ms(bh, t, d, backend, masked, dropout)
            base = ms if base is None else base
            ratio = ms / base if ms and base else None
            rows.append({"bh": bh, "t": t, "d": d, "kernel": backend, "mask": masked, "dropout": dropout, "ms": ms,
                         "over_cudnn": ratio})
            shown = f"{ms:8.3f} {ratio:8.2f}" if ms is not None and ratio is not None else "  refused"
            print(f"{f'({bh}, {t}, {d})':18} {backend:10} {str(masked):5} {dropout:<5} {shown}", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__, "python": platform.python_version(), "rows": rows}, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
