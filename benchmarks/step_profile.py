"""Where the whole-step estimate errs, kernel class by kernel class (issue 26): each
target's training step as shapelint prices it, laid beside a torch.profiler trace of the
same step on the GPU.

For each target and mode (eager, compiled):

- **estimate**: the target is linted in this process on the GPU profile (``--gpu``,
  default h100; ``shapelint.app.api.lint_target``), and its step model's entries listed
  (``shapelint.price.breakdown.priced_kernels``: every op of an eager step, every GEMM,
  attention call and fused region of a compiled one, and the optimizer, each with its
  class and priced ms; they add up to ``StepTime.by_class``);
- **measurement**: the model is built for real (``shapelint.load.real.build``) and
  trained as ``benchmarks/real_model_steps.py`` and ``--verify --step`` train it
  (``shapelint.measure.step_train.make_trainer``: bf16 autocast over fp32 weights, the
  model's loss, fused AdamW), its step timed with CUDA events (median), then a few steps
  profiled (torch.profiler, CUDA activity) and every kernel classified by its name into
  the step model's classes (:func:`classify_kernel`).

Prints per target and mode a table of class, estimated ms, measured ms (per step),
ratio, kernels of each; the same by finer class (convolutions by kernel, cuDNN's layout
transposes, the attention kernel); the 15 costliest measured kernels and the 15
costliest estimated ops. ``--json`` writes it all, after every target (a timeout keeps
what was done). About 3-4 minutes on an H100 (compilation dominates).

    python benchmarks/step_profile.py [--only NAME,...] [--modes eager,compile]
        [--gpu h100] [--profile-steps 3] [--json /tmp/out/step_profile.json]
    python benchmarks/step_profile.py --estimate-only        # no GPU: the estimates alone

The class of a kernel, by its name (lower-cased; first match wins, :data:`RULES`):
Inductor's ``triton_*`` kernels are ``fused`` (``triton_tem*``, a GEMM template, is
``gemm``); attention kernels (flash, fmha, cuDNN's SDPA) ``attention``;
``multi_tensor_apply`` the ``optimizer``; cuDNN's NCHW<->NHWC transposes ``copy``
(detail ``conv:transposes``); PyTorch's depthwise kernel and cuDNN's convolution kernels
``gemm`` (details ``conv:depthwise``, ``conv:cudnn``); cuBLAS/nvjet/cutlass GEMMs ``gemm``
(``matmul``); norms, softmax, reductions, pooling, sorting ``reduction``; fills and
random numbers ``fill``; copies, casts, concatenation, gathers, ``where`` ``copy``; the
other elementwise kernels ``pointwise``; memcpy ``copy``, memset ``fill``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.machine_info import machine  # noqa: E402

MODELS = ROOT / "benchmarks" / "real_models"
CORPUS = ROOT / "tests" / "corpus"

#: (name, target, batch, seq, what it checks)
TARGETS: tuple[tuple[str, Path, int, int, str], ...] = (
    ("mbconv-nchw", MODELS / "mbconv.py", 256, 224, "depthwise + 1x1 convs, NCHW"),
    ("mbconv-channels-last", MODELS / "mbconv_channels_last.py", 256, 224, "the same, channels-last"),
    ("flan-t5-base", CORPUS / "flan-t5-base" / "config.json", 8, 512, "position bias with a gradient"),
    ("fsmt-wmt19-en-de", CORPUS / "fsmt-wmt19-en-de" / "config.json", 8, 512, "attention written by hand"),
)
MODES = ("eager", "compile")

# -- the class of a measured kernel ---------------------------------------------------------

#: (class, detail, name fragments): a kernel's class is the first rule one of whose
#: fragments (a regular expression) its lower-cased name contains
RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("copy", "memcpy", (r"^memcpy",)),
    ("fill", "memset", (r"^memset",)),
    ("gemm", "triton_template", (r"^triton_tem",)),
    ("fused", "fused:reduction", (r"^triton_(red|per)",)),
    ("fused", "fused:pointwise", (r"^triton_",)),
    ("attention", "attention:flash", (r"flash_(fwd|bwd)", r"pytorch_flash")),
    ("attention", "attention:cudnn", (r"cudnn_generated.*sdpa", r"cudnn::fusion::", r"sdpa")),
    ("attention", "attention:efficient", (r"fmha", r"efficient_attention", r"mem_eff")),
    ("attention", "attention", (r"attention",)),
    ("optimizer", "optimizer", (r"multi_tensor_apply", r"fused_adam", r"adamw")),
    ("copy", "conv:transposes", (r"nchwtonhwc", r"nhwctonchw")),
    ("gemm", "conv:depthwise", (r"conv_depthwise",)),
    ("reduction", "norm", (r"batch_?norm", r"bn_fw", r"bn_bw", r"layer_?norm", r"rms_?norm", r"group_?norm",
                           r"gammabeta", r"rowwisemoments", r"welford")),
    ("gemm", "conv:cudnn", (r"conv(?!ert)", r"fprop", r"dgrad", r"wgrad", r"implicit_gemm", r"xmma_cudnn",
                            r"cudnn", r"cask_")),
    ("gemm", "matmul", (r"gemm", r"nvjet", r"cutlass", r"cublas", r"xmma", r"matmul", r"s1688", r"s16816",
                        r"wgmma", r"splitkreduce", r"gemv")),
    ("pointwise", "dropout", (r"dropout",)),
    ("fill", "fill", (r"nll_loss_backward", r"fillfunctor", r"fill_kernel", r"with_index", r"distribution_",
                      r"bernoulli", r"uniform_", r"normal_kernel", r"randperm", r"zero_")),
    ("reduction", "softmax", (r"softmax",)),
    ("reduction", "reduction", (r"reduce", r"cross_entropy", r"nll_loss", r"embedding_backward",
                                r"compute_grad_weight", r"sum_and_scatter", r"krn_partial", r"segment",
                                r"radix_?sort", r"cub::", r"indexing_backward", r"pool", r"adaptive_average",
                                r"upsample", r"topk", r"scan", r"cumsum", r"unique", r"bincount", r"histogram")),
    ("copy", "copy", (r"copy", r"cat_?array", r"index", r"gather", r"where_kernel", r"masked_fill", r"flip",
                      r"roll", r"tril", r"triu", r"constant_pad", r"embedding")),
    ("pointwise", "pointwise", (r"elementwise", r"vectorized", r"unrolled", r"functor", r"kernel")),
)
_COMPILED = tuple((kind, detail, tuple(re.compile(p) for p in pats)) for kind, detail, pats in RULES)


def classify_kernel(name: str, category: str = "kernel") -> tuple[str, str]:
    """(class, detail) of a GPU activity by its name and its trace category (see the
    module docstring); ``("other", "other")`` where no rule matches."""
    if category == "gpu_memcpy":
        return "copy", "memcpy"
    if category == "gpu_memset":
        return "fill", "memset"
    n = name.lower()
    for kind, detail, patterns in _COMPILED:
        if any(p.search(n) for p in patterns):
            return kind, detail
    return "other", "other"


# -- a profile of the real step ---------------------------------------------------------------

#: the trace categories of GPU activities
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def kernels_of_trace(events: Iterable[dict[str, Any]], steps: int,
                     categories: Sequence[str] = GPU_CATEGORIES) -> dict[str, Any]:
    """Per-step kernel time by class and by finer class, the kernels per class, the
    GPU's busy time and span, and every kernel name's count and time per step, from a
    Chrome trace's events of ``steps`` steps."""
    by_name: dict[str, list[Any]] = {}
    first, last = float("inf"), float("-inf")
    for ev in events:
        if ev.get("ph") != "X" or ev.get("cat") not in categories:
            continue
        name, dur, ts = str(ev.get("name", "")), float(ev.get("dur", 0.0)), float(ev.get("ts", 0.0))
        first, last = min(first, ts), max(last, ts + dur)
        entry = by_name.setdefault(name, [0, 0.0, *classify_kernel(name, str(ev.get("cat")))])
        entry[0] += 1
        entry[1] += dur / 1e3
    by_class: dict[str, float] = {}
    by_detail: dict[str, float] = {}
    counts: dict[str, float] = {}
    for count, ms, kind, detail in by_name.values():
        by_class[kind] = by_class.get(kind, 0.0) + ms / steps
        by_detail[detail] = by_detail.get(detail, 0.0) + ms / steps
        counts[kind] = counts.get(kind, 0.0) + count / steps
    kernels = sorted(({"name": name, "kind": kind, "detail": detail, "count": count / steps, "ms": ms / steps}
                      for name, (count, ms, kind, detail) in by_name.items()), key=lambda k: -k["ms"])
    return {"by_class": by_class, "by_detail": by_detail, "kernels_by_class": counts,
            "busy_ms": sum(by_class.values()), "span_ms": (last - first) / 1e3 / steps if by_name else 0.0,
            "kernels": sum(counts.values()), "top": kernels}


def profile_steps(step: Any, steps: int, device: str) -> dict[str, Any]:
    """Profile ``steps`` steps (torch.profiler; on a CPU, its ops: a check of the plumbing)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = device == "cuda"
    activity = ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        for _ in range(steps):
            step()
        if cuda:
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        doc = json.loads(trace.read_text())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return kernels_of_trace(events, steps, GPU_CATEGORIES if cuda else ("cpu_op",))


def measure(target: Path, batch: int, seq: int, modes: Sequence[str], args: argparse.Namespace) -> dict[str, Any]:
    """Per mode: the median step (CUDA events; wall time on a CPU) and its profile."""
    import torch

    from shapelint.load.real import build
    from shapelint.measure.step_train import release
    from shapelint.measure.timer import cuda_block_timer, wall_block_timer

    device = args.device
    built = build(target, device=device, batch=batch, seq=seq)
    timer = cuda_block_timer() if device == "cuda" else wall_block_timer()
    out: dict[str, Any] = {}
    for mode in modes:
        try:
            out[mode] = one_mode(built, mode, timer, args)
        except Exception as exc:  # noqa: BLE001 - a mode that fails is a row; the other mode still runs
            out[mode] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        release(device, mode == "compile")
    del built
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def one_mode(built: Any, mode: str, timer: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One mode's trainer: warmed up, timed in ``--rounds`` blocks, then profiled."""
    from shapelint.measure.step_blocks import alternate
    from shapelint.measure.step_train import make_trainer, warm

    compiled = mode == "compile"
    t = make_trainer(mode, built, built.inputs, device=args.device, precision="bf16", training=True,
                     optimizer="adamw", compile=compiled)
    warm(t, args.device, args.warmup, compiled)
    samples, _ = alternate([(mode, t.step)], timer, args.rounds, args.steps)
    prof = profile_steps(t.step, args.profile_steps, args.device)
    return {"step_ms": statistics.median(samples[mode].steps), "compile_s": t.compile_s, "graphs": t.graphs, **prof}


# -- the estimate ----------------------------------------------------------------------------


def estimate(target: Path, batch: int, seq: int, mode: str, gpu: str) -> dict[str, Any]:
    """shapelint's estimate of the step, whole and entry by entry."""
    from shapelint.app import api
    from shapelint.price.breakdown import by_detail, priced_kernels, top

    report = api.lint_target(target, gpu=gpu, compile=mode == "compile", batch=batch, seq=seq)
    sm = report.result.step_model
    st = report.step_time
    if sm is None or st is None:
        raise RuntimeError(f"{target}: no step model (an inference target?)")
    entries = priced_kernels(sm.step, sm.hw, sm.mode, sm.optimizer)
    counts: dict[str, int] = {}
    for e in entries:
        counts[e.kind] = counts.get(e.kind, 0) + e.kernels
    return {"step_ms": st.ms, "gpu_ms": st.gpu_ms, "host_ms": st.host_ms, "bound": st.bound, "kernels": st.kernels,
            "step_ms_range": list(st.ms_range), "note": st.note, "gap_ms": st.gpu_ms - sum(v for _, v in st.by_class),
            "by_class": dict(st.by_class), "by_detail": by_detail(entries), "kernels_by_class": counts,
            "top": [{"label": label, "count": n, "ms": ms, "kind": first.kind, "detail": first.detail,
                     "owner": first.owner} for label, n, ms, first in top(entries, len(entries))],
            "entries": len(entries)}


# -- the tables ------------------------------------------------------------------------------


def _ratio(est: float | None, meas: float | None) -> str:
    return f"{est / meas:6.2f}" if est and meas else f"{'-':>6s}"


def comparison(est: dict[str, Any] | None, meas: dict[str, Any] | None, key: str) -> list[dict[str, Any]]:
    """Rows of (class, estimated ms, measured ms, ratio, kernels of each) over the union
    of both sides' classes, costliest first."""
    e = (est or {}).get(key, {})
    m = (meas or {}).get(key, {})
    ek = (est or {}).get("kernels_by_class", {}) if key == "by_class" else {}
    mk = (meas or {}).get("kernels_by_class", {}) if key == "by_class" else {}
    names = sorted(set(e) | set(m), key=lambda k: -max(e.get(k, 0.0), m.get(k, 0.0)))
    return [{"class": k, "est_ms": e.get(k), "meas_ms": m.get(k),
             "ratio": (e[k] / m[k]) if e.get(k) and m.get(k) else None,
             "est_kernels": ek.get(k), "meas_kernels": mk.get(k)} for k in names]


def _ms(x: float | None) -> str:
    return f"{x:9.3f}" if x is not None else f"{'-':>9s}"


def _n(x: float | None) -> str:
    return f"{x:7.0f}" if x is not None else f"{'-':>7s}"


def print_tables(name: str, mode: str, est: dict[str, Any] | None, meas: dict[str, Any] | None, n: int) -> None:
    print(f"\n== {name} {mode} ==")
    if est is not None:
        rng = est["step_ms_range"]
        print(f"estimated: step {est['step_ms']:.2f} ms ({est['bound']}-bound; host range {rng[0]:.1f}-{rng[1]:.1f}), "
              f"GPU {est['gpu_ms']:.2f} ms (launch gaps {est['gap_ms']:.2f}), host {est['host_ms']:.2f} ms, "
              f"{est['kernels']} kernels")
    if meas is not None:
        print(f"measured:  step {meas['step_ms']:.2f} ms, kernels busy {meas['busy_ms']:.2f} ms, GPU span "
              f"{meas['span_ms']:.2f} ms, {meas['kernels']:.0f} kernels" +
              (f", compile {meas['compile_s']:.1f} s, {meas['graphs']} graphs" if meas.get("compile_s") else ""))
    if est is not None and meas is not None and meas["busy_ms"]:
        kernel_ms = est["gpu_ms"] - est["gap_ms"]
        print(f"step error {100 * (est['step_ms'] / meas['step_ms'] - 1):+.1f}%; kernel time: estimated "
              f"{kernel_ms:.2f} ms against {meas['busy_ms']:.2f} ms busy ({100 * (kernel_ms / meas['busy_ms'] - 1):+.1f}%); "
              f"GPU time with launch gaps {est['gpu_ms']:.2f} ms against the span {meas['span_ms']:.2f} ms")
    for key, title in (("by_class", "class"), ("by_detail", "detail")):
        print(f"{title:22s} {'est ms':>9s} {'meas ms':>9s} {'ratio':>6s} {'est n':>7s} {'meas n':>7s}")
        rows = comparison(est, meas, key)
        if key == "by_class":
            rows.append({"class": "total (kernels)", "est_ms": None if est is None else est["gpu_ms"] - est["gap_ms"],
                         "meas_ms": None if meas is None else meas["busy_ms"],
                         "est_kernels": None if est is None else est["kernels"],
                         "meas_kernels": None if meas is None else meas["kernels"]})
        for r in rows:
            print(f"{r['class']:22s} {_ms(r['est_ms'])} {_ms(r['meas_ms'])} {_ratio(r['est_ms'], r['meas_ms'])} "
                  f"{_n(r['est_kernels'])} {_n(r['meas_kernels'])}")
    if meas is not None:
        print(f"top {n} measured kernels (per step): ms, count, class/detail, name")
        for k in meas["top"][:n]:
            print(f"  {k['ms']:8.3f} {k['count']:6.0f}  {k['kind'] + '/' + k['detail']:26s} {short(k['name'])}")
    if est is not None:
        print(f"top {n} estimated ops: ms, count, class, op shape [detail]")
        for k in est["top"][:n]:
            print(f"  {k['ms']:8.3f} {k['count']:6d}  {k['kind']:26s} {k['label'][:110]}")


def short(name: str, width: int = 110) -> str:
    """A kernel's name without the namespaces that every PyTorch kernel repeats."""
    for noise in ("void ", "at::native::", "(anonymous namespace)::", "at::cuda::", "c10::"):
        name = name.replace(noise, "")
    return name[:width]


# -- the run ---------------------------------------------------------------------------------


def _rounded(x: Any) -> Any:
    if isinstance(x, float):
        return round(x, 5)
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return x


def run_target(name: str, target: Path, batch: int, seq: int, modes: Sequence[str],
               args: argparse.Namespace) -> list[dict[str, Any]]:
    """One target's rows (one per mode): the estimate, the measurement, their comparison."""
    ests: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for mode in modes:
        try:
            ests[mode] = estimate(target, batch, seq, mode, args.gpu)
        except Exception as exc:  # noqa: BLE001 - a lint that fails is a row, the GPU side still runs
            errors[mode] = f"estimate: {type(exc).__name__}: {exc}"[:500]
    meas: dict[str, Any] = {}
    if not args.estimate_only:
        try:
            meas = measure(target, batch, seq, modes, args)
        except Exception as exc:  # noqa: BLE001 - one model's failure is a row, not the end of the run
            for mode in modes:
                errors[mode] = (errors.get(mode, "") + f" measure: {type(exc).__name__}: {exc}")[:800]
    for mode, m in list(meas.items()):
        if "error" in m:
            errors[mode] = (errors.get(mode, "") + f" measure: {m.pop('error')}").strip()
            del meas[mode]
    rows = []
    for mode in modes:
        est, m = ests.get(mode), meas.get(mode)
        print_tables(name, mode, est, m, args.top)
        if mode in errors:
            print(f"  error: {errors[mode].splitlines()[0]}")
        if m is not None:
            m = {**m, "top": [{**k, "name": k["name"][:300]} for k in m["top"]]}
        rows.append({"model": name, "mode": mode, "target": str(target.relative_to(ROOT)), "batch": batch, "seq": seq,
                     "estimate": est, "measured": m, "by_class": comparison(est, m, "by_class"),
                     "by_detail": comparison(est, m, "by_detail"), "error": errors.get(mode)})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma-separated target names")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--gpu", default="h100", help="the GPU profile the estimate is made on")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2, help="timed blocks")
    ap.add_argument("--steps", type=int, default=5, help="steps per timed block")
    ap.add_argument("--profile-steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--budget-s", type=float, default=330.0, help="start no target after this many seconds")
    ap.add_argument("--batch", type=int, default=None, help="every target at this batch (default: its own)")
    ap.add_argument("--seq", type=int, default=None, help="every target at this sequence or image size")
    ap.add_argument("--device", default="cuda", help="cuda; cpu only checks the plumbing (ops, not kernels)")
    ap.add_argument("--estimate-only", action="store_true", help="no GPU: the estimates alone")
    ap.add_argument("--json", default=None, help="write every row here (after each target)")
    args = ap.parse_args(argv)
    if importlib.util.find_spec("shapelint.rules") is None:  # a bare checkout: map rules/ as shapelint.rules
        from benchmarks.checkout import map_rules

        map_rules()
    only = set(filter(None, args.only.split(",")))
    modes = [m for m in args.modes.split(",") if m in MODES]
    started = time.perf_counter()
    doc: dict[str, Any] = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "gpu_profile": args.gpu,
                           "classifier": [list(r[:2]) + [list(r[2])] for r in RULES], "rows": []}
    for name, target, batch, seq, why in TARGETS:
        if only and name not in only:
            continue
        if time.perf_counter() - started > args.budget_s:
            print(f"{name}: skipped, past --budget-s {args.budget_s:.0f}")
            doc["rows"].append({"model": name, "error": "skipped: past the time budget"})
            continue
        t0 = time.perf_counter()
        batch, seq = args.batch or batch, args.seq or seq
        print(f"\n#### {name} (batch {batch}, seq {seq}): {why}", flush=True)
        for row in run_target(name, target, batch, seq, modes, args):
            row["seconds"] = round(time.perf_counter() - t0, 1)
            doc["rows"].append(_rounded(row))
        if args.json:
            Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"({name}: {time.perf_counter() - t0:.0f} s)", flush=True)
    if args.json:
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
