"""Where a host-bound eager step's time goes: the host's issue rate inside a real
training loop, and what a synchronising call inside the step costs (issue 10).

For each model (the configs of benchmarks/step_gpu_models.py, bf16 autocast over fp32
weights, the model's own loss, fused AdamW, batch 8 x 1024) and each variant:

- ``as_is``: the step as transformers runs it. transformers >= 5 checks, in every causal
  LM forward without an attention mask, whether the position ids describe packed
  sequences (``masking_utils.find_packed_sequence_indices``: ``(...).all()`` read on the
  host), a device-to-host synchronisation in the forward;
- ``no_mask_sync``: the same step with that check answered "not packed" (what it answers
  for these inputs) without reading the GPU.

Measured per variant, in alternating blocks: the step (CUDA events around every step, no
synchronisation inside a block), the host time inside the loop (``perf_counter`` around
each ``step()`` call), the host time of a step issued onto an idle GPU (synchronize, then
``perf_counter`` around ``step()``), the kernels of one profiled step, and the stack of
every synchronising call of one step (``torch.cuda.set_sync_debug_mode("warn")``).

    python benchmarks/host_sync.py --out $OUT --models smollm,gpt2
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

from step_gpu import sync_stacks  # noqa: E402
from step_gpu_models import SECTIONS  # noqa: E402

VARIANTS = ("as_is", "no_mask_sync")


def build(torch: Any, transformers: Any, section: str, no_dropout: bool = False) -> tuple[Any, int]:
    """The section's model on the GPU (fp32 weights, training mode), and its vocabulary;
    ``no_dropout``: every dropout probability of its config set to 0."""
    spec = SECTIONS[section]
    config = transformers.AutoConfig.for_model(**spec["config"])
    if no_dropout:
        for key, value in config.to_dict().items():
            if "drop" in key and isinstance(value, float):
                setattr(config, key, 0.0)
    auto = transformers.AutoModelForMaskedLM if spec["auto"] == "masked" else transformers.AutoModelForCausalLM
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = auto.from_config(config, attn_implementation="sdpa")
    return model.float().cuda().train(), int(spec["base_vocab"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="smollm,gpt2")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    import torch
    import transformers
    import transformers.masking_utils as mu
    from torch.profiler import ProfilerActivity, profile

    original = mu.find_packed_sequence_indices
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    for name in args.models.split(","):
        model, vocab = build(torch, transformers, name)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        torch.manual_seed(1234)
        ids = torch.randint(0, vocab, (8, 1024), device="cuda")
        kw = {"use_cache": False} if SECTIONS[name]["auto"] == "causal" else {}

        def step() -> None:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids, **kw).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        def use(variant: str) -> None:
            mu.find_packed_sequence_indices = original if variant == "as_is" else (lambda position_ids: None)

        per: dict[str, dict[str, list[float]]] = {v: {"step": [], "host_loop": [], "host_idle": []} for v in VARIANTS}
        info: dict[str, dict[str, Any]] = {v: {} for v in VARIANTS}
        for v in VARIANTS:
            use(v)
            for _ in range(4):
                step()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                step()
                torch.cuda.synchronize()
            gpu = [e for e in prof.events() if e.device_time > 0]
            info[v]["kernels"] = len(gpu)
            info[v]["kernel_ms"] = round(sum(e.device_time for e in gpu) / 1e3, 3)
            info[v]["syncs"] = sync_stacks(torch, step)
        for _ in range(args.blocks):
            for v in VARIANTS:
                use(v)
                torch.cuda.synchronize()
                for _ in range(args.steps):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    t = time.perf_counter()
                    step()
                    per[v]["host_loop"].append((time.perf_counter() - t) * 1e3)
                    b.record()
                    per[v]["step"].append((a, b))  # type: ignore[arg-type]
                torch.cuda.synchronize()
                per[v]["step"] = [x if isinstance(x, float) else x[0].elapsed_time(x[1]) for x in per[v]["step"]]
                for _ in range(2):
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    step()
                    per[v]["host_idle"].append((time.perf_counter() - t) * 1e3)
                torch.cuda.synchronize()
        for v in VARIANTS:
            row = {"model": name, "variant": v, **info[v],
                   **{f"{k}_ms": round(statistics.median(x), 2) for k, x in per[v].items()},
                   "all": {k: [round(y, 2) for y in x] for k, x in per[v].items()}}
            row["host_us_per_kernel_idle"] = round(1e3 * row["host_idle_ms"] / row["kernels"], 1)
            results.append(row)
            print(f"{name:8} {v:13} step {row['step_ms']:7.1f} host(loop) {row['host_loop_ms']:7.1f} "
                  f"host(idle) {row['host_idle_ms']:7.1f} kernels {row['kernels']} ({row['kernel_ms']} ms) "
                  f"syncs {len(row['syncs'])}", flush=True)
            for s in row["syncs"]:
                print("     sync at", " <- ".join(reversed(s[-2:])), flush=True)
        use("as_is")
        (out / "host_sync.json").write_text(json.dumps({
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "transformers": transformers.__version__, "date": time.strftime("%Y-%m-%d"), "results": results}, indent=1))
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
