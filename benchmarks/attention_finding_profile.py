"""Which ops of an SL302 finding shapelint misprices, kernel by kernel (issue 26).

For each corpus finding named on the command line (model, module pattern), the lint's
own capture on fake tensors (``lint_target``, the corpus' default batch and sequence, as
``benchmarks/corpus_findings_gpu.py`` lints it) gives the finding; then, for one layer:

- **estimate**: shapelint's price of each op it counts, before (each GEMM, each score
  chain op, forward and backward) and after (each fused record, the recompute and the
  bias gradient it adds);
- **measured**: the same block ``--verify`` times (``shapelint.measure.kernels.gpu_block_runner``:
  the hand-written chain replayed, and SDPA as the fix calls it), forward + backward,
  timed with shapelint's CUDA timer as issued from Python (as --verify times it) and as
  a CUDA graph (the GPU's time without the host's), and run under ``torch.profiler``:
  each kernel's CUDA time per call, with the aten op that launched it.

``--sweep`` adds the memory-efficient SDPA kernel (forced) over shapes and what the call
carries: an additive bias (broadcast [1, H, T, T] or full [B, H, T, T]), its gradient,
dropout, at T 512 / 1023 / 1024 / 1500 (1023 and 1500 are not multiples of the kernel's
16-element bias alignment), B 8, H 12, head dim 64, with cuDNN and flash without a mask
as the reference rate; forward and forward + backward timed, and the backward's kernels
profiled. ``--real`` profiles a one-layer copy of each model's real training step
(bf16 autocast), kernels by aten op, to see the position-bias ops the model runs
outside the chain.

    python benchmarks/attention_finding_profile.py --out $OUT/attention_finding_profile.json --sweep --real
    python benchmarks/attention_finding_profile.py --out $OUT/p.json --sweep-grid --models perceiver-pytorch-readme \
        gpt-oss-20b --real perceiver-pytorch-readme
    python benchmarks/attention_finding_profile.py --device cpu --out /tmp/p.json --sweep --tiny   # smoke
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

#: (corpus model, module pattern of its finding): the three outside 25% and controls within
TARGETS = (
    ("wavlm-base-plus", "encoder.layers.*.attention"),
    ("speecht5-asr", "speecht5.encoder.wrapped_encoder.layers.*.attention"),
    ("speecht5-asr", "speecht5.decoder.wrapped_decoder.layers.*.self_attn"),
    ("speecht5-asr", "speecht5.decoder.wrapped_decoder.layers.*.encoder_attn"),
    ("musicgen-small", "text_encoder.encoder.block.*.layer.*.SelfAttention"),
    ("deberta-v3-base", "encoder.layer.*.attention.self"),
    # issue 26's real corpus (benchmarks/real_corpus): the four outside 25% on 2026-11-26, and controls
    ("perceiver-pytorch-readme", "layers.*.cross_attn.fn"),
    ("perceiver-pytorch-readme", "layers.*.self_attns.*.*.fn"),
    ("gpt-oss-20b", "model.layers.*.self_attn"),
    ("bigbird-roberta-base", "bert.encoder.layer.*.attention.self"),
    ("vit-pytorch-readme", "transformer.layers.*.*"),
    ("canine-s", "encoder.layer.*.attention.self"),
    ("canine-s", "final_char_encoder.layer.0.attention.self"),
    ("mpnet-base", "mpnet.encoder.layer.*.attention.attn"),
    ("pegasus-x-base", "model.encoder.layers.*.self_attn"),
    ("timm-swin-tiny-patch4-window7-224", "layers.*.blocks.*.attn"),
    ("x-transformers-gpt", "attn_layers.layers.*.*.attend"),
    ("codegen-350m-mono", "transformer.h.*.attn"),
    ("gpt-neo-125m", "transformer.h.*.attn.attention"),
)
DEPTH_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers", "encoder_layers", "decoder_layers")
PROFILED_CALLS = 5


# -- profiling ------------------------------------------------------------------------------


def profile_kernels(fn: Callable[[], object], device: str, calls: int = PROFILED_CALLS) -> list[dict[str, Any]]:
    """Each (aten op, kernel) ``fn`` launches with its CUDA time per call of ``fn`` (us),
    largest first; on the CPU, the ops' CPU self time (a smoke test)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    for _ in range(2):
        fn()
    sync(device)
    with profile(activities=acts) as prof:
        for _ in range(calls):
            fn()
        sync(device)
    rows: dict[tuple[str, str], list[float]] = {}
    for evt in prof.events():
        kernels = list(getattr(evt, "kernels", []) or [])
        if device != "cuda" and evt.name.startswith("aten::") and not evt.cpu_children:
            kernels = [type("K", (), {"name": "(cpu)", "duration": evt.self_cpu_time_total})()]
        for k in kernels:
            row = rows.setdefault((evt.name, k.name), [0.0, 0])
            row[0] += float(k.duration)
            row[1] += 1
    out = [{"op": op, "kernel": kernel, "us": us / calls, "launches": n / calls}
           for (op, kernel), (us, n) in rows.items()]
    if device == "cuda" and not out:  # no op attribution in this torch: kernels alone
        for evt in prof.key_averages():
            us = float(getattr(evt, "self_device_time_total", 0.0) or getattr(evt, "self_cuda_time_total", 0.0))
            if us > 0:
                out.append({"op": "?", "kernel": evt.key, "us": us / calls, "launches": evt.count / calls})
    del torch
    return sorted(out, key=lambda r: -r["us"])


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def timed_ms(fn: Callable[[], object], device: str) -> float:
    from shapelint.measure.timer import Timing, cuda_timer, wall_timer

    timer = cuda_timer() if device == "cuda" else wall_timer(reps=2, warmup=1)
    return Timing(tuple(timer(fn))).median


def graphed_ms(fn: Callable[[], object], device: str) -> float | None:
    """``fn`` captured as a CUDA graph (``shapelint.measure.kernels.graphed``, as
    ``gpu_block_runner(graph=True)`` times a block) and its replay timed: the block's GPU time without the host's time to
    issue its kernels (None where it cannot be captured, or on the CPU)."""
    from shapelint.measure.kernels import graphed

    replay = graphed(fn, device)
    return None if replay is fn else timed_ms(replay, device)


def kernel_table(rows: list[dict[str, Any]], limit: int = 30) -> str:
    lines = [f"      {'us/call':>9} {'n':>4}  {'aten op':38} kernel"]
    for r in rows[:limit]:
        lines.append(f"      {r['us']:9.1f} {r['launches']:4.1f}  {r['op'][:38]:38} {r['kernel'][:90]}")
    lines.append(f"      {sum(r['us'] for r in rows):9.1f}       total")
    return "\n".join(lines)


# -- shapelint's side ---------------------------------------------------------------------


def layers_of(f: Any) -> int:
    return max(1, len(f.modules))


def estimate_rows(f: Any, gemms: dict[int, Any], hw: Any) -> dict[str, Any]:
    """shapelint's price of each op of the finding's first layer, before and after."""
    from shapelint.price.gemm import gemm_ms
    from shapelint.price.kernels import op_ms

    n = layers_of(f)
    per = len(f.gemms) // n
    before = [{"what": f"gemm {g.op} {g.phase} {g.role} b{g.batch} {g.m}x{g.n}x{g.k} {g.dtype}",
               "ms": gemm_ms(g, hw)} for g in (gemms[i] for i in f.gemms[:per])]
    ops = list(f.fuses)[: len(f.fuses) // n]  # the chain, layer by layer (forward, then backward)
    before += [{"what": f"op {op.name}{' (bwd)' * bool(op.backward)} {op.kind} {op.bytes / 1e6:.0f} MB",
                "ms": op_ms(op, hw)} for op in ops]
    after = [{"what": f"fused {g.op} {g.phase} {dict(g.extra).get('kernel')} "
                      f"{'bias ' * bool(dict(g.extra).get('with_bias'))}"
                      f"{'bias_grad ' * ('bias_grad' in dict(g.extra))}"
                      f"{'dropout' * bool(dict(g.extra).get('with_dropout'))}", "ms": gemm_ms(g, hw)}
             for g in f.after[:per]]
    added = f.est_ms_after / n - sum(r["ms"] for r in after)
    after.append({"what": "added: QK^T recompute + expanded bias gradient", "ms": added})
    return {"layers": n, "est_ms_layer": f.est_ms / n, "est_ms_after_layer": f.est_ms_after / n,
            "est_speedup": f.est_speedup, "before": before, "after": after}


def estimate_table(e: dict[str, Any]) -> str:
    lines = [f"    shapelint, one of {e['layers']} layers: before {e['est_ms_layer']:.3f} ms, "
             f"after {e['est_ms_after_layer']:.3f} ms ({e['est_speedup']:.2f}x)"]
    for side in ("before", "after"):
        lines += [f"      {side:6} {r['ms'] * 1e3:9.1f} us  {r['what']}" for r in e[side]]
    return "\n".join(lines)


# -- the findings ---------------------------------------------------------------------------


def target_of(model: str) -> Path:
    """A corpus model's target: the test corpus's, else the real corpus's, as
    corpus_findings_gpu.py takes each (``corpus_findings_gpu.target_of``)."""
    from corpus_findings_gpu import CORPORA
    from corpus_findings_gpu import target_of as corpus_target

    for corpus in CORPORA:
        try:
            return corpus_target(model, corpus)
        except FileNotFoundError:
            continue
    raise FileNotFoundError(f"no corpus target named {model}")


def lint(model: str, device: str) -> Any:
    from shapelint import hardware
    from shapelint.check import run as check
    from shapelint.pipeline.result import Options
    from shapelint.pipeline.run import lint_target

    hw = hardware.default_gpu() if device == "cuda" else hardware.resolve("h100")
    return lint_target(target_of(model), Options(), hw, check.load_rules(()))


def finding_profile(model: str, pattern: str, r: Any, args: argparse.Namespace) -> dict[str, Any]:
    from shapelint.measure.kernels import gpu_block_runner

    f = next((f for f in r.findings if f.code == "SL302" and fnmatch.fnmatch(f.module, pattern)), None)
    if f is None:
        return {"model": model, "module": pattern, "error": "no SL302 finding on this module"}
    by_index = {g.index: g for g in r.capture.gemms}
    row: dict[str, Any] = {"model": model, "module": f.module, "estimate": estimate_rows(f, by_index, r.hardware)}
    print(f"\n== {model} {f.module}\n{estimate_table(row['estimate'])}", flush=True)
    if args.device != "cuda" and not args.tiny:
        return row
    block = gpu_block_runner(args.device)(f, by_index)  # as issued; graphed below
    if block is None:
        row["error"] = "the block runner takes no such finding"
        return row
    for side, fn in zip(("before", "after"), block):
        ms = timed_ms(fn, args.device)
        kernels = profile_kernels(fn, args.device)
        graphed = graphed_ms(fn, args.device)
        row[f"measured_{side}_ms"] = ms
        row[f"graphed_{side}_ms"] = graphed
        row[f"kernels_{side}"] = kernels
        print(f"    measured {side}: {ms:.3f} ms (shapelint's timer, one layer); as a CUDA graph: "
              f"{'-' if graphed is None else format(graphed, '.3f')} ms; kernels "
              f"{sum(k['us'] for k in kernels) / 1e3:.3f} ms\n{kernel_table(kernels)}", flush=True)
    if row.get("measured_after_ms"):
        row["measured_speedup"] = row["measured_before_ms"] / row["measured_after_ms"]
        if row.get("graphed_before_ms") and row.get("graphed_after_ms"):
            row["graphed_speedup"] = row["graphed_before_ms"] / row["graphed_after_ms"]
        print(f"    measured speedup {row['measured_speedup']:.2f}x (as CUDA graphs "
              f"{row.get('graphed_speedup', 0):.2f}x), estimated {f.est_speedup:.2f}x", flush=True)
    return row


# -- the memory-efficient kernel --------------------------------------------------------------


def sweep_cases(tiny: bool, cudnn: bool = False) -> list[tuple[int, int, int, int, str, str, float]]:
    """(B, H, T, d, backend, bias, dropout); bias: none, const (full, no grad), grad (full,
    needs its gradient), bcast_grad ([1, H, T, T], needs its gradient), tt (a [T, T] mask
    with no gradient: SL302's fix where the chain adds a constant mask). ``cudnn``: cuDNN
    with and without that mask and dropout instead."""
    if cudnn:
        shapes = [(1, 2, 64, 64)] if tiny else [(8, 12, t, 64) for t in (512, 1024)]
        variants = [("cudnn", bias, p) for bias in ("none", "tt") for p in (0.0, 0.1)]
        return [(*s, *v) for s in shapes for v in variants]
    shapes = [(1, 2, 64, 64)] if tiny else [(8, 12, t, 64) for t in (512, 1023, 1024, 1500)]
    variants = [("cudnn", "none", 0.0), ("flash", "none", 0.0), ("efficient", "none", 0.0),
                ("efficient", "none", 0.1), ("efficient", "const", 0.0), ("efficient", "grad", 0.0),
                ("efficient", "grad", 0.1), ("efficient", "bcast_grad", 0.0), ("efficient", "bcast_grad", 0.1)]
    return [(*s, *v) for s in shapes for v in variants]


#: (B·H, Tq, Tk, d): fused kernels whose grid (B·H · Tq / 128 query tiles forward) fills
#: few of the H100's 132 SMs (perceiver's cross-attention: 8 · 2 tiles over 50176 keys)
#: beside full-grid shapes of like work, and the real corpus's SL302 shapes
GRID_SHAPES = ((8, 256, 50176, 64), (8, 256, 12544, 64), (16, 256, 12544, 64), (32, 256, 12544, 64),
               (64, 256, 12544, 64), (128, 256, 6272, 64), (8, 2048, 12544, 64), (8, 12544, 256, 64),
               (64, 256, 256, 64), (96, 64, 1024, 64), (96, 64, 448, 64), (1152, 64, 192, 64),
               (512, 1024, 1024, 64), (96, 1024, 1024, 64), (8, 128, 50176, 64))


def grid_cases(tiny: bool) -> list[tuple[tuple[int, int, int, int, str, str, float], int]]:
    """The grid sweep, (case, keys): PyTorch's own kernel choice without a mask and with a
    [Tq, Tk] one."""
    shapes = [(2, 64, 128, 64)] if tiny else list(GRID_SHAPES)
    return [((1, bh, tq, d, "default", bias, 0.0), tk) for bh, tq, tk, d in shapes for bias in ("none", "tt")]


def sweep_case(b: int, h: int, t: int, d: int, backend: str, bias: str, p: float, device: str,
               tk: int | None = None) -> dict[str, Any]:
    """One SDPA call timed and profiled (``tk``: keys, where not ``t``; backend
    ``default``: the kernel PyTorch picks)."""
    import contextlib

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    dtype = torch.bfloat16
    tk = t if tk is None else tk
    q = torch.randn(b, h, t, d, device=device, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(b, h, tk, d, device=device, dtype=dtype, requires_grad=True) for _ in range(2))
    mask = None
    if bias != "none":
        shape = (1, h, t, tk) if bias == "bcast_grad" else (t, tk) if bias == "tt" else (b, h, t, tk)
        mask = torch.randn(*shape, device=device, dtype=dtype, requires_grad=bias.endswith("grad"))
    inputs = (q, k, v, mask) if mask is not None and mask.requires_grad else (q, k, v)
    grad = torch.randn_like(q)

    def forward() -> Any:
        pick = sdpa_kernel(backends[backend]) if device == "cuda" and backend in backends else contextlib.nullcontext()
        with pick:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)

    def both() -> Any:
        return torch.autograd.grad(forward(), inputs, grad)

    row: dict[str, Any] = {"b": b, "h": h, "t": t, "tk": tk, "d": d, "backend": backend, "bias": bias, "dropout": p}
    try:
        both()
    except RuntimeError as exc:
        row["error"] = str(exc).splitlines()[0][:200]
        return row
    row["fwd_ms"] = timed_ms(forward, device)
    row["fwd_bwd_ms"] = timed_ms(both, device)
    row["kernels"] = profile_kernels(both, device, calls=3)
    return row


def sweep(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    print(f"\n== SDPA kernel sweep\n{'B':>2} {'H':>4} {'Tq':>5} {'Tk':>6} {'d':>4} {'kernel':9} {'bias':10} "
          f"{'drop':4} {'fwd ms':>8} {'f+b ms':>8}  top kernels (us)", flush=True)
    cases = (grid_cases(args.tiny) if args.sweep_grid else []) + [
        (case, None) for case in (sweep_cases(args.tiny, args.sweep_cudnn) if args.sweep or args.sweep_cudnn else [])]
    for case, tk in cases:
        r = sweep_case(*case, args.device, tk=tk)
        rows.append(r)
        top = "; ".join(f"{k['kernel'][:40]} {k['us']:.0f}" for k in r.get("kernels", [])[:4])
        shown = f"{r['fwd_ms']:8.3f} {r['fwd_bwd_ms']:8.3f}" if "fwd_ms" in r else f"refused: {r['error'][:60]}"
        print(f"{r['b']:>2} {r['h']:>4} {r['t']:>5} {r['tk']:>6} {r['d']:>4} {r['backend']:9} {r['bias']:10} "
              f"{r['dropout']:<4} {shown}  {top}", flush=True)
        if args.device == "cuda":
            import torch

            torch.cuda.empty_cache()
    return rows


# -- the real module --------------------------------------------------------------------------


def one_layer_config(model: str, folder: Path) -> Path:
    """A one-layer copy of a config.json target (a model.py target as it is)."""
    def cut(d: Any) -> Any:
        if isinstance(d, dict):
            return {k: (1 if k in DEPTH_KEYS and isinstance(v, int) else cut(v)) for k, v in d.items()}
        return d
    target = target_of(model)
    if target.suffix != ".json":
        return target
    out = folder / model / "config.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(cut(json.loads(target.read_text())), indent=1))
    return out


def real_step(model: str, args: argparse.Namespace) -> dict[str, Any]:
    """One-layer copy of ``model``'s training step as ``--verify --step`` runs it, profiled."""
    from shapelint.load.real import build
    from shapelint.measure.step_train import make_trainer

    with tempfile.TemporaryDirectory() as tmp:
        built = build(one_layer_config(model, Path(tmp)), device=args.device)
    t = make_trainer("before", built, built.inputs, device=args.device, precision="bf16", training=True,
                     optimizer="adamw", compile=False)
    ms = timed_ms(t.step, args.device)
    kernels = profile_kernels(t.step, args.device, calls=3)
    print(f"\n== {model}, one layer of each stack, real training step: {ms:.3f} ms\n{kernel_table(kernels, 45)}",
          flush=True)
    return {"model": model, "step_ms": ms, "kernels": kernels}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON results file")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--models", nargs="*", help="corpus models whose TARGETS to profile (default: all; none: none)")
    p.add_argument("--sweep", action="store_true", help="the memory-efficient kernel over shapes")
    p.add_argument("--sweep-cudnn", action="store_true", help="the sweep: cuDNN with a [T, T] mask and dropout")
    p.add_argument("--sweep-grid", action="store_true",
                   help="the sweep: PyTorch's kernel over grids that fill few SMs, and the real corpus's shapes")
    p.add_argument("--real", nargs="*", metavar="MODEL",
                   help="profile a one-layer real training step of each model (default: the profiled ones)")
    p.add_argument("--tiny", action="store_true", help="CPU smoke: run the blocks and a tiny sweep on the CPU")
    args = p.parse_args()
    import torch
    from machine_info import machine

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("attention_finding_profile: no CUDA GPU; --device cpu smoke-tests")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "findings": [], "sweep": [],
                           "real": []}

    def save() -> None:
        out.write_text(json.dumps(doc, indent=1) + "\n")

    start = time.monotonic()
    if args.sweep or args.sweep_cudnn or args.sweep_grid:
        doc["sweep"] = sweep(args)
        save()
    targets = [(m, pat) for m, pat in TARGETS if args.models is None or m in args.models]
    linted: dict[str, Any] = {}
    for model, pattern in targets:
        try:
            if model not in linted:
                linted[model] = lint(model, args.device)
            doc["findings"].append(finding_profile(model, pattern, linted[model], args))
        except Exception as exc:  # one finding that cannot run: say so, go on
            doc["findings"].append({"model": model, "module": pattern, "error": f"{type(exc).__name__}: {exc}"[:300]})
            print(f"{model} {pattern}: {type(exc).__name__}: {exc}", flush=True)
        save()
        if args.device == "cuda":
            torch.cuda.empty_cache()
    if args.real is not None:
        for model in args.real or list(dict.fromkeys(m for m, _ in targets)):
            try:
                doc["real"].append(real_step(model, args))
            except Exception as exc:
                doc["real"].append({"model": model, "error": f"{type(exc).__name__}: {exc}"[:300]})
                print(f"{model} real step: {type(exc).__name__}: {exc}", flush=True)
            save()
            if args.device == "cuda":
                torch.cuda.empty_cache()
    doc["elapsed_s"] = round(time.monotonic() - start, 1)
    save()
    print(f"\nwrote {out} ({doc['elapsed_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
