"""A host read in every layer: what an eager training step pays for it, measured, against
shapelint's estimate (a replayed layer carries its read: one host sync per layer).

Each layer of a residual MLP stack checks its input first, as library code does
(``if torch.isnan(x).any(): raise``): the host waits for the GPU there, then issues the
rest of the layer onto an idle GPU. Two variants of each shape, in alternating blocks:
``check`` (the read in every layer) and ``no_check`` (the same layers without it).
bf16 autocast over fp32 weights, loss ``out.float().square().mean()``, fused AdamW, as
shapelint prices a step (``--dtype bf16``, the default optimizer).

    python benchmarks/layer_syncs.py --out $OUT/layer_syncs.json [--gpu h100]

Prints a table (per shape and variant: the estimate, its host range, the measured step,
the error; and the cost of the reads, estimated and measured) and writes the rows as JSON.
``--device cpu --tiny`` runs the code path on a CPU (no timing worth reading).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))  # shapelint from this checkout (the GPU machine gets a copy of the tree)

#: (layers, width, tokens): a GPU-bound stack, one nearer the host's bound, a host-bound one
SHAPES = ((24, 2048, 8192), (24, 1024, 4096), (48, 512, 1024))
TINY = ((4, 64, 64),)
VARIANTS = ("check", "no_check")


class Block(nn.Module):
    def __init__(self, width: int, check: bool) -> None:
        super().__init__()
        self.check = check
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.check and torch.isnan(x).any():  # a host read: the step waits for the GPU here
            raise ValueError("NaN in the input")
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Stack(nn.Module):
    def __init__(self, layers: int, width: int, check: bool) -> None:
        super().__init__()
        self.inp = nn.Linear(width, width)
        self.blocks = nn.ModuleList(Block(width, check) for _ in range(layers))
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.out(x)


def estimate(layers: int, width: int, tokens: int, check: bool, gpu: str | None) -> dict[str, Any]:
    """shapelint's eager estimate of the step (the model built on meta: nothing allocated)."""
    import shapelint

    with torch.device("meta"):
        model, x = Stack(layers, width, check), torch.randn(tokens, width)
    report = shapelint.lint(model, x, gpu=gpu, dtype="bf16")
    step = report.step_time
    assert step is not None
    return {"est_ms": round(step.ms, 4), "est_range": [round(v, 4) for v in step.ms_range],
            "est_host_syncs": step.syncs, "est_bound": step.bound, "est_gpu_ms": round(step.gpu_ms, 4),
            "est_host_ms": round(step.host_ms, 4)}


def trainer(layers: int, width: int, tokens: int, check: bool, device: str) -> Any:
    torch.manual_seed(0)
    model = Stack(layers, width, check).to(device)
    x = torch.randn(tokens, width, device=device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")

    def step() -> None:
        with torch.autocast(device, dtype=torch.bfloat16):
            out = model(x)
        out.float().square().mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def time_block(step: Any, n: int, device: str) -> float:
    """Mean ms per step over ``n`` steps (CUDA events around the block, no sync inside it)."""
    import time

    if device != "cuda":
        start = time.perf_counter()
        for _ in range(n):
            step()
        return (time.perf_counter() - start) * 1e3 / n
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    begin.record()
    for _ in range(n):
        step()
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end) / n


def measure(shape: tuple[int, int, int], device: str, rounds: int, steps: int) -> dict[str, float]:
    """Median ms per step of each variant, blocks alternating between them."""
    steps_of = {v: trainer(*shape, v == "check", device) for v in VARIANTS}
    for step in steps_of.values():
        for _ in range(5):
            step()
    blocks: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(rounds):
        for v in VARIANTS:
            blocks[v].append(time_block(steps_of[v], steps, device))
    return {v: statistics.median(ms) for v, ms in blocks.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/layer_syncs.json"))
    parser.add_argument("--gpu", default=None, help="the profile to estimate with (default: the local GPU's)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="one tiny shape (a smoke run)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    from checkout import map_rules

    map_rules()
    rows = []
    print(f"{'layers x width x tokens':24} {'variant':9} {'syncs':>5} {'est ms':>8} {'host range':>17} "
          f"{'measured':>9} {'error':>7}")
    for shape in TINY if args.tiny else SHAPES:
        measured = measure(shape, args.device, args.rounds, args.steps)
        est = {v: estimate(*shape, v == "check", args.gpu) for v in VARIANTS}
        for v in VARIANTS:
            row = {"layers": shape[0], "width": shape[1], "tokens": shape[2], "variant": v, **est[v],
                   "measured_ms": round(measured[v], 4), "error": round(est[v]["est_ms"] / measured[v] - 1, 4)}
            rows.append(row)
            low, high = row["est_range"]
            print(f"{'x'.join(map(str, shape)):24} {v:9} {row['est_host_syncs']:>5} {row['est_ms']:>8.2f} "
                  f"{low:>8.2f}-{high:<8.2f} {row['measured_ms']:>9.2f} {100 * row['error']:>+6.1f}%")
        est_cost = est["check"]["est_ms"] - est["no_check"]["est_ms"]
        cost = measured["check"] - measured["no_check"]
        print(f"{'':24} reads cost: est. {est_cost:.2f} ms, measured {cost:.2f} ms ({shape[0]} layers)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
    args.out.write_text(json.dumps({
        "device": device, "torch": torch.__version__, "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), "rows": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
