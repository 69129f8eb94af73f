"""Host time of a training step by phase, on a GPU that keeps up (issue 10).

The step model's host time (what the CPU spends issuing a step) was one number per
kernel, but a forward kernel is issued from Python (module calls, the model's own code,
the dispatcher, autograd recording) and a backward kernel from autograd's C++ engine.
This measures each phase on its own, for each model of benchmarks/step_gpu_models.py
(its published config, bf16 autocast over fp32 weights, the model's own loss, fused
AdamW): the GPU starts idle (synchronize), ``perf_counter`` around the phase's call, no
synchronisation after it:

- ``forward``: the autocast forward with the loss;
- ``backward``: ``loss.backward()``;
- ``optimizer``: ``opt.step()`` and ``opt.zero_grad(set_to_none=True)``;
- ``step``: the three back to back (does the host time add up?).

The batch is small (default 2 x 256) so that the GPU runs each kernel faster than the
host issues the next one: what is timed is the host. Median of ``--reps`` per phase,
after warm-up; with ``--compile`` the forward is ``torch.compile(model)`` (the optimizer
stays eager, as in the step measurements).

    python benchmarks/host_phases.py --out $OUT [--models gpt2,smollm] [--compile]

Writes host_phases.json (and a table on stdout). The kernel counts the step model gives
each phase come from the CPU side: benchmarks/host_fit.py joins them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from host_sync import build  # noqa: E402
from step_gpu_models import SECTIONS  # noqa: E402

PHASES = ("forward", "backward", "optimizer", "step")
#: ``MODEL+nodrop``: the model with every dropout probability of its config set to 0
NO_DROPOUT = "+nodrop"


def measure(torch: Any, transformers: Any, name: str, batch: int, seq: int, compiled: bool,
            reps: int) -> dict[str, Any]:
    section = name.removesuffix(NO_DROPOUT)
    model, _ = build(torch, transformers, section, no_dropout=name.endswith(NO_DROPOUT))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    torch.manual_seed(1234)
    ids = torch.randint(0, int(SECTIONS[section]["base_vocab"]), (batch, seq), device="cuda")
    kw = {"use_cache": False} if SECTIONS[section]["auto"] == "causal" else {}
    forward_model = torch.compile(model) if compiled else model

    def forward() -> Any:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return forward_model(input_ids=ids, labels=ids, **kw).loss

    def optimizer() -> None:
        opt.step()
        opt.zero_grad(set_to_none=True)

    if compiled:
        torch._dynamo.utils.counters.clear()
    t0 = time.perf_counter()
    for _ in range(3):
        forward().backward()
        optimizer()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    times: dict[str, list[float]] = {p: [] for p in PHASES}

    def timed(phase: str, fn: Any) -> Any:
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = fn()
        times[phase].append((time.perf_counter() - t) * 1e3)
        return out

    for _ in range(reps):
        loss = timed("forward", forward)
        timed("backward", loss.backward)
        timed("optimizer", optimizer)
        timed("step", lambda: (forward().backward(), optimizer()))
    torch.cuda.synchronize()
    row: dict[str, Any] = {"model": name, "mode": "compile" if compiled else "eager", "batch": batch,
                           "seq": seq, "warm_s": round(warm_s, 1),
                           "graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"] if compiled else None,
                           **{f"{p}_ms": round(statistics.median(times[p]), 3) for p in PHASES},
                           "all": {p: [round(x, 3) for x in times[p]] for p in PHASES}}
    torch.cuda.empty_cache()
    if compiled:
        torch._dynamo.reset()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=",".join(SECTIONS),
                    help=f"sections of step_gpu_models.py; NAME{NO_DROPOUT}: with its dropout off")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--compile", action="store_true", help="also the compiled forward, per model")
    ap.add_argument("--budget-s", type=float, default=540.0, help="stop starting models after this")
    args = ap.parse_args()
    import torch
    import transformers

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    modes = (False, True) if args.compile else (False,)
    print(f"{'model':10} {'mode':8} {'forward':>8} {'backward':>8} {'optim':>7} {'step':>8}  ms of host time")
    for compiled in modes:
        for section in args.models.split(","):
            if time.perf_counter() - start > args.budget_s:
                skipped.append(f"{section}/{'compile' if compiled else 'eager'}")
                continue
            row = measure(torch, transformers, section, args.batch, args.seq, compiled, args.reps)
            rows.append(row)
            print(f"{row['model']:10} {row['mode']:8} {row['forward_ms']:8.2f} {row['backward_ms']:8.2f} "
                  f"{row['optimizer_ms']:7.2f} {row['step_ms']:8.2f}", flush=True)
            (out / "host_phases.json").write_text(json.dumps({
                "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                "transformers": transformers.__version__, "date": time.strftime("%Y-%m-%d"),
                "argv": sys.argv[1:], "rows": rows, "skipped": skipped}, indent=1))
    if skipped:
        print("skipped (budget):", ", ".join(skipped))


if __name__ == "__main__":
    main()
