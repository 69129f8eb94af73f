#!/usr/bin/env python3
"""The measured effect of the parallel-shape findings against shapelint's estimate:
SL602 (tensor parallelism that does not divide the heads) and SL603 (FSDP2 groups of
one block each).

    # on a machine with 2 GPUs (about 2 minutes): measure, then estimate and compare
    torchrun --standalone --nproc_per_node 2 benchmarks/parallel_findings.py --measure
    # anywhere: compare with a measurement already on disk
    python benchmarks/parallel_findings.py --from parallel_findings_bench.json

Steps are ``multi_gpu_step.py``'s (eager, fp32 parameters, bf16 autocast, the model's
own loss, fused AdamW; the slower rank's median, each layout alternating with the
one-GPU step in blocks). Pairs:

- **SL602**: an OPT decoder with GPT-2 XL's widths (hidden 1600, FFN 6400, 12 layers)
  at TP 2 (DTensor with ``PrepareModuleInput``, Megatron's count): 25 heads, which 2 does
  not divide, the attention left whole on both GPUs (``tp_whole_attn``: only the MLP
  sharded, what shapelint assumes), against 20 heads of 80 with the attention sharded
  too (``tp_pmi``): SL602's suggestion. At 8 × 1024 tokens per GPU the estimate says the
  step is host-bound and sharding the attention costs more DTensor host work than it
  saves (no finding: 117 against 193 ms); at 32 × 1024 it is GPU-bound and SL602
  saves 6.3 ms (211 against 204 ms).
- **SL603**: GPT-2 small, 1 × 1024 tokens per GPU, FSDP2 over 2 GPUs with one block per
  ``fully_shard`` group (``fsdp``) against 2, 4 and 6 blocks per group (``fsdp_k2``, ...:
  ``fully_shard(blocks[i:i + k])``).

Rank 0 prints the table and writes ``$OUT/parallel_findings.json`` (measured and
estimated, ms).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: (model, its layouts); ``none`` (one GPU) is measured beside each
PLAN = [("opt_h25", ["tp_whole_attn"]), ("opt_h20", ["tp_pmi"]), ("opt_h25_b32", ["tp_whole_attn"]),
        ("opt_h20_b32", ["tp_pmi"]), ("gpt2_b1", ["fsdp", "fsdp_k2", "fsdp_k4", "fsdp_k6"])]
#: GPT-2 XL's widths on OPT's decoder (DTensor styles need nn.Linear), at two head counts
WIDE = {"hidden_size": 1600, "ffn_dim": 6400, "num_hidden_layers": 12, "word_embed_proj_dim": 1600}


def register() -> None:
    """Teach multi_gpu_step.py the models and layouts above (its own are unchanged)."""
    import multi_gpu_step as bench

    if "opt_h25" in bench.MODELS:
        return
    bench.MODELS.update({"opt_h25": ("opt", 8, 1024), "opt_h20": ("opt", 8, 1024), "opt_h25_b32": ("opt", 32, 1024),
                         "opt_h20_b32": ("opt", 32, 1024), "gpt2_b1": ("gpt2", 1, 1024)})
    config, wrap = bench.make_config, bench.wrap

    def make_config(name: str, smoke: bool):  # type: ignore[no-untyped-def]
        if name == "gpt2_b1":
            return config("gpt2", smoke)
        if not name.startswith(("opt_h25", "opt_h20")):
            return config(name, smoke)
        cfg = config("opt125m", smoke)
        if not smoke:
            for key, value in WIDE.items():
                setattr(cfg, key, value)
        cfg.num_attention_heads = (25 if name.startswith("opt_h25") else 20) if not smoke else 4
        return cfg

    def wrap_more(mode: str, model, family: str, device, world: int):  # type: ignore[no-untyped-def]
        if mode.startswith("fsdp_k"):
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            k = int(mode.removeprefix("fsdp_k"))
            mesh = init_device_mesh(device.type, (world,))
            blocks = bench.blocks_of(model, family)
            for i in range(0, len(blocks), k):
                fully_shard(blocks[i:i + k], mesh=mesh)
            fully_shard(model, mesh=mesh)
            return model, {"blocks_per_group": k}
        if mode == "tp_whole_attn":  # the MLP sharded, the attention whole on every rank
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

            mesh = init_device_mesh(device.type, (world,))
            plan = {}
            for i in range(model.config.num_hidden_layers):
                p = f"model.decoder.layers.{i}."
                plan[p + "fc1"], plan[p + "fc2"] = ColwiseParallel(), RowwiseParallel()
            parallelize_module(model, mesh, plan)
            return model, {}
        return wrap(mode, model, family, device, world)

    bench.make_config, bench.wrap = make_config, wrap_more
    bench.ALL_MODES += ["tp_whole_attn", "fsdp_k2", "fsdp_k4", "fsdp_k6"]


def measure(args: argparse.Namespace) -> list[dict] | None:
    """Every pair of PLAN (rank 0 gets the steps; other ranks None)."""
    import multi_gpu_step as bench
    import torch
    import torch.distributed as dist

    register()
    device, rank, world = bench.init_ranks(torch.cuda.is_available())
    steps: list[dict] = []
    for name, modes in PLAN:
        steps += bench.bench_model(name, ["none", *modes], args, device, world, rank)
    dist.barrier()
    dist.destroy_process_group()
    return steps if rank == 0 else None


def estimate(steps: list[dict], gpu: str) -> list[dict]:
    """shapelint's step for each measured (model, layout), and the findings' savings."""
    import multi_gpu_step as bench

    from shapelint.app.api import lint_target
    from shapelint.model.parallel import ParallelChange
    from shapelint.model.records import Finding

    register()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for s in steps:
            if "error" in s or s["mode"] == "none":
                continue
            name, mode = s["model"], s["mode"]
            folder = Path(tmp) / name
            if not (folder / "config.json").exists():
                bench.make_config(name, False).save_pretrained(folder)
            layout = {"tp": 2} if mode.startswith("tp") else {"fsdp": 2}
            r = lint_target(folder / "config.json", gpu=gpu, batch=s["batch_per_gpu"], seq=s["seq"], **layout).result
            model = r.step_model
            assert model is not None and r.step_time is not None
            est = r.step_time.ms
            k = int(mode.removeprefix("fsdp_k")) if mode.startswith("fsdp_k") else 1
            if k > 1:  # the step with k blocks per group, as the step model prices SL603's change
                grouped = Finding("SL603", "fsdp-groups-too-small", "warning", "", "", (), 0.0, 0.0,
                                  parallel=ParallelChange(fsdp_blocks_per_group=k))
                est = model.after([grouped]).ms
            found = {f.code: {"to": f.suggestion.to if f.suggestion else None, "step_ms_saved": f.step_ms_saved}
                     for f in r.findings if f.code in ("SL602", "SL603")}
            rows.append({"model": name, "mode": mode, "measured_ms": s["step_ms"], "measured_one_gpu_ms": s["baseline_ms"],
                         "est_ms": est, "error": est / s["step_ms"] - 1, "findings": found})
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="source", help="a JSON this script wrote (no GPU needed)")
    p.add_argument("--measure", action="store_true", help="measure now (under torchrun, 2 GPUs)")
    p.add_argument("--gpu", default="h100")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--smoke", action="store_true", help="tiny models (CPU/gloo)")
    p.add_argument("--out", default=os.environ.get("OUT", str(Path(__file__).resolve().parent / "results")))
    args = p.parse_args()
    args.batch = args.seq = 0
    from multi_gpu_estimate import steps_of, use_this_checkout

    use_this_checkout()
    steps = steps_of(p, args, lambda: measure(args))
    if steps is None:
        return 0
    rows = estimate(steps, args.gpu) if not args.smoke else []
    print(f"{'model':8} {'layout':14} {'measured':>9} {'estimated':>9} {'error':>7}  findings")
    for r in rows:
        print(f"{r['model']:8} {r['mode']:14} {r['measured_ms']:9.1f} {r['est_ms']:9.1f} {100 * r['error']:+6.1f}%  "
              f"{json.dumps(r['findings'])}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "parallel_findings.json").write_text(json.dumps({"steps": steps, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
