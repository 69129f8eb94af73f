"""How much the L2 cache changes the cost of a misaligned GEMM: the three GEMMs of
GPT-2's LM head (8192 tokens x 768 -> vocab, the layouts nn.Linear uses) timed with
the L2 flushed before every run (as --verify does) and back to back (operands
partly cached, as inside a training step). Needs a CUDA GPU.

    python benchmarks/lm_head_l2.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from shapelint.measure.timer import cuda_timer


def lm_head_ms(vocab: int, timer, tokens: int = 8192, width: int = 768) -> dict[str, float]:
    x = torch.randn(tokens, width, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(vocab, width, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn(tokens, vocab, device="cuda", dtype=torch.bfloat16)
    return {
        "forward": statistics.median(timer(lambda: torch.mm(x, w.t()))),
        "grad_input": statistics.median(timer(lambda: torch.mm(dy, w))),
        "grad_weight": statistics.median(timer(lambda: torch.mm(dy.t(), x))),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    rows = {}
    for name, timer in (("l2_flushed", cuda_timer()), ("back_to_back", cuda_timer(flush_l2=False))):
        for vocab in (50257, 50264):
            rows[f"{name}/{vocab}"] = lm_head_ms(vocab, timer)
    for name in ("l2_flushed", "back_to_back"):
        b, a = rows[f"{name}/50257"], rows[f"{name}/50264"]
        print(f"{name:13} 50257: {sum(b.values()):7.3f} ms  50264: {sum(a.values()):7.3f} ms  "
              f"speedup {sum(b.values()) / sum(a.values()):.2f}x  " +
              "  ".join(f"{k} {b[k]:.3f}->{a[k]:.3f}" for k in b))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "lm_head_l2.json").write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                                     "date": time.strftime("%Y-%m-%d"), "ms": rows}, indent=1))


if __name__ == "__main__":
    main()
