"""What Inductor's pad_mm decides for each misaligned GEMM of a compiled training step
(issue 10): the step model prices a compiled step with the GEMMs pad_mm pads itself,
and the models disagree with it (RoBERTa's and BERT's vocabulary fix measured no gain
compiled, where the model leaves their LM head's weight-gradient GEMM unpadded).

For each model (the configs of benchmarks/step_gpu_models.py, the step of
benchmarks/host_phases.py: bf16 autocast over fp32 weights, the model's own loss), this
compiles forward + backward with Inductor's caches off and records every benchmark
pad_mm runs (``is_padded_faster``: the original and padded times and the verdict, with
the operands' shapes and strides from the cache key) and whether each operand's padding
time was left out as pre-padded (``should_exclude_padding_time``).

    python benchmarks/pad_mm_decisions.py --out $OUT --models gpt2,bert,roberta
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from host_sync import build  # noqa: E402
from step_gpu_models import SECTIONS  # noqa: E402

#: model -> (batch, seq)
SHAPES = {"bert": (32, 512), "roberta": (32, 512)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="gpt2,bert,roberta")
    args = ap.parse_args()
    import torch
    import torch._inductor.config as ic
    import torch._inductor.fx_passes.pad_mm as pm
    import transformers

    ic.force_disable_caches = True
    missing = [f for f in ("is_padded_faster", "should_exclude_padding_time", "get_non_view_def",
                           "fetch_fake_tensors") if not hasattr(pm, f)]
    if missing:
        sys.exit(f"this torch's pad_mm has no {', '.join(missing)}: nothing to record")
    decisions: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    original_faster = pm.is_padded_faster
    original_exclude = pm.should_exclude_padding_time

    def is_padded_faster(key: str, ori_time: float, pad_time: float) -> bool:
        verdict = original_faster(key, ori_time, pad_time)
        decisions.append({"key": key, "ori_ms": round(ori_time, 4), "pad_ms": round(pad_time, 4), "pad": verdict})
        return verdict

    def should_exclude_padding_time(match: Any, arg_name: str) -> bool:
        verdict = original_exclude(match, arg_name)
        node = pm.get_non_view_def(match.kwargs[arg_name])
        fake = pm.fetch_fake_tensors(match, (arg_name,))[0]
        excluded.append({"arg": arg_name, "shape": list(fake.shape), "stride": list(fake.stride()),
                         "producer": str(node.target), "excluded": verdict})
        return verdict

    pm.is_padded_faster = is_padded_faster
    pm.should_exclude_padding_time = should_exclude_padding_time
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models.split(","):
        decisions.clear()
        excluded.clear()
        model, vocab = build(torch, transformers, name)
        batch, seq = SHAPES.get(name, (8, 1024))
        ids = torch.randint(0, vocab, (batch, seq), device="cuda")
        kw = {"use_cache": False} if SECTIONS[name]["auto"] == "causal" else {}
        compiled = torch.compile(model)
        t = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = compiled(input_ids=ids, labels=ids, **kw).loss
        loss.backward()
        torch.cuda.synchronize()
        graphs = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
        row = {"model": name, "batch": batch, "seq": seq, "vocab": vocab, "compile_s": round(time.perf_counter() - t, 1),
               "graphs": graphs, "decisions": list(decisions), "excluded": list(excluded)}
        rows.append(row)
        print(f"== {name} {batch}x{seq}: {graphs} graph(s), {len(decisions)} pad_mm benchmarks", flush=True)
        for d in decisions:
            print(f"   pad={d['pad']!s:5} ori {d['ori_ms']:.3f} ms pad {d['pad_ms']:.3f} ms  {d['key'][:300]}")
        for e in excluded:
            print(f"   {e['arg']} {e['shape']} stride {e['stride']} from {e['producer']}: excluded={e['excluded']}")
        (out / "pad_mm_decisions.json").write_text(json.dumps({
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "transformers": transformers.__version__, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "rows": rows}, indent=1))
        del model, compiled, loss
        torch._dynamo.reset()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
