"""Ground truth for a whole-training-step cost model (issue 10), measured on a real GPU.

Imports only torch, transformers, (optionally) triton, the standard library and its sibling
benchmarks/step_gpu_models.py (pure data). Never imports shapelint.

The training step (shapelint's documented default): a Hugging Face model built from its config
with random weights (AutoConfig.for_model, AutoModelForCausalLM / AutoModelForMaskedLM.from_config,
attn_implementation="sdpa"), fp32 weights on the GPU, train() mode (the configs' dropout on),
forward under torch.autocast(bfloat16), the model's own LM/MLM loss with labels = input_ids
(random ids, fixed seed, the same tensor for every variant; use_cache=False), backward,
torch.optim.AdamW(fused=True).step(), zero_grad(set_to_none=True).

Per group (variants of one model, one mode, one batch x seq): warm-up, then variants timed in
alternating blocks (A B C A B C ...), CUDA events around every step with no synchronisation
inside a block; per variant one profiled step (torch.profiler, CPU+CUDA activities: summed
kernel time, GEMM-kernel time, kernel count, launch API calls), the host time to issue one
step (synchronise, perf_counter around step(), no sync at the end) and the number of
synchronising calls in one step (torch.cuda.set_sync_debug_mode).

Micro-measurements: achieved bandwidth of elementwise ops, reductions and the sliced-logits copy,
kernel launch overhead (eager loop vs CUDA graph vs a compiled call), and F.linear GEMM
alignment classes (triton.testing.do_bench, median, L2 flushed by do_bench).

    PYTHONUNBUFFERED=1 python3 benchmarks/step_gpu.py --out $OUT --groups run1 --budget-s 540
    python3 benchmarks/step_gpu.py --device cpu --tiny --groups gpt2_eager,micro --out /tmp/x
    python3 benchmarks/step_gpu.py --merge a.json b.json --merge-out all.json   # no torch needed
    python3 benchmarks/step_gpu.py --table all.json                             # print the tables

Every record is written to OUT/step_gpu.json as soon as it exists (a timeout keeps what was
done); the table is printed last.
"""

# The lambdas timed in loops run at once, inside the loop body (B023 does not apply).
# ruff: noqa: B023
from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_gpu_models import GROUPS, RUN1, RUN2, RUN3, SECTIONS, tiny

SCHEMA = "shapelint.step_gpu/1"
MICRO_PARTS = {"micro": ("bandwidth", "launch", "gemm"), "micro_launch": ("launch",),
               "micro_rest": ("bandwidth", "gemm")}

# kernel classifier (applied to the lower-cased kernel name, first match wins): Inductor's
# triton_* kernels first (before 2026-11-23's runs were classified, "triton_poi_fused_mm_view"
# pad copies matched "_mm_" and counted as GEMM: see docs/step-measurements.md), then attention
# (cuDNN/flash/cutlass-fmha attention kernels also contain "sm90"/"cutlass"), then GEMM
ATTN_PAT = ("flash", "fmha", "sdpa", "attention", "attn", "cudnn_generated")
GEMM_PAT = ("gemm", "nvjet", "cutlass", "cublas", "sm90_xmma", "sm80_xmma", "xmma", "matmul",
            "s1688", "s16816", "wgmma", "_mm_", "splitk")
OPT_PAT = ("multi_tensor", "fused_adam", "adam")


def classify(name: str, cat: str) -> str:
    n = name.lower()
    if cat == "gpu_memcpy":
        return "memcpy"
    if cat == "gpu_memset":
        return "memset"
    if n.startswith("triton_"):  # Inductor: triton_tem = GEMM template (max-autotune only)
        if n.startswith("triton_tem"):
            return "gemm"
        if n.startswith(("triton_red", "triton_per")):
            return "triton_reduction"
        return "triton_pointwise"
    if any(p in n for p in ATTN_PAT):
        return "attention"
    if any(p in n for p in GEMM_PAT):
        return "gemm"
    if any(p in n for p in OPT_PAT):
        return "optimizer"
    if any(p in n for p in ("softmax", "norm", "reduce", "cross_entropy", "nll", "loss",
                            "welford", "cunn_")):
        return "reduction"
    if any(p in n for p in ("elementwise", "vectorized", "unrolled", "copy", "fill", "index",
                            "cat", "dropout", "gelu", "silu", "embedding")):
        return "elementwise"
    return "other"


# --- small helpers --------------------------------------------------------------------------------

T0 = time.monotonic()


def log(*a) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s]", *a, flush=True)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def rnd(x, n=4):
    return None if x is None else round(float(x), n)


class Results:
    def __init__(self, path: Path, env: dict, argv: list[str]):
        self.path = path
        self.doc = {"schema": SCHEMA, "env": env, "argv": argv, "method": METHOD,
                    "kernel_classifier": {"attention": ATTN_PAT, "gemm": GEMM_PAT,
                                          "optimizer": OPT_PAT,
                                          "note": "lower-cased kernel name, first match wins: "
                                                  "triton_tem -> gemm, triton_red/triton_per -> "
                                                  "triton_reduction, other triton_ -> triton_pointwise; "
                                                  "then attention, gemm, optimizer patterns"},
                    "records": [], "skipped": [], "errors": []}
        self.flush()

    def add(self, rec: dict) -> None:
        self.doc["records"].append(rec)
        self.flush()

    def note(self, key: str, item) -> None:
        self.doc[key].append(item)
        self.flush()

    def flush(self) -> None:
        self.doc["elapsed_s"] = round(time.monotonic() - T0, 1)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1))
        os.replace(tmp, self.path)


METHOD = {
    "step": "HF model from config, random weights, fp32 params, train(); autocast bf16 forward; "
            "loss = model's own LM/MLM loss (labels=input_ids, use_cache=False) or, for 'slice' "
            "variants, lm_head(base_model(ids))[..., :base_vocab] -> model.loss_function; backward; "
            "AdamW(lr=1e-4, fused=True).step(); zero_grad(set_to_none=True)",
    "data": "torch.randint(0, base_vocab, (batch, seq)) with torch.manual_seed(1234): the same "
            "tensor for every variant of a group",
    "timing": "per group: warm-up per variant, then `blocks` rounds, each running every variant "
              "for `steps_per_block` steps in turn (A B C A B C ...). CUDA event pairs around every "
              "step, no synchronisation inside a block (the CPU may run ahead as in a real loop). "
              "step_ms_median = median of all per-step event times; step_ms_blocks = mean ms/step "
              "of each block (first start event to last end event / steps)",
    "compile": "torch.compile(wrapper, dynamic=False) in the default mode, over a wrapper module "
               "that returns the loss (optimizer not compiled); dynamo reset between sections; "
               "compile_s = wall time of the first step (forward + backward compilation)",
    "profile": "one step per variant under torch.profiler (CPU+CUDA activities) after a warm "
               "step; chrome trace parsed: kernel_ms = sum of 'kernel' events, gpu_ops_ms adds "
               "memcpy/memset, gemm_kernel_ms = kernels classified gemm, kernels = number of "
               "'kernel' events, launch_calls = runtime/driver API launch calls",
    "cpu_ms": "host time to issue one step: synchronize, perf_counter around step() (no sync "
              "after), median of 5; cpu_sync_ms adds the final synchronize. A step with hidden "
              "synchronising calls (sync_points > 0) blocks the host inside step()",
    "micro": "triton.testing.do_bench (median, its L2 flush between reps); bandwidth counts "
             "bytes read + written once each",
}


def sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False).stdout.strip()
    except Exception as e:
        return f"error: {e}"


def gpu_state() -> str:
    q = "--query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu,memory.used"
    return sh(["nvidia-smi", q, "--format=csv,noheader"])


# --- environment ----------------------------------------------------------------------------------

def environment(torch, transformers, device: str) -> dict:
    env = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(), "python": sys.version.split()[0], "platform": platform.platform(),
        "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
        "cpu_count": os.cpu_count(), "device": device,
    }
    try:
        import triton
        env["triton"] = triton.__version__
    except Exception:
        env["triton"] = None
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=p.name, sm_count=p.multi_processor_count,
                   gpu_mem_gib=round(p.total_memory / 2**30, 1),
                   l2_mib=round(getattr(p, "L2_cache_size", 0) / 2**20, 1),
                   cudnn=torch.backends.cudnn.version(),
                   nvidia_smi=sh(["nvidia-smi", ("--query-gpu=name,driver_version,clocks.max.sm,"
                                                 "clocks.max.mem,power.limit,pstate"), "--format=csv"]),
                   gpu_state_start=gpu_state())
        m = re.search(r"\n[^,]*,\s*([\d.]+)", env["nvidia_smi"])
        env["driver"] = m.group(1) if m else None
        try:
            import torch._inductor.config as ic
            env["inductor"] = {"shape_padding": ic.shape_padding,
                               "force_shape_pad": getattr(ic, "force_shape_pad", None),
                               "max_autotune": ic.max_autotune,
                               "compile_threads": getattr(ic, "compile_threads", None)}
        except Exception as e:
            env["inductor"] = f"error: {e}"
        env["allow_tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
    return env


# --- the training step ----------------------------------------------------------------------------

def build_model(torch, transformers, section: str, variant: str, device: str, is_tiny: bool):
    spec = SECTIONS[section]
    overrides, loss_mode = spec["variants"][variant]
    overrides = dict(overrides)
    forced_breaks = int(overrides.pop("_graph_breaks", 0))
    cfg = dict(spec["config"])
    cfg.update(overrides)
    if is_tiny:
        cfg = tiny(section, cfg)
    config = transformers.AutoConfig.for_model(**cfg)
    auto = {"masked": transformers.AutoModelForMaskedLM, "seq2seq": transformers.AutoModelForSeq2SeqLM,
            "causal": transformers.AutoModelForCausalLM}[spec["auto"]]
    torch.manual_seed(0)
    # SDPA where transformers has it for the class, else its eager attention (MPNet), as
    # shapelint.load.hf_model.hf_model builds it
    attn = "sdpa" if getattr(auto._model_mapping[type(config)], "_supports_sdpa", True) else "eager"
    try:
        with torch.device(device):
            model = auto.from_config(config, attn_implementation=attn)
    except Exception as e:
        log(f"  build on {device} failed ({e!r}); building on CPU and moving")
        model = auto.from_config(config, attn_implementation=attn).to(device)
    model = model.float().to(device).train()
    if forced_breaks:
        force_graph_breaks(torch, model, forced_breaks)
    info = {"config": cfg, "loss_mode": loss_mode, "forced_graph_breaks": forced_breaks,
            "attn_implementation": getattr(model.config, "_attn_implementation", None),
            "params": sum(p.numel() for p in model.parameters()),
            "model_class": type(model).__name__}
    return model, info


def force_graph_breaks(torch, model, n: int) -> None:
    """A dynamo graph break before ``n`` of the model's layers, evenly spread (a forward
    pre-hook calling torch._dynamo.graph_break()): the cost of a graph break with no eager
    code between the graphs, which is what a variant with ``_graph_breaks`` measures."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList) and len(m) > 1]
    layers = [layer for ml in lists for layer in ml]
    n = min(n, len(layers) - 1)
    picks = [layers[1 + round(i * (len(layers) - 2) / max(n - 1, 1))] for i in range(n)]

    def brk(module, args):
        torch._dynamo.graph_break()

    for layer in dict.fromkeys(picks):
        layer.register_forward_pre_hook(brk)


def _unique_graphs(torch) -> int | None:
    try:
        from torch._dynamo.utils import counters
        return int(counters["stats"]["unique_graphs"])
    except Exception:
        return None


def make_wrapper(torch, model, loss_mode: str, base_vocab: int):
    import inspect
    nn = torch.nn
    kw = {"use_cache": False} if "use_cache" in inspect.signature(model.forward).parameters else {}
    bkw = {}
    if loss_mode == "slice":
        base = model.base_model
        if "use_cache" in inspect.signature(base.forward).parameters:
            bkw = {"use_cache": False}

    class LossWrapper(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            if loss_mode == "slice":
                h = self.model.base_model(input_ids=ids, **bkw).last_hidden_state
                logits = self.model.get_output_embeddings()(h)[..., :base_vocab]
                return self.model.loss_function(logits, ids, vocab_size=base_vocab)
            return self.model(input_ids=ids, labels=ids, **kw).loss

    return LossWrapper()


class Clock:
    """CUDA events on the GPU, perf_counter on the CPU."""

    def __init__(self, torch, device):
        self.torch, self.cuda = torch, device == "cuda"

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def mark(self):
        if self.cuda:
            e = self.torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def ms(self, a, b):
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3


def parse_trace(path: Path) -> dict:
    doc = json.loads(path.read_text())
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    per_cat: dict[str, float] = {}
    kern: dict[str, list] = {}
    kernel_ms = gpu_ops_ms = 0.0
    nk = nops = 0
    first, last = math.inf, -math.inf
    api: dict[str, int] = {}
    cpu_ops = 0
    for ev in evs:
        if ev.get("ph") != "X":
            continue
        cat = ev.get("cat", "")
        name = ev.get("name", "")
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            d = float(ev.get("dur", 0)) / 1e3
            ts = float(ev.get("ts", 0))
            first, last = min(first, ts), max(last, ts + float(ev.get("dur", 0)))
            gpu_ops_ms += d
            nops += 1
            c = classify(name, cat)
            per_cat[c] = per_cat.get(c, 0.0) + d
            if cat == "kernel":
                kernel_ms += d
                nk += 1
            k = kern.setdefault(name, [0, 0.0, c])
            k[0] += 1
            k[1] += d
        elif cat in ("cuda_runtime", "cuda_driver"):
            if any(s in name for s in ("LaunchKernel", "GraphLaunch", "MemcpyAsync", "MemsetAsync",
                                       "cuLaunch")):
                api[name] = api.get(name, 0) + 1
        elif cat == "cpu_op":
            cpu_ops += 1
    top = sorted(kern.items(), key=lambda kv: -kv[1][1])[:30]
    return {
        "kernel_ms": rnd(kernel_ms), "gpu_ops_ms": rnd(gpu_ops_ms), "kernels": nk, "gpu_ops": nops,
        "gemm_kernel_ms": rnd(per_cat.get("gemm", 0.0)),
        "gemm_kernels": sum(v[0] for v in kern.values() if v[2] == "gemm"),
        "attention_kernel_ms": rnd(per_cat.get("attention", 0.0)),
        "optimizer_kernel_ms": rnd(per_cat.get("optimizer", 0.0)),
        "category_ms": {k: rnd(v) for k, v in sorted(per_cat.items(), key=lambda kv: -kv[1])},
        "category_count": {c: sum(v[0] for v in kern.values() if v[2] == c)
                           for c in sorted({v[2] for v in kern.values()})},
        "gpu_span_ms": rnd((last - first) / 1e3) if nops else None,
        "launch_calls": sum(api.values()), "launch_api": api, "cpu_ops_profiled": cpu_ops,
        "top_kernels": [{"name": n[:160], "count": v[0], "ms": rnd(v[1]), "class": v[2]}
                        for n, v in top],
    }


def sync_stacks(torch, step) -> list[list[str]]:
    """The synchronising calls of one ``step()`` (``torch.cuda.set_sync_debug_mode("warn")``):
    for each, the last four site-packages frames that made it."""
    import traceback

    stacks: list[list[str]] = []

    def keep(message, category, filename, lineno, file=None, line=None) -> None:
        if "synchroniz" in str(message).lower():
            stacks.append([f"{f.filename.split('site-packages/')[-1]}:{f.lineno} {f.line}"
                           for f in traceback.extract_stack()[:-2] if "site-packages" in f.filename][-4:])

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = keep
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return stacks


def count_syncs(torch, step, device) -> int | None:
    return len(sync_stacks(torch, step)) if device == "cuda" else None


def _graph_breaks(torch) -> dict:
    try:
        from torch._dynamo.utils import counters
        return {str(k)[:160]: n for k, n in counters["graph_break"].items()}
    except Exception:
        return {}


class State:
    """Models built per section, kept while the section's groups run."""

    def __init__(self):
        self.section = None
        self.models: dict[str, tuple] = {}  # variant -> (model, info, opt)
        self.compiled: dict[str, object] = {}  # variant -> compiled wrapper
        self.eager: dict[str, object] = {}


def run_group(torch, transformers, gid: str, args, res: Results, st: State, deadline: float):
    section, mode, batch, seq, variants, _ = GROUPS[gid]
    device = args.device
    clock = Clock(torch, device)
    if args.tiny:
        batch, seq = 2, 32
    base_vocab = 1000 if args.tiny else SECTIONS[section]["base_vocab"]
    if st.section != section:  # free the previous section
        st.models.clear(), st.compiled.clear(), st.eager.clear()
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
        if hasattr(torch, "_dynamo"):
            torch._dynamo.reset()
        st.section = section
    if mode == "compile":
        # a fresh dynamo for every compile group: dynamo does not guard on forward hooks, so
        # a model of a class compiled earlier would run the earlier model's graphs
        st.compiled.clear()
        torch._dynamo.reset()
    gb0 = _graph_breaks(torch)
    g = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, base_vocab, (batch, seq), generator=g).to(device)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()

    steps, build_s, compile_s, graphs = {}, {}, {}, {}
    for v in variants:
        if v not in st.models:
            t = time.monotonic()
            model, info = build_model(torch, transformers, section, v, device, args.tiny)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
            st.models[v] = (model, info, opt)
            build_s[v] = round(time.monotonic() - t, 2)
            log(f"  built {section}/{v}: {info['params'] / 1e6:.1f}M params, "
                f"attn={info['attn_implementation']} ({build_s[v]} s)")
        model, info, opt = st.models[v]
        if v not in st.eager:
            st.eager[v] = make_wrapper(torch, model, info["loss_mode"], base_vocab)
        fn = st.eager[v]
        if mode == "compile":
            if v not in st.compiled:
                st.compiled[v] = torch.compile(st.eager[v], dynamic=False)
            fn = st.compiled[v]

        def step(fn=fn, opt=opt):
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = fn(ids)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        steps[v] = step
        # first step (compiles in compile mode), then warm-up
        t = time.monotonic()
        g0 = _unique_graphs(torch)
        loss = step()
        clock.sync()
        compile_s[v] = round(time.monotonic() - t, 2)
        g1 = _unique_graphs(torch)
        graphs[v] = g1 - g0 if mode == "compile" and g0 is not None and g1 is not None else None
        log(f"  {gid}/{v}: first step {compile_s[v]} s, loss {float(loss):.3f}")
        for _ in range(args.warmup if mode == "eager" else args.warmup + 2):
            step()
        clock.sync()
        if time.monotonic() > deadline:
            raise TimeoutError("budget spent during warm-up")

    # alternating blocks
    per_step = {v: [] for v in variants}
    blocks = {v: [] for v in variants}
    nb = args.blocks
    spb = args.steps_per_block
    for b in range(nb):
        for v in variants:
            marks = []
            for _ in range(spb):
                s = clock.mark()
                steps[v]()
                e = clock.mark()
                marks.append((s, e))
            clock.sync()
            per_step[v] += [clock.ms(s, e) for s, e in marks]
            blocks[v].append(clock.ms(marks[0][0], marks[-1][1]) / spb)
        log(f"  block {b + 1}/{nb}: " + ", ".join(f"{v} {blocks[v][-1]:.2f}" for v in variants))
        if time.monotonic() > deadline and b >= 1:
            log("  budget: stopping blocks early")
            break

    # host issue time, sync points, one profiled step per variant
    recs = []
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    for v in variants:
        step = steps[v]
        cpu, cpus = [], []
        for _ in range(5):
            clock.sync()
            t0 = time.perf_counter()
            step()
            t1 = time.perf_counter()
            clock.sync()
            t2 = time.perf_counter()
            cpu.append((t1 - t0) * 1e3)
            cpus.append((t2 - t0) * 1e3)
        syncs = count_syncs(torch, step, device)
        prof = {}
        try:
            from torch.profiler import ProfilerActivity, profile
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
            step()
            clock.sync()
            with profile(activities=acts) as p:
                step()
                clock.sync()
            tp = Path(args.tmp) / f"trace_{gid}_{v}.json"
            p.export_chrome_trace(str(tp))
            prof = parse_trace(tp)
            tp.unlink()
        except Exception as e:
            prof = {"profile_error": repr(e)}
            log(f"  profile failed: {e!r}")
        model, info, _ = st.models[v]
        rec = {
            "kind": "step", "group": gid, "model": section, "variant": v, "mode": mode,
            "batch": batch, "seq": seq, "tokens": batch * seq, "baseline_variant": variants[0],
            "step_ms_median": rnd(med(per_step[v])),
            "step_ms_mean": rnd(statistics.fmean(per_step[v])),
            "step_ms_min": rnd(min(per_step[v])), "step_ms_max": rnd(max(per_step[v])),
            "step_ms_blocks": [rnd(x) for x in blocks[v]],
            "steps_timed": len(per_step[v]),
            "kernel_ms": prof.get("kernel_ms"), "gemm_kernel_ms": prof.get("gemm_kernel_ms"),
            "kernels": prof.get("kernels"),
            "cpu_ms": rnd(med(cpu)), "cpu_sync_ms": rnd(med(cpus)), "cpu_ms_all": [rnd(x) for x in cpu],
            "sync_points": syncs,
            "gemm_share_of_step": (rnd(prof["gemm_kernel_ms"] / med(per_step[v]))
                                   if prof.get("gemm_kernel_ms") is not None else None),
            "kernel_share_of_step": (rnd(prof["kernel_ms"] / med(per_step[v]))
                                     if prof.get("kernel_ms") is not None else None),
            "first_step_s": compile_s[v], "build_s": build_s.get(v),
            "graphs": graphs.get(v), "forced_graph_breaks": info["forced_graph_breaks"],
            "peak_mem_gib_group": rnd(peak, 2),
            "params": info["params"], "config": info["config"], "loss_mode": info["loss_mode"],
            "attn_implementation": info["attn_implementation"], "model_class": info["model_class"],
            "profile": {k: x for k, x in prof.items()
                        if k not in ("kernel_ms", "gemm_kernel_ms", "kernels")},
        }
        if mode == "compile":
            gb1 = _graph_breaks(torch)  # graph breaks seen while this group compiled (all variants)
            rec["dynamo_graph_breaks_group"] = {k: n - gb0.get(k, 0) for k, n in gb1.items()
                                                if n - gb0.get(k, 0)}
        recs.append(rec)
    base = recs[0]
    for r in recs:
        r["speedup_vs_baseline"] = rnd(base["step_ms_median"] / r["step_ms_median"])
        if base.get("kernel_ms") and r.get("kernel_ms"):
            r["kernel_speedup_vs_baseline"] = rnd(base["kernel_ms"] / r["kernel_ms"])
        res.add(r)
        log(f"  {gid}/{r['variant']}: step {r['step_ms_median']} ms (x{r['speedup_vs_baseline']}), "
            f"kernels {r['kernel_ms']} ms / {r['kernels']}, gemm {r['gemm_kernel_ms']} ms, "
            f"cpu {r['cpu_ms']} ms, syncs {r['sync_points']}")


# --- micro-measurements ---------------------------------------------------------------------------

def bench_fn(torch, device):
    """median ms of fn: triton.testing.do_bench on the GPU, a simple loop on the CPU"""
    if device == "cuda":
        from triton.testing import do_bench

        def b(fn, grad_to_none=None, warmup=25, rep=100):
            try:
                return do_bench(fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none,
                                return_mode="median")
            except TypeError:
                return do_bench(fn, warmup=warmup, rep=rep, grad_to_none=grad_to_none,
                                quantiles=[0.5])
        return b

    def b(fn, grad_to_none=None, warmup=None, rep=None):
        fn()
        ts = []
        for _ in range(3):
            t = time.perf_counter()
            fn()
            ts.append((time.perf_counter() - t) * 1e3)
        return statistics.median(ts)
    return b


def run_micro(torch, args, res: Results, deadline: float, parts=("bandwidth", "launch", "gemm")):
    F = torch.nn.functional
    dev = args.device
    bench = bench_fn(torch, dev)
    sc = 64 if args.tiny else 1  # tiny: shrink sizes
    MiB = 2**20

    def add(rec):
        rec = {"kind": "micro", "model": "micro", "mode": "eager", **rec}
        res.add(rec)
        log("  micro", {k: v for k, v in rec.items() if k not in ("kind", "model", "mode")})

    dt_name = {torch.bfloat16: "bf16", torch.float32: "fp32"}

    if "bandwidth" in parts:
        # ceilings
        n = 8192 // (8 if args.tiny else 1)
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b2 = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        ms = bench(lambda: a @ b2)
        add({"test": "peak", "variant": f"mm_bf16_{n}^3", "ms": rnd(ms, 5), "tflops": rnd(2 * n**3 / ms / 1e9, 1)})
        a = b2 = None
        src = torch.empty(2**30 // 4 // sc, device=dev, dtype=torch.float32).normal_()
        dst = torch.empty_like(src)
        ms = bench(lambda: dst.copy_(src))
        add({"test": "peak", "variant": "copy_fp32_1GiB", "ms": rnd(ms, 5),
             "gbps": rnd(2 * src.numel() * 4 / ms / 1e6, 1)})
        src = dst = None

        # (a) elementwise bandwidth
        for dt in (torch.bfloat16, torch.float32):
            for mib in (64, 256):
                numel = mib * MiB // (2 if dt == torch.bfloat16 else 4) // sc
                x = torch.randn(numel, device=dev, dtype=dt)
                y = torch.randn(numel, device=dev, dtype=dt)
                es = x.element_size()
                for op, fn, nbytes in (
                    ("add", lambda: torch.add(x, y), 3 * numel * es),
                    ("mul", lambda: torch.mul(x, y), 3 * numel * es),
                    ("gelu", lambda: F.gelu(x), 2 * numel * es),
                    ("add_inplace", lambda: x.add_(y), 3 * numel * es),
                ):
                    ms = bench(fn)
                    add({"test": "bandwidth", "variant": f"{op}_{dt_name[dt]}_{mib}MiB", "op": op,
                         "dtype": dt_name[dt], "tensor_mib": mib, "bytes": nbytes, "ms": rnd(ms, 5),
                         "gbps": rnd(nbytes / ms / 1e6, 1)})
                if dt == torch.float32:
                    ms = bench(lambda: x.to(torch.bfloat16))
                    nbytes = numel * 6
                    add({"test": "bandwidth", "variant": f"cast_fp32_to_bf16_{mib}MiB", "op": "cast",
                         "dtype": "fp32->bf16", "tensor_mib": mib, "bytes": nbytes, "ms": rnd(ms, 5),
                         "gbps": rnd(nbytes / ms / 1e6, 1)})
                x = y = None
        if time.monotonic() > deadline:
            raise TimeoutError("budget")

        # reductions over [8192, 50257] (and layer_norm at 768)
        R, V, VP = 8192 // sc, 50257, 50264
        for dt in (torch.float32, torch.bfloat16):
            es = 4 if dt == torch.float32 else 2
            x = torch.randn(R, V, device=dev, dtype=dt)
            nb = 2 * R * V * es
            for op, fn in (("softmax", lambda: torch.softmax(x, -1)),
                           ("log_softmax", lambda: torch.log_softmax(x, -1)),
                           ("layer_norm", lambda: F.layer_norm(x, (V,)))):
                ms = bench(fn)
                add({"test": "reduction", "variant": f"{op}_{dt_name[dt]}_{R}x{V}", "op": op,
                     "dtype": dt_name[dt], "shape": [R, V], "bytes": nb, "ms": rnd(ms, 5),
                     "gbps": rnd(nb / ms / 1e6, 1)})
            if dt == torch.float32:  # the loss: cross_entropy fwd and fwd+bwd on fp32 logits
                xl = x.clone().requires_grad_(True)
                tgt = torch.randint(0, V, (R,), device=dev)
                ms = bench(lambda: F.cross_entropy(xl, tgt))
                add({"test": "reduction", "variant": f"cross_entropy_fwd_fp32_{R}x{V}", "op": "cross_entropy_fwd",
                     "dtype": "fp32", "shape": [R, V], "bytes": R * V * 4, "ms": rnd(ms, 5),
                     "gbps": rnd(R * V * 4 / ms / 1e6, 1), "bytes_note": "one read of the logits"})
                ms = bench(lambda: F.cross_entropy(xl, tgt).backward(), grad_to_none=[xl])
                add({"test": "reduction", "variant": f"cross_entropy_fwdbwd_fp32_{R}x{V}",
                     "op": "cross_entropy_fwdbwd", "dtype": "fp32", "shape": [R, V],
                     "bytes": 3 * R * V * 4, "ms": rnd(ms, 5), "gbps": rnd(3 * R * V * 4 / ms / 1e6, 1),
                     "bytes_note": "fwd read + bwd read + grad write (minimum)"})
                xl = None
            del x
            h = torch.randn(R, 768, device=dev, dtype=dt)
            nb = 2 * R * 768 * es
            ms = bench(lambda: F.layer_norm(h, (768,)))
            add({"test": "reduction", "variant": f"layer_norm_{dt_name[dt]}_{R}x768", "op": "layer_norm",
                 "dtype": dt_name[dt], "shape": [R, 768], "bytes": nb, "ms": rnd(ms, 5),
                 "gbps": rnd(nb / ms / 1e6, 1)})
            h = None

        # the sliced-logits copy and its backward
        xp = torch.randn(R, VP, device=dev, dtype=torch.bfloat16)
        xc = torch.randn(R, V, device=dev, dtype=torch.bfloat16)
        g32 = torch.randn(R, V, device=dev, dtype=torch.float32)
        gb = torch.randn(R, V, device=dev, dtype=torch.bfloat16)
        for name, fn, nb in (
            ("slice_contiguous_bf16", lambda: xp[..., :V].contiguous(), 4 * R * V),
            ("clone_contiguous_bf16_ref", lambda: xc.clone(), 4 * R * V),
            ("slice_to_fp32", lambda: xp[..., :V].float(), 6 * R * V),
            ("contiguous_to_fp32_ref", lambda: xc.float(), 6 * R * V),
            ("slice_backward_bf16", lambda: torch.zeros(R, VP, device=dev, dtype=torch.bfloat16)[..., :V].copy_(gb),
             2 * R * VP + 4 * R * V),
            ("fp32_grad_to_bf16_ref", lambda: g32.to(torch.bfloat16), 6 * R * V),
        ):
            ms = bench(fn)
            add({"test": "strided_copy", "variant": f"{name}_{R}x{V}", "op": name, "shape": [R, V],
                 "src_shape": [R, VP] if "slice" in name else [R, V], "bytes": nb, "ms": rnd(ms, 5),
                 "gbps": rnd(nb / ms / 1e6, 1)})
        xp = xc = g32 = gb = None
        if time.monotonic() > deadline:
            raise TimeoutError("budget")

    if "launch" in parts:
        # (b) launch overhead
        N = 10000 // (10 if args.tiny else 1)
        x = torch.zeros(1, device=dev)
        clock = Clock(torch, dev)

        def loop_inplace():
            for _ in range(N):
                x.add_(1.0)

        def loop_outplace():
            y = x
            for _ in range(N):
                y = torch.add(y, 1.0)
            return y

        for name, fn in (("eager_add_inplace", loop_inplace), ("eager_add_outofplace", loop_outplace)):
            fn()
            clock.sync()
            walls, issues, gpus = [], [], []
            for _ in range(3):
                clock.sync()
                t0 = time.perf_counter()
                s = clock.mark()
                fn()
                e = clock.mark()
                t1 = time.perf_counter()
                clock.sync()
                t2 = time.perf_counter()
                walls.append((t2 - t0) * 1e6 / N)
                issues.append((t1 - t0) * 1e6 / N)
                gpus.append(clock.ms(s, e) * 1e3 / N)
            add({"test": "launch", "variant": name, "ops": N, "us_per_op_wall": rnd(med(walls), 3),
                 "us_per_op_issue": rnd(med(issues), 3), "us_per_op_events": rnd(med(gpus), 3)})
        if dev == "cuda":
            try:
                s_ = torch.cuda.Stream()
                s_.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s_):
                    for _ in range(3):
                        x.add_(1.0)
                torch.cuda.current_stream().wait_stream(s_)
                graph = torch.cuda.CUDAGraph()
                t = time.perf_counter()
                with torch.cuda.graph(graph):
                    for _ in range(N):
                        x.add_(1.0)
                cap_s = time.perf_counter() - t
                graph.replay()
                torch.cuda.synchronize()
                walls, gpus = [], []
                for _ in range(5):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    s = clock.mark()
                    graph.replay()
                    e = clock.mark()
                    torch.cuda.synchronize()
                    walls.append((time.perf_counter() - t0) * 1e6 / N)
                    gpus.append(clock.ms(s, e) * 1e3 / N)
                add({"test": "launch", "variant": "cuda_graph_add_inplace", "ops": N,
                     "us_per_op_wall": rnd(med(walls), 3), "us_per_op_events": rnd(med(gpus), 3),
                     "capture_s": rnd(cap_s, 2)})
                graph = None
            except Exception as e:
                res.note("errors", {"where": "micro/cuda_graph", "error": repr(e)})
        try:  # one compiled (Inductor) call of a single fused kernel: guards + launcher overhead
            cf = torch.compile(lambda t: t * 2.0 + 1.0, dynamic=False)
            cf(x)
            clock.sync()
            M = N // 5
            clock.sync()
            t0 = time.perf_counter()
            for _ in range(M):
                cf(x)
            t1 = time.perf_counter()
            clock.sync()
            t2 = time.perf_counter()
            add({"test": "launch", "variant": "compiled_call_1kernel", "ops": M,
                 "us_per_op_wall": rnd((t2 - t0) * 1e6 / M, 3), "us_per_op_issue": rnd((t1 - t0) * 1e6 / M, 3)})
        except Exception as e:
            res.note("errors", {"where": "micro/compiled_call", "error": repr(e)})
        try:  # a chain of tiny mm -> relu: eager vs compiled (one cuBLAS call + one Triton kernel per link)
            L = 50
            wm = torch.randn(16, 16, device=dev) * 0.1
            xm = torch.randn(16, 16, device=dev)

            def chain(t):
                for _ in range(L):
                    t = torch.relu(t @ wm)
                return t

            cc = torch.compile(chain, dynamic=False)
            for name, fn in (("eager_chain_mm_relu_50", chain), ("compiled_chain_mm_relu_50", cc)):
                fn(xm)
                clock.sync()
                M = 200 // (10 if args.tiny else 1)
                t0 = time.perf_counter()
                for _ in range(M):
                    fn(xm)
                t1 = time.perf_counter()
                clock.sync()
                t2 = time.perf_counter()
                add({"test": "launch", "variant": name, "calls": M, "kernels_per_call_nominal": 2 * L,
                     "us_per_call_wall": rnd((t2 - t0) * 1e6 / M, 2),
                     "us_per_call_issue": rnd((t1 - t0) * 1e6 / M, 2),
                     "us_per_kernel_issue": rnd((t1 - t0) * 1e6 / M / (2 * L), 3)})
            if dev == "cuda":  # count what really launched in one compiled call
                from torch.profiler import ProfilerActivity, profile
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
                    cc(xm)
                    clock.sync()
                tp = Path(args.tmp) / "trace_chain.json"
                p.export_chrome_trace(str(tp))
                pr = parse_trace(tp)
                tp.unlink()
                add({"test": "launch", "variant": "compiled_chain_mm_relu_50_profile",
                     "kernels": pr["kernels"], "category_count": pr["category_count"],
                     "launch_calls": pr["launch_calls"], "kernel_ms": pr["kernel_ms"]})
        except Exception as e:
            res.note("errors", {"where": "micro/chain", "error": repr(e)})
        x = None
        if time.monotonic() > deadline:
            raise TimeoutError("budget")

    if "gemm" in parts:
        # (c) GEMM alignment classes: F.linear fwd and fwd+bwd, bf16
        shapes = [  # (class, tokens, in, out, reference out of the class)
            ("compute", 8192, 4096, 4096, 4096), ("compute", 8192, 4096, 4095, 4096),
            ("compute", 8192, 4096, 4094, 4096), ("compute", 8192, 4096, 4092, 4096),
            ("compute", 8192, 4096, 4100, 4096), ("compute_in", 8192, 4095, 4096, None),
            ("lm_head", 8192, 768, 30528, 30528), ("lm_head", 8192, 768, 30522, 30528),
            ("lm_head", 8192, 768, 50304, 50304), ("lm_head", 8192, 768, 50257, 50304),
            ("lm_head", 8192, 768, 50264, 50304),
            ("memory_small", 65536, 64, 176, 176), ("memory_small", 65536, 64, 172, 176),
            ("memory_small", 65536, 64, 171, 176),
            ("memory_tokens16", 16, 4096, 4096, 4096), ("memory_tokens16", 16, 4096, 4097, 4096),
        ]
        rate: dict[tuple, dict] = {}
        for cls, T, K, N_, ref in shapes:
            if time.monotonic() > deadline:
                raise TimeoutError("budget")
            T_ = max(16, T // sc)
            xg = (torch.randn(T_, K, device=dev, dtype=torch.bfloat16)).requires_grad_(True)
            w = (torch.randn(N_, K, device=dev, dtype=torch.bfloat16) * 0.02).requires_grad_(True)
            gy = torch.randn(T_, N_, device=dev, dtype=torch.bfloat16)
            with torch.no_grad():
                ms_f = bench(lambda: F.linear(xg, w))
            ms_fb = bench(lambda: F.linear(xg, w).backward(gy), grad_to_none=[xg, w])
            fl = 2 * T_ * K * N_
            byt = 2 * (T_ * K + N_ * K + T_ * N_)  # bf16: read x and W, write y (forward)
            r = {"test": "gemm", "variant": f"{cls}_T{T_}_in{K}_out{N_}", "class": cls, "tokens": T_,
                 "in": K, "out": N_, "dtype": "bf16", "ms_fwd": rnd(ms_f, 5), "ms_fwdbwd": rnd(ms_fb, 5),
                 "tflops_fwd": rnd(fl / ms_f / 1e9, 2), "tflops_fwdbwd": rnd(3 * fl / ms_fb / 1e9, 2),
                 "gbps_fwd_min_bytes": rnd(byt / ms_f / 1e6, 1),
                 "align_bytes_out": (N_ * 2) & -(N_ * 2) if N_ % 8 else 16,
                 "align_bytes_in": (K * 2) & -(K * 2) if K % 8 else 16, "ref_out": ref}
            rate[(cls, N_, K)] = (fl / ms_f, 3 * fl / ms_fb)
            refkey = (cls, ref, K) if ref is not None else ("compute", 4096, 4096)
            if refkey in rate:
                rf, rfb = rate[refkey]
                r["frac_of_aligned_fwd"] = rnd(fl / ms_f / rf)
                r["frac_of_aligned_fwdbwd"] = rnd(3 * fl / ms_fb / rfb)
                r["aligned_ref"] = f"out={refkey[1]} in={refkey[2]}"
            add(r)
            xg = w = gy = None


# --- tables ---------------------------------------------------------------------------------------

def table(doc: dict) -> str:
    out = []
    steps = [r for r in doc["records"] if r["kind"] == "step"]
    if steps:
        out.append(f"{'group':18} {'variant':17} {'mode':7} {'step ms':>8} {'x base':>6} {'blocks':>23} "
                   f"{'kern ms':>8} {'gemm ms':>8} {'gemm%':>5} {'#kern':>5} {'cpu ms':>7} {'sync':>4}")
        for r in steps:
            bl = "/".join(f"{x:.1f}" for x in r["step_ms_blocks"][:4])
            gs = r.get("gemm_share_of_step")
            out.append(f"{r['group'][:18]:18} {r['variant'][:17]:17} {r['mode']:7} {r['step_ms_median']:8.2f} "
                       f"{r.get('speedup_vs_baseline') or 0:6.3f} {bl:>23} {r.get('kernel_ms') or 0:8.2f} "
                       f"{r.get('gemm_kernel_ms') or 0:8.2f} {100 * (gs or 0):5.1f} {r.get('kernels') or 0:5d} "
                       f"{r.get('cpu_ms') or 0:7.2f} {r.get('sync_points') if r.get('sync_points') is not None else '-':>4}")
    micro = [r for r in doc["records"] if r["kind"] == "micro"]
    for r in micro:
        keys = ("ms", "gbps", "tflops", "us_per_op_wall", "us_per_op_issue", "us_per_op_events",
                "ms_fwd", "ms_fwdbwd", "tflops_fwd", "tflops_fwdbwd", "frac_of_aligned_fwd",
                "frac_of_aligned_fwdbwd", "us_per_call_wall", "us_per_call_issue", "us_per_kernel_issue",
                "kernels", "launch_calls")
        out.append(f"micro {r['test']:12} {r['variant'][:40]:40} " +
                   " ".join(f"{k}={r[k]}" for k in keys if r.get(k) is not None))
    for s in doc.get("skipped", []):
        out.append(f"skipped: {s}")
    for e in doc.get("errors", []):
        out.append(f"error: {str(e)[:300]}")
    return "\n".join(out)


def merge(paths: list[str], out: str, notes: list[str] | None = None) -> None:
    docs = [json.loads(Path(p).read_text()) for p in paths]
    merged = {"schema": SCHEMA, "method": docs[0].get("method"),
              "kernel_classifier": docs[0].get("kernel_classifier"), "notes": notes or [],
              "runs": [], "records": [], "skipped": [], "errors": []}
    for i, d in enumerate(docs, 1):
        merged["runs"].append({"run": i, "file": Path(paths[i - 1]).name, "env": d["env"],
                               "argv": d.get("argv"), "elapsed_s": d.get("elapsed_s")})
        for r in d["records"]:
            merged["records"].append({"run": i, **r})
        merged["skipped"] += [{"run": i, "item": s} for s in d.get("skipped", [])]
        merged["errors"] += [{"run": i, "item": s} for s in d.get("errors", [])]
    Path(out).write_text(json.dumps(merged, indent=1))
    print(f"wrote {out}: {len(merged['records'])} records from {len(docs)} runs")


# --- main -----------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "step_out"))
    ap.add_argument("--groups", default="run1", help="comma list of group ids, or run1 | run2 | run3 | all")
    ap.add_argument("--budget-s", type=float, default=540.0, help="wall budget of the whole script")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--tiny", action="store_true", help="tiny configs and sizes (CPU dry run)")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--steps-per-block", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--tmp", default="/tmp")
    ap.add_argument("--merge", nargs="+", help="merge result files (no measurement)")
    ap.add_argument("--merge-out")
    ap.add_argument("--note", action="append", help="a note stored in the merged file (repeatable)")
    ap.add_argument("--table", help="print the table of a result file")
    args = ap.parse_args()
    if args.merge:
        merge(args.merge, args.merge_out or "merged.json", args.note)
        return 0
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return 0

    groups = {"run1": RUN1, "run2": RUN2, "run3": RUN3, "all": RUN1 + RUN2}.get(args.groups) or args.groups.split(",")
    for g in groups:
        if g not in GROUPS:
            ap.error(f"unknown group {g}; known: {', '.join(GROUPS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch
    import transformers
    try:
        transformers.logging.set_verbosity_error()
    except Exception:
        pass
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    try:
        import torch._dynamo
        for k in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                  "accumulated_recompile_limit"):
            if hasattr(torch._dynamo.config, k):
                setattr(torch._dynamo.config, k, 256)
    except Exception:
        pass

    env = environment(torch, transformers, args.device)
    log("env:", json.dumps({k: v for k, v in env.items() if k != "nvidia_smi"}))
    log(env.get("nvidia_smi", ""))
    res = Results(out / "step_gpu.json", env, sys.argv[1:])
    deadline = T0 + args.budget_s
    st = State()
    for gid in groups:
        est = GROUPS[gid][5] * (0.05 if args.tiny else 1.0)
        left = deadline - time.monotonic()
        if left < est:
            log(f"skip {gid}: {left:.0f} s left < estimated {est:.0f} s")
            res.note("skipped", {"group": gid, "left_s": round(left), "est_s": est})
            continue
        log(f"== {gid} (est {est:.0f} s, {left:.0f} s left)")
        t = time.monotonic()
        try:
            if gid.startswith("micro"):
                run_micro(torch, args, res, deadline, MICRO_PARTS[gid])
            else:
                run_group(torch, transformers, gid, args, res, st, deadline)
        except Exception as e:
            tb = traceback.format_exc()
            log(f"!! {gid} failed: {e!r}\n{tb}")
            res.note("errors", {"group": gid, "error": repr(e), "traceback": tb[-3000:]})
            st.section = None  # rebuild after a failure
            st.models.clear(), st.compiled.clear(), st.eager.clear()
            gc.collect()
            if args.device == "cuda":
                torch.cuda.empty_cache()
        res.doc.setdefault("group_wall_s", {})[gid] = round(time.monotonic() - t, 1)
        res.flush()
    if args.device == "cuda":
        res.doc["env"]["gpu_state_end"] = gpu_state()
    res.flush()
    print("\n" + table(res.doc), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
