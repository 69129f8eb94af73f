"""Wall time and peak RSS of the `shapelint` command on GPT-2 small, a Llama-7B shape
and the Llama-2-70B shape, beside torch.utils.flop_counter's FlopCounterMode on the
same models (forward + backward on fake tensors), each in a fresh process, in the same
run; then the same shapelint command again with the result cache warm (nothing
changed: replayed without importing torch), and a directory of 10 GPT-2-sized
configs, cold, with --jobs 1 and on worker processes over the available cores.

    python benchmarks/lint_speed.py [--out benchmarks/results/lint_speed.json]

shapelint runs as users run it, ``python -m shapelint`` (the console command: the lint
runs in a forked child that ends with ``os._exit``, so the interpreter's teardown of
torch is not paid). FlopCounterMode runs twice: as a script that ends normally (what
its user waits for, interpreter teardown included: 0.5-0.9 s of torch's) and *lean*,
ending with ``os._exit`` after it has printed its result. The ratio is taken against
each. Peak RSS is the process tree's (``os.wait4``: the largest of the process and the
children it waited for).

Each number is the median of --repeat fresh processes (default 3): single runs on
this machine vary by 10-15%. Cold runs pass --no-cache. Targets: shapelint at most
0.8x FlopCounterMode's wall time (70B: 0.6x), peak RSS under 600 MiB, a cached
re-run under 0.5 s.
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

SHAPELINT = ["-m", "shapelint"]

FLOPCOUNTER = """
import json, sys
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
print(json.dumps({"flops": counter.get_total_flops()}), file=sys.stderr, flush=True)
if sys.argv[4:] == ["lean"]:
    import os
    os._exit(0)
"""


def timed(argv: list[str], repeat: int) -> dict:
    """The median wall time (and its peak RSS) over ``repeat`` fresh processes, after one
    untimed run (it writes the bytecode an installed package has, and warms the page cache)."""
    once(argv)
    runs = sorted((once(argv) for _ in range(repeat)), key=lambda r: r["wall_s"])
    return {**runs[len(runs) // 2], "walls_s": [r["wall_s"] for r in runs]}


#: every process runs with bytecode caching on, as an installed package does (this
#: machine's shell sets PYTHONDONTWRITEBYTECODE, which would recompile shapelint's 60
#: modules, about 0.1 s, on every run, and none of torch's, compiled at install)
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONWARNINGS": "ignore"}


def once(argv: list[str]) -> dict:
    """One fresh process: its wall time, exit code and the peak RSS of its process tree."""
    t = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err,
                                env=ENV)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    if proc.returncode not in (0, 1):  # 1: findings
        raise RuntimeError(f"{argv[:5]} exited {proc.returncode}:\n{stderr[-2000:]}")
    return {"wall_s": round(wall, 2), "rc": proc.returncode, "rss_mib": round(usage.ru_maxrss / 1024)}


def directory(tmp: Path, repeat: int) -> dict:
    """10 GPT-2-sized configs (widths 768 to 1200, 12 heads), cold, one process vs all cores."""
    folder = tmp / "configs"
    base = MODELS["gpt2-small"][0]
    for i in range(10):
        (folder / f"m{i}").mkdir(parents=True)
        (folder / f"m{i}" / "config.json").write_text(json.dumps({**base, "n_embd": 768 + 48 * i}))
    argv = [sys.executable, *SHAPELINT, str(folder), "--batch", "8", "--seq", "1024", "--gpu", "h100",
            "--format", "json", "-o", os.devnull, "--no-cache"]
    return {"configs": 10, "one_process": timed([*argv, "--jobs", "1"], repeat), "workers": timed(argv, repeat)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "lint_speed.json"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per measurement (median)")
    ap.add_argument("--no-directory", dest="directory", action="store_false", help="skip the 10-config directory")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            cfg, batch, seq = MODELS[name]
            path = Path(tmp) / name / "config.json"
            path.parent.mkdir()
            path.write_text(json.dumps(cfg))
            cmd = [sys.executable, *SHAPELINT, str(path), "--batch", str(batch), "--seq", str(seq),
                   "--gpu", "h100", "--format", "json", "-o", os.devnull, "--cache-dir", str(Path(tmp) / "cache")]
            sl = timed([*cmd, "--no-cache"], args.repeat)
            fc = timed([sys.executable, "-c", FLOPCOUNTER, str(path), str(batch), str(seq)], args.repeat)
            lean = timed([sys.executable, "-c", FLOPCOUNTER, str(path), str(batch), str(seq), "lean"], args.repeat)
            warm = timed(cmd, args.repeat)  # its untimed first run fills the cache
            rows.append({"model": name, "tokens": batch * seq, "shapelint": sl, "flopcounter": fc,
                         "flopcounter_lean": lean, "cached": warm, "ratio": round(sl["wall_s"] / fc["wall_s"], 2),
                         "ratio_lean": round(sl["wall_s"] / lean["wall_s"], 2)})
            print(f"{name:12} tokens {batch * seq:5}  shapelint {sl['wall_s']:6.2f} s {sl['rss_mib']:6.0f} MiB   "
                  f"FlopCounterMode {fc['wall_s']:6.2f} s (lean {lean['wall_s']:.2f} s) {fc['rss_mib']:6.0f} MiB   "
                  f"cached {warm['wall_s']:.2f} s", flush=True)
        many = directory(Path(tmp), args.repeat) if args.directory else None
    doc = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
           "method": "shapelint: python -m shapelint (forked lint child); FlopCounterMode: a script ending "
                     "normally, and lean (os._exit after its result); RSS: os.wait4 of the process tree",
           "python": platform.python_version(), "rows": rows, "directory": many}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print("\n| model | tokens | shapelint cold | peak RSS | FlopCounterMode | lean | peak RSS | ratio | ratio (lean) "
          "| shapelint cached |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        s, f, lean, c = r["shapelint"], r["flopcounter"], r["flopcounter_lean"], r["cached"]
        print(f"| {r['model']} | {r['tokens']} | {s['wall_s']:.2f} s | {s['rss_mib']:.0f} MiB | {f['wall_s']:.2f} s | "
              f"{lean['wall_s']:.2f} s | {f['rss_mib']:.0f} MiB | {r['ratio']:.2f}x | {r['ratio_lean']:.2f}x | "
              f"{c['wall_s']:.2f} s |")
    if many:
        print(f"\n10 configs, cold: one process {many['one_process']['wall_s']:.1f} s, "
              f"{os.cpu_count()} worker processes {many['workers']['wall_s']:.1f} s")


if __name__ == "__main__":
    main()
