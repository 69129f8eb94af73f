"""Which SDPA kernel the installed torch picks on this GPU for the calls whose kernel
shapelint's pricing depends on, against what shapelint records for them
(``shapelint.physics.attention.gpu_kernel``), and each call's time, forward + backward,
on the kernel PyTorch picks and on each kernel forced (issue 26: each kernel is priced at
its own rate, so a wrong pick is a wrong price).

The cases: GPT-2's attention eager (causal, dropout 0.1) and compiled (a causal boolean
mask with dropout 0.1); SpeechT5's encoder after SL302's fix, as --verify timed it
before (a constant [T, T] bias, dropout 0.1) and as the fix runs it (a bias of the
scores' shape that needs its gradient); T5's learned bias; an fp32 step's attention
(the memory-efficient kernel's fp32 rate, against bf16 cuDNN); head dimension 160 in
training (cuDNN in torch 2.11, forward and backward).

    python benchmarks/attention_kernel_choice.py --json $OUT/attention_kernel_choice.json

Needs a CUDA GPU; about a minute on an H100.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from attention_kernel_rates import BACKENDS, fwd_bwd_ms

from shapelint.capture.sdpa import attention_call
from shapelint.physics.attention import gpu_kernel

NAMES = {int(v.value): k for k, v in BACKENDS.items()}


@dataclass(frozen=True)
class Case:
    """One SDPA call: q, k, v of [B, H, T, d]; ``mask``: None, ``"causal_bool"`` (a
    [B, 1, T, T] boolean tril), ``"bias"`` (a constant [T, T] one in the compute dtype) or
    ``"learned"`` (a [B, H, T, T] one that needs its gradient)."""

    name: str
    b: int
    h: int
    t: int
    d: int
    dtype: str = "bf16"
    mask: str | None = None
    dropout: float = 0.0
    causal: bool = False


CASES = (
    Case("gpt2 eager", 8, 12, 1024, 64, dropout=0.1, causal=True),
    Case("gpt2 compiled (mask)", 8, 12, 1024, 64, mask="causal_bool", dropout=0.1),
    Case("speecht5 verify (constant bias)", 1, 96, 1023, 64, mask="bias", dropout=0.1),
    Case("speecht5 fix (learned bias)", 1, 96, 1023, 64, mask="learned", dropout=0.1),
    Case("t5 learned bias", 8, 12, 512, 64, mask="learned", dropout=0.1),
    Case("fp32 step", 8, 12, 1024, 64, dtype="fp32"),
    Case("bf16 reference (fp32 step's shape)", 8, 12, 1024, 64),
    Case("head dim 160", 8, 8, 1024, 160),
)


def tensors(c: Case) -> tuple[Any, ...]:
    dtype = torch.bfloat16 if c.dtype == "bf16" else torch.float32
    q, k, v = (torch.randn(c.b, c.h, c.t, c.d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    mask: Any = None
    if c.mask == "causal_bool":
        mask = torch.ones(c.t, c.t, device="cuda", dtype=torch.bool).tril().expand(c.b, 1, c.t, c.t).contiguous()
    elif c.mask == "bias":
        mask = torch.randn(c.t, c.t, device="cuda", dtype=dtype)
    elif c.mask == "learned":
        mask = torch.randn(c.b, c.h, c.t, c.t, device="cuda", dtype=dtype, requires_grad=True)
    return q, k, v, mask


def picked(c: Case) -> str:
    q, k, v, mask = tensors(c)
    choice = torch._fused_sdp_choice(q, k, v, mask, c.dropout, c.causal)  # type: ignore[attr-defined]
    return NAMES.get(int(choice), str(choice))


def case_ms(c: Case, backend: str | None) -> float | None:
    return fwd_bwd_ms(*tensors(c), c.dropout, c.causal, backend)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    rows: list[dict[str, Any]] = []
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, cuDNN {torch.backends.cudnn.version()}")
    print(f"{'case':36} {'torch':>9} {'shapelint':>9} {'default':>8} " + " ".join(f"{b:>9}" for b in BACKENDS))
    for c in CASES:
        q, k, v, mask = tensors(c)
        ours = gpu_kernel(attention_call(q, k, v, mask, c.dropout, c.causal))
        forced = {b: case_ms(c, b) for b in BACKENDS}
        row = {"case": c.name, **c.__dict__, "torch_kernel": picked(c), "shapelint_kernel": ours,
               "default_ms": case_ms(c, None), "forced_ms": forced}
        rows.append(row)
        cells = " ".join(f"{ms:9.3f}" if ms is not None else "  refused" for ms in forced.values())
        default = row["default_ms"]
        print(f"{c.name:36} {row['torch_kernel']:>9} {ours:>9} "
              f"{default if default is None else f'{default:8.3f}'} {cells}", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "date": datetime.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
            "python": platform.python_version(), "rows": rows}, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
