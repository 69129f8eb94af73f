"""Wall time and peak RSS of `shapelint` (import included) on GPT-2 small, a
Llama-7B shape and the Llama-2-70B shape, beside torch.utils.flop_counter's
FlopCounterMode on the same models (forward + backward on fake tensors), each
in a fresh process, in the same run.

    python benchmarks/lint_speed.py [--out benchmarks/results/lint_speed.json]

Each number is the median of --repeat fresh processes (default 3): single runs on
this machine vary by 10-15%. Targets: shapelint no slower than FlopCounterMode;
70B under 15 s and 600 MiB peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = {
    "gpt2-small": ({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 12, "n_embd": 768,
                    "n_head": 12, "vocab_size": 50257, "n_positions": 1024}, 8, 1024),
    "llama-7b": ({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
                  "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
                  "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096}, 1, 4096),
    "llama-2-70b": ({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 8192,
                     "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
                     "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096}, 1, 4096),
}

SHAPELINT = """
import json, resource, sys, time
t = time.time()
from shapelint.cli import main
code = main(sys.argv[1:])
print(json.dumps({"rc": code, "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), file=sys.stderr)
"""

FLOPCOUNTER = """
import json, resource, sys
import torch, transformers
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode
cfg = json.load(open(sys.argv[1]))
batch, seq = int(sys.argv[2]), int(sys.argv[3])
config = transformers.AutoConfig.for_model(**cfg)
with FakeTensorMode(allow_non_fake_inputs=True), torch.device("cpu"):
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.bfloat16)
    ids = torch.randint(0, cfg["vocab_size"], (batch, seq))
    counter = FlopCounterMode(display=False)
    with counter:
        logits = model(input_ids=ids, use_cache=False).logits
        logits.backward(torch.ones_like(logits))
print(json.dumps({"flops": counter.get_total_flops(),
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), file=sys.stderr)
"""


def timed(argv: list[str], repeat: int) -> dict:
    """The median wall time (and its peak RSS) over ``repeat`` fresh processes."""
    runs = sorted((once(argv) for _ in range(repeat)), key=lambda r: r["wall_s"])
    return {**runs[len(runs) // 2], "walls_s": [r["wall_s"] for r in runs]}


def once(argv: list[str]) -> dict:
    t = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    wall = time.perf_counter() - t
    last = [line for line in proc.stderr.splitlines() if line.startswith("{")]
    if not last:
        raise RuntimeError(f"{argv[:4]} failed:\n{proc.stderr[-2000:]}")
    return {"wall_s": round(wall, 2), **json.loads(last[-1])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "lint_speed.json"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per measurement (median)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            cfg, batch, seq = MODELS[name]
            path = Path(tmp) / name / "config.json"
            path.parent.mkdir()
            path.write_text(json.dumps(cfg))
            sl = timed([sys.executable, "-c", SHAPELINT, str(path), "--batch", str(batch), "--seq", str(seq),
                        "--gpu", "h100", "--format", "json", "-o", os.devnull], args.repeat)
            fc = timed([sys.executable, "-c", FLOPCOUNTER, str(path), str(batch), str(seq)], args.repeat)
            rows.append({"model": name, "tokens": batch * seq, "shapelint": sl, "flopcounter": fc})
            print(f"{name:12} tokens {batch * seq:5}  shapelint {sl['wall_s']:6.2f} s {sl['rss_mib']:6.0f} MiB   "
                  f"FlopCounterMode {fc['wall_s']:6.2f} s {fc['rss_mib']:6.0f} MiB", flush=True)
    doc = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
           "python": platform.python_version(), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print("\n| model | tokens | shapelint wall | shapelint peak RSS | FlopCounterMode wall | FlopCounterMode peak RSS |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        s, f = r["shapelint"], r["flopcounter"]
        print(f"| {r['model']} | {r['tokens']} | {s['wall_s']:.1f} s | {s['rss_mib']:.0f} MiB | "
              f"{f['wall_s']:.1f} s | {f['rss_mib']:.0f} MiB |")


if __name__ == "__main__":
    main()
