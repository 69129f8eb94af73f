"""One rank of ``shapelint calibrate``'s parallel host probe (launched by
:func:`shapelint.measure.parallel_host.measure` through ``torchrun``): the probe model
(:func:`probe_model`) trained one GPU per rank, then under DDP, FSDP2 and DTensor tensor
parallelism, interleaved round by round; on rank 0 the steps as JSON.

The probe is a stack of narrow MLP blocks (a layer norm, a column-parallel ``up_proj``,
GELU, a row-parallel ``down_proj``, a residual): at width 64 and 256 tokens its GPU work
is a few microseconds a kernel, so each step takes what the host needs to issue it, and
what a layout adds to the one-GPU step is what its engine does on the host: per trained
tensor (DDP's hook and bucket copies, FSDP2's views and sharded gradients), per
``fully_shard`` group, per DTensor layer, parameter and collective. Its names are the
ones the tensor-parallel plan recognises (``up_proj`` column, ``down_proj`` row), so the
lint prices the same layout the probe runs: one all-reduce per block each way, as
Megatron-LM runs it. Two variants, with and without the linear layers' biases, differ
by trained tensors and DTensor parameters alone.

    python -m torch.distributed.run --standalone --nproc_per_node N \\
        -m shapelint.measure.parallel_host_worker OUT.json [--device cpu] [--rounds R] [--steps S]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from shapelint.measure.collectives import slowest
from shapelint.measure.timer import synchronize

#: blocks, width and tokens (batch 1) of the probe: many tensors and layers, negligible GPU work
LAYERS, WIDTH, TOKENS = 24, 64, 256
#: the layouts timed: the one-GPU step each rank runs alone, then one engine each
LAYOUTS = ("none", "ddp", "fsdp", "tp")
#: the variants: the linear layers with their biases (4 more trained tensors and 2 more
#: DTensor parameters a block) and without
VARIANTS = {"bias": True, "nobias": False}
#: rounds (each layout timed once per round, in turn), steps timed per round, warm-up steps
ROUNDS, STEPS, WARMUP = 7, 10, 3


class ProbeBlock(nn.Module):
    """A pre-norm MLP block: ``x + down_proj(gelu(up_proj(norm(x))))``."""

    def __init__(self, width: int, bias: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up_proj = nn.Linear(width, 4 * width, bias=bias)
        self.down_proj = nn.Linear(4 * width, width, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down_proj(nn.functional.gelu(self.up_proj(self.norm(x))))


class ProbeModel(nn.Module):
    """``layers`` :class:`ProbeBlock` in a ``ModuleList`` (the repeated layers FSDP2
    shards one group each), a final norm; the loss is the mean square of its output."""

    def __init__(self, layers: int = LAYERS, width: int = WIDTH, bias: bool = True) -> None:
        super().__init__()
        self.layers = nn.ModuleList(ProbeBlock(width, bias) for _ in range(layers))
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.layers:
            x = block(x)
        return self.norm(x).float().square().mean()


def probe_model(bias: bool, device: str | torch.device = "cpu") -> tuple[ProbeModel, torch.Tensor]:
    """The probe (seeded: every rank builds the same one) and its input, ``(1, TOKENS, WIDTH)``."""
    torch.manual_seed(0)
    return ProbeModel(bias=bias).to(device), torch.randn(1, TOKENS, WIDTH, device=device)


def tp_styles(model: ProbeModel) -> dict[str, str]:
    """The tensor-parallel plan the lint makes of the probe: ``up_proj`` column, ``down_proj`` row."""
    return {f"layers.{i}.{name}": style for i in range(len(model.layers))
            for name, style in (("up_proj", "column"), ("down_proj", "row"))}


def wrapped(layout: str, model: ProbeModel, device: str, world: int) -> nn.Module:
    """``model`` as ``layout`` runs it (:mod:`shapelint.measure.parallel_wrap`'s wrappers,
    the ones ``--verify --step`` measures with)."""
    from shapelint.measure.parallel_wrap import ddp, fsdp, tensor_parallel

    kind = torch.device(device).type
    if layout == "ddp":
        return ddp(model, device)
    if layout == "fsdp":
        return fsdp(model, kind, world, [f"layers.{i}" for i in range(len(model.layers))])
    if layout == "tp":
        return tensor_parallel(model, kind, world, tp_styles(model))
    return model


def trainer(layout: str, bias: bool, device: str, world: int) -> Callable[[], None]:
    """One training step of the probe under ``layout``: bf16 autocast over fp32
    parameters, AdamW (fused on a GPU), as shapelint prices a step."""
    from torch.distributed.tensor import DTensor

    model, x = probe_model(bias, device)
    module = wrapped(layout, model, device, world)
    params = [p for p in module.parameters() if p.requires_grad]
    groups = [g for g in ({"params": [p for p in params if isinstance(p, DTensor)]},
                          {"params": [p for p in params if not isinstance(p, DTensor)]}) if g["params"]]
    kind = torch.device(device).type
    cuda = kind == "cuda"
    opt = torch.optim.AdamW(groups, lr=1e-4, fused=cuda or None, foreach=None if cuda else True)

    def step() -> None:
        with torch.autocast(kind, dtype=torch.bfloat16):
            loss = module(x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def steps_ms(step: Callable[[], None], n: int, device: str) -> float:
    """ms per step of ``n`` steps issued back to back (one synchronisation at the end,
    as a training loop runs them): on a host-bound step, the host's time per step."""
    synchronize(device)
    start = time.perf_counter()
    for _ in range(n):
        step()
    synchronize(device)
    return (time.perf_counter() - start) * 1e3 / n


def probe(device: str, world: int, rounds: int = ROUNDS, steps: int = STEPS,
          log: Callable[[str], None] = lambda _msg: None) -> list[dict[str, Any]]:
    """Every variant under every layout: the median over ``rounds`` of the slowest rank's
    ms per step, and the spread (inter-quartile range over the median)."""
    import torch.distributed as dist

    out = []
    for variant, bias in VARIANTS.items():
        steps_of = {layout: trainer(layout, bias, device, world) for layout in LAYOUTS}
        for step in steps_of.values():
            for _ in range(WARMUP):
                step()
        times: dict[str, list[float]] = {layout: [] for layout in LAYOUTS}
        for _ in range(rounds):
            for layout, step in steps_of.items():
                dist.barrier()
                times[layout].append(slowest(steps_ms(step, steps, device), device))
        for layout in LAYOUTS:
            ms = statistics.median(times[layout])
            q = statistics.quantiles(times[layout], n=4) if len(times[layout]) > 1 else [ms, ms, ms]
            # what the layout added to the one-GPU step timed just before it, round by
            # round: the host's drift between rounds cancels
            added = statistics.median(t - none for t, none in zip(times[layout], times["none"]))
            out.append({"variant": variant, "layout": layout, "ms": round(ms, 3), "added_ms": round(added, 3),
                        "spread": round((q[2] - q[0]) / ms, 3)})
            log(f"parallel host probe {variant:6} {layout:5} {ms:8.2f} ms per step, {added:+8.2f} ms on one GPU's")
        del steps_of
    return out


def worker(argv: list[str] | None = None) -> int:
    import torch.distributed as dist

    from shapelint.measure.parallel_wrap import process_group, rank_zero_log, rank_zero_writes

    p = argparse.ArgumentParser(prog="shapelint.measure.parallel_host_worker")
    p.add_argument("out")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--rounds", type=int, default=ROUNDS)
    p.add_argument("--steps", type=int, default=STEPS)
    args = p.parse_args(argv)
    with process_group(args.device) as device:
        world = dist.get_world_size()
        found = probe(device, world, args.rounds, args.steps, rank_zero_log("shapelint calibrate"))
        rank_zero_writes(args.out, lambda: {
            "world": world, "gpu": torch.cuda.get_device_name(device) if device.startswith("cuda") else "CPU (gloo)",
            "torch": str(torch.__version__),
            "date": datetime.date.today().isoformat(), "rounds": args.rounds, "steps_per_round": args.steps,
            "probe": {"layers": LAYERS, "width": WIDTH, "tokens": TOKENS}, "steps": found})
    return 0


if __name__ == "__main__":
    sys.exit(worker())
