"""Where a training step's time goes when neither the host nor the GPU clearly bounds it
(issue 10): the host's and the GPU's timelines of real steps, phase by phase.

The step model takes a step without synchronising calls as the larger of its host time
and its GPU time. SmolLM-135M compiled measured 55-71 ms where both are about 35-40 ms:
something serialises them. Candidates: the CUDA launch queue (about 1000 pending
launches a stream; past it ``cudaLaunchKernel`` blocks until the GPU retires one), host
work bunched where the GPU has nothing queued, or a host that is slower inside a real
loop than on an idle GPU. This profiles ``--steps`` consecutive steps of each model (the
step of benchmarks/host_phases.py at 8 x 1024, no synchronisation between steps) with
torch.profiler and reports, per step and per phase (forward with loss, backward,
optimizer with zero_grad; ``record_function`` ranges):

- ``host_ms``: the phase's host time inside the loop;
- ``launches``, ``launch_ms``: kernel/memset/memcpy launch calls and the time spent in
  them; ``blocked``, ``blocked_ms``: the calls that took over 50 us (a full queue);
- ``max_pending``: the most kernels launched and not finished at a launch call;
- ``sync_ms``: time in synchronising runtime calls;
- ``gpu_busy_ms``: GPU time of the kernels launched in the phase; ``gpu_idle_ms``: the
  GPU's idle time before those kernels (the gap each one waited after the previous one).

Before profiling, the unprofiled step (CUDA events, median of a block) and the host time
of a step issued onto an idle GPU are recorded, so the profiler's own overhead shows.

    python benchmarks/host_timeline.py --out $OUT --models smollm,gpt2 --modes eager,compile
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from host_sync import build  # noqa: E402
from step_gpu_models import SECTIONS  # noqa: E402

PHASES = ("forward", "backward", "optimizer")
GPU_CATS = ("kernel", "gpu_memset", "gpu_memcpy")
LAUNCH_PREFIXES = ("cudaLaunch", "cuLaunch", "cudaMemsetAsync", "cudaMemcpyAsync", "cudaGraphLaunch")
SYNC_NAMES = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
              "cuStreamSynchronize", "cuMemcpyDtoH_v2")
BLOCKED_US = 50.0


def phases_of(trace: dict[str, Any], steps: int) -> list[dict[str, Any]]:
    """Per step, per phase: the host, launch and GPU figures described above."""
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    ranges = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events
                    if e.get("cat") == "user_annotation" and e["name"].split("#")[0] in (*PHASES, "step"))
    gpu = sorted((e for e in events if e.get("cat") in GPU_CATS), key=lambda e: e["ts"])
    by_corr = {e["args"].get("correlation"): e for e in gpu if "args" in e}
    runtime = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")]
    # kernels in launch order (one stream: they also end in this order), to count what is
    # pending (launched, not finished) when each launch is called
    launched = sorted((e for e in runtime if e.get("args", {}).get("correlation") in by_corr), key=lambda e: e["ts"])
    ends = [by_corr[e["args"]["correlation"]]["ts"] + by_corr[e["args"]["correlation"]]["dur"] for e in launched]
    pending = {id(e): j - bisect.bisect_right(ends, e["ts"], 0, j) for j, e in enumerate(launched)}
    prev_end = None
    gap_before: dict[int, float] = {}
    for e in gpu:
        if prev_end is not None:
            gap_before[id(e)] = max(0.0, e["ts"] - prev_end)
        prev_end = max(prev_end or 0.0, e["ts"] + e["dur"])

    def inside(ts: float, name: str) -> bool:
        return any(a <= ts < b for a, b, n in ranges if n == name)

    out = []
    for i in range(steps):
        step_range = [r for r in ranges if r[2] == f"step#{i}"]
        if not step_range:
            continue
        row: dict[str, Any] = {"step": i, "host_ms": round((step_range[0][1] - step_range[0][0]) / 1e3, 3)}
        for phase in PHASES:
            name = f"{phase}#{i}"
            launches = [e for e in runtime if e["name"].startswith(LAUNCH_PREFIXES) and inside(e["ts"], name)]
            syncs = [e for e in runtime if e["name"] in SYNC_NAMES and inside(e["ts"], name)]
            kernels = [by_corr[c] for c in (e["args"].get("correlation") for e in launches) if c in by_corr]
            blocked = [e for e in launches if e["dur"] > BLOCKED_US]
            span = [r for r in ranges if r[2] == name]
            row[phase] = {
                "host_ms": round((span[0][1] - span[0][0]) / 1e3, 3) if span else None,
                "launches": len(launches),
                "launch_ms": round(sum(e["dur"] for e in launches) / 1e3, 3),
                "max_pending": max((pending.get(id(e), 0) for e in launches), default=0),
                "blocked": len(blocked),
                "blocked_ms": round(sum(e["dur"] for e in blocked) / 1e3, 3),
                "sync_ms": round(sum(e["dur"] for e in syncs) / 1e3, 3),
                "gpu_busy_ms": round(sum(k["dur"] for k in kernels) / 1e3, 3),
                "gpu_idle_ms": round(sum(gap_before.get(id(k), 0.0) for k in kernels) / 1e3, 3),
            }
        out.append(row)
    # the GPU's span of each step: from its first kernel to the next step's first kernel
    firsts = []
    for row in out:
        k = [by_corr[e["args"]["correlation"]] for e in runtime
             if e["name"].startswith(LAUNCH_PREFIXES) and inside(e["ts"], f"step#{row['step']}")
             and e.get("args", {}).get("correlation") in by_corr]
        firsts.append((min(x["ts"] for x in k), max(x["ts"] + x["dur"] for x in k)) if k else None)
    for j, row in enumerate(out):
        if firsts[j] is None:
            continue
        end = firsts[j + 1][0] if j + 1 < len(firsts) and firsts[j + 1] else firsts[j][1]
        row["gpu_span_ms"] = round((end - firsts[j][0]) / 1e3, 3)
    return out


def measure(torch: Any, transformers: Any, name: str, compiled: bool, steps: int, batch: int, seq: int,
            block: int) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile, record_function

    model, vocab = build(torch, transformers, name)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    torch.manual_seed(1234)
    ids = torch.randint(0, vocab, (batch, seq), device="cuda")
    kw = {"use_cache": False} if SECTIONS[name]["auto"] == "causal" else {}
    forward_model = torch.compile(model) if compiled else model

    def step(i: int | None = None) -> None:
        def phase(p: str) -> Any:
            return record_function(f"{p}#{i}") if i is not None else _Null()
        with phase("step"):
            with phase("forward"), torch.autocast("cuda", dtype=torch.bfloat16):
                loss = forward_model(input_ids=ids, labels=ids, **kw).loss
            with phase("backward"):
                loss.backward()
            with phase("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)

    t0 = time.perf_counter()
    for _ in range(5 if compiled else 3):
        step()
    torch.cuda.synchronize()
    warm_s = time.perf_counter() - t0
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(block)]
    loop_host = []
    for a, b in events:
        a.record()
        t = time.perf_counter()
        step()
        loop_host.append((time.perf_counter() - t) * 1e3)
        b.record()
    torch.cuda.synchronize()
    step_ms = [a.elapsed_time(b) for a, b in events]
    idle_host = []
    for _ in range(3):
        torch.cuda.synchronize()
        t = time.perf_counter()
        step()
        idle_host.append((time.perf_counter() - t) * 1e3)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(steps):
            step(i)
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        trace = json.loads(path.read_text())
    row = {"model": name, "mode": "compile" if compiled else "eager", "batch": batch, "seq": seq,
           "warm_s": round(warm_s, 1), "step_ms": round(statistics.median(step_ms), 3),
           "loop_host_ms": round(statistics.median(loop_host), 3), "idle_host_ms": round(statistics.median(idle_host), 3),
           "all_step_ms": [round(x, 2) for x in step_ms], "profiled": phases_of(trace, steps)}
    torch.cuda.empty_cache()
    if compiled:
        torch._dynamo.reset()
    return row


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def summary(row: dict[str, Any]) -> str:
    lines = [f"{row['model']} {row['mode']}: step {row['step_ms']:.1f} ms (events), host in loop "
             f"{row['loop_host_ms']:.1f}, host onto idle GPU {row['idle_host_ms']:.1f}"]
    for s in row["profiled"]:
        parts = [f"  step {s['step']}: host {s['host_ms']:.1f} gpu span {s.get('gpu_span_ms', float('nan')):.1f} |"]
        for p in PHASES:
            d = s[p]
            parts.append(f"{p[:3]} host {d['host_ms']:.1f} launches {d['launches']} "
                         f"pending<={d['max_pending']} blocked {d['blocked']} ({d['blocked_ms']:.1f}) sync {d['sync_ms']:.1f} "
                         f"gpu {d['gpu_busy_ms']:.1f} idle {d['gpu_idle_ms']:.1f} |")
        lines.append(" ".join(parts))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="smollm,gpt2")
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--steps", type=int, default=3, help="profiled consecutive steps")
    ap.add_argument("--block", type=int, default=10, help="unprofiled steps timed first")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--budget-s", type=float, default=540.0)
    args = ap.parse_args()
    import torch
    import transformers

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for mode in args.modes.split(","):
        for name in args.models.split(","):
            if time.perf_counter() - start > args.budget_s:
                skipped.append(f"{name}/{mode}")
                continue
            row = measure(torch, transformers, name, mode == "compile", args.steps, args.batch, args.seq, args.block)
            rows.append(row)
            print(summary(row), flush=True)
            (out / "host_timeline.json").write_text(json.dumps({
                "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                "transformers": transformers.__version__,
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "argv": sys.argv[1:], "rows": rows, "skipped": skipped}, indent=1))
    if skipped:
        print("skipped (budget):", ", ".join(skipped))


if __name__ == "__main__":
    main()
