"""How fast CUDA runs a copy or pointwise op on each memory layout (issue 26): the rate
behind the step model's ``elementwise_efficiency`` (vectorised) and
``strided_copy_efficiency``, and the path between them that shapelint calls
``coalesced`` (``shapelint.capture.op_traffic.elementwise_access``).

TensorIterator sorts and merges dimensions before it picks a kernel, so a permuted view
times a tensor of the same permutation runs vectorised, while a broadcast operand (RoPE's
``cos``, an RMS norm's ``rsqrt``) or two permutations that agree only on the innermost
dimension take ``elementwise_kernel<128, vt>`` with an offset calculator, and a gapped
slice or a real transpose take it with badly used sectors. Each case here is one such
layout at the sizes of a language model's attention activations ([B, H, T=1024, D=128],
8-64M elements), fp32 and bf16:

- ``mul``, ``add``: ``x * y`` / ``x + y`` with ``y`` laid out per the case (or broadcast);
- ``copy``: ``out.copy_(x)`` into a contiguous ``out`` of the same dtype;
- ``_to_copy``: the same with a cast (fp32 <-> bf16), as autocast's casts run.

The score cases (``--cases scores``) are the ops hand-written attention runs on its
[B, H, T, T] scores under bf16 autocast: bf16 scores plus an fp32 bias broadcast over
them (an ALiBi [1, H, 1, T] as BLOOM builds it, MPT's sliced from rows of
``max_seq_len``, a [B, 1, 1, T] padding mask, a [1, 1, T, T] causal mask, transformers'
[B, 1, T, T] eager mask) into an fp32 output (type promotion) or a bf16 one, which
TensorIterator runs through the offset calculator with a dynamic cast per element
(shapelint's ``cast_offset`` path); ``torch.where`` with an fp32 fill; and, beside
them, the same adds without a cast, MPT's fp32 ``masked_fill`` and a contiguous upcast;
and Qwen3's q_norm casts (an fp32 weight of 128 times bf16 heads, and bf16 heads times
fp32 gradients of the transposed heads). The cast kernel's time follows its elements
more than its bytes, so the summary gives both.

Each case's kernel time is the median over ``--rounds`` blocks of ``--reps`` calls timed
with CUDA events; its bytes are the distinct bytes of every operand
(``shapelint.capture.op_traffic.stored_bytes``, a broadcast operand once), so the
fraction printed is of the datasheet bandwidth of ``--gpu`` as the profile's
``step.*_efficiency`` keys are. One profiled call names the kernel, which checks the path
shapelint predicts (``shapelint.capture.op_traffic.stream_access``: a cast takes one path
down, so a contiguous bf16 -> fp32 copy is predicted ``coalesced`` and runs ``unrolled``).
Prints a table and the median fraction by (path, dtype); ``--json`` writes every row.
About a minute on an H100 (``--cases scores`` alone: about 40 s).

    python benchmarks/pointwise_layouts.py [--gpu h100-sxm] [--json /tmp/out/pointwise_layouts.json]
    python benchmarks/pointwise_layouts.py --cases scores --json /tmp/out/score_casts.json
    python benchmarks/pointwise_layouts.py --dry-run     # no GPU: the cases and the predicted paths
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.machine_info import machine  # noqa: E402

#: elements of each case ([B, 16, 1024, 128] with B = 4, 8, 32)
SIZES = (8 << 20, 16 << 20, 64 << 20)
HEADS, SEQ, HEAD_DIM = 16, 1024, 128
DTYPES = ("float32", "bfloat16")
OPS = ("mul", "add", "copy", "_to_copy")
#: (layout, what it stands for); the binary ops take every layout, the copies the
#: ones without a broadcast
LAYOUTS: tuple[tuple[str, str], ...] = (
    ("contiguous", "x, y contiguous [B,H,T,D]"),
    ("permuted", "x, y both [B,T,H,D].transpose(1, 2): TensorIterator merges them back"),
    ("contiguous+bcast", "x contiguous, y a [1,1,T,D] broadcast (an RMS norm's rsqrt, a mask)"),
    ("permuted+bcast", "x [B,T,H,D].transpose(1, 2), y a [1,1,T,D] broadcast (RoPE's q * cos)"),
    ("mixed-perm", "x permuted, y contiguous: they agree on the innermost dimension only"),
    ("gap-slice", "x [B,H,T,D+8][..., :D]: a slice with a gap after every row"),
    ("transposed", "x [B,H,D,T].transpose(-1, -2) (y contiguous): unit stride off the innermost dimension"),
)
BROADCAST = ("contiguous+bcast", "permuted+bcast")


def operand(layout: str, n: int, dtype: Any, second: bool, device: str) -> Any:
    """The tensor of ``layout`` (``second``: the other operand of a binary op), shape [B, H, T, D]."""
    import torch

    b = n // (HEADS * SEQ * HEAD_DIM)

    def make(*shape: int) -> Any:
        return torch.randn(*shape, device=device, dtype=dtype)

    if layout in BROADCAST and second:
        return make(1, 1, SEQ, HEAD_DIM)
    if layout in ("contiguous", "contiguous+bcast") or (layout in ("mixed-perm", "transposed") and second):
        return make(b, HEADS, SEQ, HEAD_DIM)
    if layout in ("permuted", "permuted+bcast", "mixed-perm"):
        return make(b, SEQ, HEADS, HEAD_DIM).transpose(1, 2)
    if layout == "gap-slice":
        return make(b, HEADS, SEQ, HEAD_DIM + 8)[..., :HEAD_DIM]
    if layout == "transposed":
        return make(b, HEADS, HEAD_DIM, SEQ).transpose(-1, -2)
    raise ValueError(layout)


def case(op: str, layout: str, n: int, dtype_name: str, device: str) -> tuple[Callable[[], Any], list[Any], Any]:
    """(the call, its inputs, an output like the one it writes)."""
    import torch

    dtype = getattr(torch, dtype_name)
    x = operand(layout, n, dtype, False, device)
    if op in ("mul", "add"):
        y = operand(layout, n, dtype, True, device)
        fn = (lambda: x * y) if op == "mul" else (lambda: x + y)
        return fn, [x, y], fn()
    cast = {torch.float32: torch.bfloat16, torch.bfloat16: torch.float32}[dtype] if op == "_to_copy" else dtype
    out = torch.empty(x.shape, device=device, dtype=cast)
    return (lambda: out.copy_(x)), [x], out


def cases() -> list[tuple[str, str, int, str]]:
    """Every (op, layout, elements, dtype) measured."""
    return [(op, layout, n, dt) for n in SIZES for dt in DTYPES for op in OPS for layout, _ in LAYOUTS
            if not (op in ("copy", "_to_copy") and (layout in BROADCAST or layout == "mixed-perm"))]


#: attention scores [B, H, T, T]: 16M and 64M elements, and MPT-7B's at 8 x 1024 (256M);
#: the dry run builds one small score tensor on the CPU (the paths do not depend on the size)
SCORE_SHAPES = ((1, 16, 1024, 1024), (4, 16, 1024, 1024), (8, 32, 1024, 1024))
DRY_SCORES = (2, 4, 256, 256)
#: (case, what it stands for): each adds a bias to bf16 scores, or fills them
SCORE_CASES: tuple[tuple[str, str], ...] = (
    ("alibi>fp32", "bf16 scores + fp32 [1,H,1,T] ALiBi (BLOOM), fp32 out"),
    ("alibi-sliced>fp32", "bf16 scores + fp32 [H,1,2T][..., T:] (MPT's ALiBi sliced from max_seq_len rows), fp32 out"),
    ("key-mask>fp32", "bf16 scores + fp32 [B,1,1,T] padding mask, fp32 out"),
    ("causal-mask>fp32", "bf16 scores + fp32 [1,1,T,T] causal mask, fp32 out"),
    ("full-mask>fp32", "bf16 scores + fp32 [B,1,T,T] eager mask (SpeechT5, GPT-J), fp32 out"),
    ("norm-weight>fp32", "the same elements as bf16 [N, 128] * fp32 [128] (Qwen3's q_norm weight), fp32 out"),
    ("mixed-perm>fp32", "the same elements as bf16 [N,16,128] * fp32 [16,N,128].transpose(0, 1) (q_norm's backward), fp32 out"),
    ("alibi>bf16", "bf16 scores + fp32 [1,H,1,T] ALiBi into a bf16 out"),
    ("key-mask>bf16", "bf16 scores + fp32 [B,1,1,T] padding mask into a bf16 out"),
    ("causal-mask>bf16", "bf16 scores + fp32 [1,1,T,T] causal mask into a bf16 out"),
    ("where-fp32-fill", "torch.where(bool [1,1,T,T], bf16 scores, fp32 0-d fill): where casts the fill first"),
    ("alibi-bf16", "no cast: bf16 scores + bf16 [1,H,1,T]"),
    ("alibi-fp32", "no cast: fp32 scores + fp32 [1,H,1,T]"),
    ("masked_fill-fp32", "no cast: fp32 scores .masked_fill(bool [B,1,T,T], min), MPT's next op"),
    ("upcast", "contiguous cast: bf16 scores .float()"),
)


def score_case(name: str, shape: tuple[int, ...], device: str) -> tuple[Callable[[], Any], list[Any], Any]:
    """(the call, its inputs, its output) of score case ``name`` on scores of ``shape``."""
    import torch

    b, h, t, _ = shape
    bf16, fp32 = torch.bfloat16, torch.float32
    x = torch.randn(*shape, device=device, dtype=fp32 if name in ("alibi-fp32", "masked_fill-fp32") else bf16)

    def rand(*dims: int, dtype: Any = fp32) -> Any:
        return torch.randn(*dims, device=device, dtype=dtype)

    biases = {"alibi": lambda: rand(1, h, 1, t), "alibi-sliced": lambda: rand(h, 1, 2 * t)[..., t:],
              "key-mask": lambda: rand(b, 1, 1, t), "causal-mask": lambda: rand(1, 1, t, t),
              "full-mask": lambda: rand(b, 1, t, t), "alibi-bf16": lambda: rand(1, h, 1, t, dtype=bf16),
              "alibi-fp32": lambda: rand(1, h, 1, t)}
    base, _, into = name.partition(">")
    if base == "norm-weight":
        rows, weight = x.view(-1, 128), rand(128)
        return (lambda: rows * weight), [rows, weight], rows * weight
    if base == "mixed-perm":
        heads = x.view(-1, 16, 128)  # tokens x heads x head dim
        grad = rand(16, heads.shape[0], 128).transpose(0, 1)
        return (lambda: heads * grad), [heads, grad], heads * grad
    if base in biases:
        bias = biases[base]()
        if into == "bf16":
            out = torch.empty(shape, device=device, dtype=bf16)
            return (lambda: torch.add(x, bias, out=out)), [x, bias], out
        return (lambda: x + bias), [x, bias], x + bias
    if name == "where-fp32-fill":
        mask = torch.ones(1, 1, t, t, device=device, dtype=torch.bool).tril()
        fill = torch.tensor(torch.finfo(fp32).min, device=device)
        return (lambda: torch.where(mask, x, fill)), [mask, x, fill], torch.where(mask, x, fill)
    if name == "masked_fill-fp32":
        mask = torch.zeros(b, 1, t, t, device=device, dtype=torch.bool)
        return (lambda: x.masked_fill(mask, torch.finfo(fp32).min)), [x, mask], x.masked_fill(mask, 0.0)
    if name == "upcast":
        return (lambda: x.float()), [x], x.float()
    raise ValueError(name)


def dynamic_cast(kernels: list[str]) -> bool:
    """Whether the kernel casts each element it loads: TensorIterator's ``gpu_kernel_impl``
    (not ``gpu_kernel_impl_nocast``) or an unrolled kernel loading ``WithCast``."""
    text = " ".join(kernels)
    return "gpu_kernel_impl<" in text or "WithCast" in text


def agrees(row: dict[str, Any]) -> bool:
    """Whether the kernel that ran is the path shapelint predicted: vectorised or not, the
    offset-calculator kernel for ``strided`` and ``cast_offset``, and a cast per element
    exactly where ``cast_offset`` says so."""
    pred, path = row["predicted"], row["path"]
    if (path == "vectorized") != (pred == "vectorized"):
        return False
    if pred in ("strided", "cast_offset") and path != "legacy":
        return False
    return pred != "cast_offset" or row["cast"]


def kernel_names(fn: Callable[[], Any]) -> list[str]:
    """The CUDA kernels one call launches."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})


def path_of(kernels: list[str]) -> str:
    """The path a kernel name shows: ``legacy`` (``elementwise_kernel`` with an offset
    calculator), ``unrolled`` (contiguous with a dynamic cast), ``vectorized``
    (``vectorized_elementwise_kernel``, or a same-dtype contiguous copy done as a memcpy).
    A call of two kernels is judged by its op's own: ``where`` converts a 0-d fill in a
    vectorised copy of one element first, an out-of-place ``masked_fill`` clones its input
    (a memcpy) before filling it in place."""
    text = " ".join(kernels).lower()
    if " elementwise_kernel<" in f" {text}" or "::elementwise_kernel<" in text:
        return "legacy"
    if "unrolled_elementwise_kernel" in text:
        return "unrolled"
    if "vectorized_elementwise_kernel" in text or "memcpy" in text:
        return "vectorized"
    return "other"


def time_ms(fn: Callable[[], Any], reps: int, rounds: int) -> float:
    """Median per-call time over ``rounds`` blocks of ``reps`` calls queued back to back
    between CUDA events (``shapelint.measure.timer.queued_ms``), after 3 warm-up calls."""
    from shapelint.measure.timer import queued_ms

    for _ in range(3):
        fn()
    return statistics.median(queued_ms(fn, reps) for _ in range(rounds))


def run(args: argparse.Namespace) -> dict[str, Any]:
    from shapelint.hardware import local_gpu, resolve

    hw = resolve(args.gpu) if args.gpu else local_gpu() or resolve("h100")
    device = "cpu" if args.dry_run else "cuda"
    rows: list[dict[str, Any]] = []
    print(f"{'op':16} {'dtype':8} {'Melem':>5} {'layout':17} {'predicted':11} {'kernel':10} {'cast':4} "
          f"{'ms':>8} {'GB/s':>6} {'frac':>6}")
    if args.cases in ("layouts", "all"):
        for op, layout, n, dt in cases():
            if args.dry_run and n != SIZES[0]:
                continue
            size = n if not args.dry_run else HEADS * SEQ * HEAD_DIM  # one sequence on the CPU
            kclass = "pointwise" if op in ("mul", "add") else "copy"
            row = {"op": op, "dtype": dt, "elements": n, "layout": layout}
            rows.append(measured(row, kclass, *case(op, layout, size, dt, device), args, hw))
    if args.cases in ("scores", "all"):
        for shape in SCORE_SHAPES if not args.dry_run else (DRY_SCORES,):
            for name, _ in SCORE_CASES:
                fill = name in ("where-fp32-fill", "masked_fill-fp32")
                row = {"op": "score", "dtype": "scores", "elements": math.prod(shape), "layout": name,
                       "shape": list(shape)}
                rows.append(measured(row, "copy" if fill else "pointwise", *score_case(name, shape, device), args, hw))
    return {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "gpu_profile": hw.key,
            "bandwidth_gbps": hw.memory_bandwidth_gbps, "rows": rows, "summary": summary(rows)}


def measured(row: dict[str, Any], kclass: str, fn: Callable[[], Any], ins: list[Any], out: Any,
             args: argparse.Namespace, hw: Any) -> dict[str, Any]:
    """``row`` with the path shapelint predicts for the call and its bytes, and, on a GPU,
    the kernels it launched, their path, and its time and fraction of the bandwidth."""
    import torch

    from shapelint.capture.op_traffic import stored_bytes, stream_access

    row["predicted"] = stream_access(kclass, ins, [out])[1]
    row["bytes"] = nbytes = sum(stored_bytes(t) for t in ins) + stored_bytes(out)
    if not args.dry_run:
        row["kernels"] = kernel_names(fn)
        row["path"] = path_of(row["kernels"])
        row["cast"] = dynamic_cast(row["kernels"])
        row["ms"] = time_ms(fn, args.reps, args.rounds)
        row["gbps"] = nbytes / (row["ms"] * 1e-3) / 1e9
        row["fraction"] = row["gbps"] / hw.memory_bandwidth_gbps
        row["agrees"] = agrees(row)
    print(f"{row['op']:16} {row['dtype'][:8]:8} {row['elements'] >> 20:5d} {row['layout']:17} {row['predicted']:11} "
          f"{row.get('path', '-'):10} {'yes' if row.get('cast') else '-':4} {row.get('ms', 0):8.4f} "
          f"{row.get('gbps', 0):6.0f} {row.get('fraction', 0):6.3f}", flush=True)
    del fn, ins, out
    if not args.dry_run:
        torch.cuda.empty_cache()
    return row


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The median fraction of bandwidth by (predicted path, dtype, op kind) (the score
    cases by path and case), and whether every kernel took the path predicted."""
    out = []
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        kind = "binary" if r["op"] in ("mul", "add") else r["layout"] if r["op"] == "score" else r["op"]
        groups.setdefault((r["predicted"], r["dtype"], kind), []).append(r)
    if rows and "fraction" in rows[0]:
        print(f"\n{'predicted':11} {'dtype':8} {'op':17} {'n':>3} {'median frac':>11} {'min':>6} {'max':>6} paths")
    for (pred, dt, kind), rs in sorted(groups.items()):
        fr = [r["fraction"] for r in rs if "fraction" in r]
        if not fr:
            continue
        agree = all(r["agrees"] for r in rs)
        out.append({"predicted": pred, "dtype": dt, "op": kind, "cases": len(rs), "median": statistics.median(fr),
                    "min": min(fr), "max": max(fr), "paths_agree": agree})
        print(f"{pred:11} {dt[:8]:8} {kind:17} {len(rs):3d} {statistics.median(fr):11.3f} {min(fr):6.3f} "
              f"{max(fr):6.3f} {'ok' if agree else 'MISMATCH'}")
    casts = [r for r in rows if r["predicted"] == "cast_offset" and "fraction" in r]
    if casts:
        fr = [r["fraction"] for r in casts]
        ps = [1e9 * r["ms"] / r["elements"] for r in casts]
        print(f"\ncast_offset: {len(casts)} cases, {statistics.median(ps):.2f} ps an element (min {min(ps):.2f}, max "
              f"{max(ps):.2f}), {statistics.median(fr):.3f} of the bandwidth (min {min(fr):.3f}, max {max(fr):.3f}): "
              "the profile's step.cast_offset_element_ps and step.cast_offset_efficiency (the longer of the two)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", default=None,
                    help="the GPU profile whose datasheet bandwidth the fractions are of (default: this GPU's)")
    ap.add_argument("--reps", type=int, default=20, help="calls per timed block")
    ap.add_argument("--rounds", type=int, default=5, help="timed blocks (the median is kept)")
    ap.add_argument("--cases", choices=("layouts", "scores", "all"), default="all",
                    help="the layout cases, the attention-score cases (casts of a broadcast bias), or both")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: list the cases and the predicted paths")
    ap.add_argument("--json", default=None, help="write every row here")
    args = ap.parse_args(argv)
    doc = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
