"""A layer size leaves partial output tiles: the GPU computes padding it throws away.

## What it does
cuBLAS splits a GEMM's ``m x n`` output into tiles (128x256, 128x128, 64x64...)
and computes whole tiles, so a size just past a tile edge pays for a whole extra
row of tiles. For every tensor-core GEMM that is already 16-byte aligned (SL101
speaks for misaligned ones) and not attention, the rule takes each output
dimension that is a constructor parameter of the owning module (``out_features``,
``in_features``, ``out_channels``...; vocabulary sizes are SL501's) and estimates
the share of the module's GEMM time spent on partial tiles (the tile efficiency
of the profile tile that wastes least, ``estimate.quantization``). When that
share and the estimated gain of the fix both reach ``min_loss`` (5% by default),
it suggests the nearest larger size, in multiples of the alignment up to the
next multiple of the largest tile edge, that removes the waste
(``estimate.best_size``), and mentions the nearest smaller one.

Padding a layer never makes its GEMMs faster in wall-clock time (the partial
tiles already cost as much as full ones): it gives the layer the extra width for
free. So the estimate is a throughput, per unit of work: ``est_ms_after`` is the
time the current work would take at the padded layer's FLOP rate (the details
say ``"est_speedup_kind": "throughput"``, as SL201's per-token estimate;
``ms_after_wall`` holds the padded layer's own time, ``smaller_speedup`` the
wall-clock gain of the smaller size).

## Why is this bad?
The work done is rounded up to whole tiles: NVIDIA's *Matrix Multiplication
Background* guide shows throughput dropping each time a dimension crosses a tile
edge (with 128-wide tiles, ``n = 257`` computes 384 columns: a third of the
math is wasted). For ``nn.Linear(8192, 776)`` over 16384 tokens on an H100 even
the best tile (64 wide) computes 832 columns for 776: 6.7% of the GEMM time
produces nothing (estimated 1.06x per unit of work at 824, 1.08x faster at 768).

## Example
```python
nn.Linear(8192, 776)   # 776 = 12 x 64 + 8: a 13th column of 64-wide tiles, 8/64 used
```

## Use instead
```python
nn.Linear(8192, 824)   # 6% more features in the same time
nn.Linear(8192, 768)   # or 1% fewer features, 8% less time
```
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterable, Sequence

from shapelint.estimate import best_size, gemm_alignment, gemm_time, resize
from shapelint.hardware import Hardware
from shapelint.records import Finding, Gemm, Suggestion
from shapelint.rule_api import Example, RuleContext, by_module, make_finding

CODE = "SL202"
NAME = "tile-quantization"
SEVERITY = "warning"

#: GEMMs of these roles have sizes set by attention, not by a layer parameter
SKIP_ROLES = frozenset({"attn_scores", "attn_values", "after_softmax"})

BAD = [
    Example("nn.Linear(8192, 776)", "torch.randn(16384, 8192)",
            expect={"parameter": "out_features", "from": 776}, min_speedup=1.05),
    Example("nn.Linear(8192, 840)", "torch.randn(16384, 8192)", gpu="h200",
            expect={"parameter": "out_features", "from": 840}, min_speedup=1.05),
    # the hidden size of an MLP (the second layer's GEMMs with 776 outputs are memory-bound)
    Example("nn.Sequential(nn.Linear(8192, 776), nn.ReLU(), nn.Linear(776, 8192))", "torch.randn(16384, 8192)",
            expect={"parameter": "out_features", "from": 776}, min_speedup=1.05),
    Example("nn.Linear(4096, 520)", "torch.randn(16384, 4096)", dtype="fp16", gpu="a100",
            expect={"parameter": "out_features", "from": 520}, min_speedup=1.1),
]
GOOD = [
    Example("nn.Linear(8192, 768)", "torch.randn(16384, 8192)"),
    Example("nn.Linear(4096, 4096)", "torch.randn(16384, 4096)"),
    # memory-bound: the partial tiles cost nothing (SL201's business)
    Example("nn.Linear(4096, 72)", "torch.randn(16384, 4096)"),
    # misaligned: SL101 speaks first
    Example("nn.Linear(8192, 777)", "torch.randn(16384, 8192)"),
]


# -- shared with SL203 (wave quantization) ----------------------------------------


def eligible(g: Gemm, hw: Hardware) -> bool:
    """A tensor-core GEMM, 16-byte aligned, whose sizes come from layer parameters."""
    return (hw.uses_tensor_cores(g.dtype) and g.role not in SKIP_ROLES
            and gemm_alignment(g, hw) >= hw.alignment_bytes)


def seconds_without(g: Gemm, hw: Hardware, cause: str) -> float:
    """The estimated time of ``g`` if ``cause`` (``"tile"`` or ``"wave"``
    quantization) cost nothing."""
    t = gemm_time(g, hw)
    floor = hw.min_gemm_us * 1e-6
    copies = t.seconds - max(t.compute_s, t.memory_s, floor)
    compute = t.compute_s * (t.tile if cause == "tile" else t.wave)
    return max(compute, t.memory_s, floor) + copies


def inflation(gemms: Iterable[Gemm], hw: Hardware, cause: str) -> float:
    """Estimated time of ``gemms`` over their time without ``cause`` (>= 1)."""
    gemms = list(gemms)
    full = sum(gemm_time(g, hw).seconds for g in gemms)
    ideal = sum(seconds_without(g, hw, cause) for g in gemms)
    return full / ideal if ideal > 0 else 1.0


def candidates(own: Sequence[Gemm], context: RuleContext) -> list[int]:
    """Output dimensions (m, n) of a module's GEMMs that are its constructor
    parameters, vocabulary sizes left out, and the token count too (a size equal
    to it cannot be told apart from it, so resizing would change both)."""
    values = {v for g in own for v in (g.m, g.n)
              if g.param(v) and not context.is_vocab_dim(v) and v != context.tokens}
    return sorted(values)


def per_work_ms(covered: Sequence[Gemm], value: int, c: int, hw: Hardware) -> float:
    """Estimated time of the current work of ``covered`` at the FLOP rate their
    GEMMs reach with ``value`` resized to ``c`` (ms)."""
    total = 0.0
    for g in covered:
        h = resize(g, value, c)
        total += gemm_time(h, hw).seconds * g.flops / h.flops
    return 1e3 * total


def waste_share(gemms: Iterable[Gemm], hw: Hardware, cause: str) -> float:
    """Share of the estimated time of ``gemms`` lost to ``cause`` quantization."""
    return 1 - 1 / inflation(gemms, hw, cause)


def quantization_findings(
    code: str, name: str, severity: str, cause: str, gemms: Sequence[Gemm], hw: Hardware,
    context: RuleContext, search: Callable[[int], int], span: Callable[[int], int],
    describe: Callable[[list[Gemm], int, int], str],
    skip: Callable[[list[Gemm], int], bool] = lambda covered, value: False,
) -> Iterable[Finding]:
    """Findings for the layer sizes whose ``cause`` (``"tile"``/``"wave"``)
    quantization wastes at least ``context.min_loss`` of their GEMMs' time and a
    larger size (best_size with ``search(value)``) removes it; ``span(value)`` is
    how far below to look for the smaller alternative."""
    usable = [g for g in gemms if eligible(g, hw)]
    for _module, own in by_module(usable).items():
        for value in candidates(own, context):
            covered = [g for g in own if value in (g.m, g.n, g.k)]
            lost = waste_share(covered, hw, cause)
            if lost < context.min_loss or skip(covered, value):
                continue

            def cost(c: int, covered: list[Gemm] = covered, value: int = value) -> float:
                return per_work_ms(covered, value, c, hw)

            step = hw.align_elems(covered[0].dtype_bytes)
            unit = step * context.tp // _gcd(step, context.tp)

            def removes(c: int, covered: list[Gemm] = covered, value: int = value) -> bool:
                return waste_share((resize(g, value, c) for g in covered), hw, cause) < context.min_loss

            to = best_size(value, cost, step, search=search(value), must_divide=context.tp)
            if to == value or not removes(to):
                continue  # no size in reach removes it
            extra: dict[str, object] = {"waste": lost, "cause": cause}
            message = describe(covered, value, to)
            down = smaller_size(value, removes, unit, span(value))
            if down is not None and _wall_speedup(covered, value, down, hw) >= 1 / (1 - context.min_loss):
                speedup = _wall_speedup(covered, value, down, hw)
                extra.update(smaller_size=down, smaller_speedup=speedup)
                message += f" (or {down}: est. {speedup:.2f}x faster)"
            f = throughput_finding(code, name, severity, covered, value, to, hw, message, extra)
            if f.est_speedup is not None and 1 - 1 / f.est_speedup >= context.min_loss:
                yield f


def smaller_size(value: int, removes: Callable[[int], bool], unit: int, span: int) -> int | None:
    """The largest multiple of ``unit`` below ``value`` (at most ``span`` below)
    for which ``removes`` holds."""
    c = (value - 1) // unit * unit
    while c > 0 and value - c <= span:
        if removes(c):
            return c
        c -= unit
    return None


def _wall_speedup(covered: Sequence[Gemm], value: int, c: int, hw: Hardware) -> float:
    before = sum(gemm_time(g, hw).seconds for g in covered)
    return before / sum(gemm_time(resize(g, value, c), hw).seconds for g in covered)


def throughput_finding(code: str, name: str, severity: str, covered: list[Gemm], value: int, to: int,
                       hw: Hardware, message: str, extra: dict[str, object]) -> Finding:
    """A finding for resizing ``value`` → ``to`` whose estimate is per unit of work:
    ``est_ms_after`` is the time of the current work at the resized GEMMs' FLOP rate."""
    after = [resize(g, value, to) for g in covered]
    param = covered[0].param(value) or "size"
    f = make_finding(code, name, severity, covered, after, hw, message, Suggestion(param, value, to),
                     {"dimension": value, **extra})
    wall = f.detail("gemm_ms_after", ())
    per_work = tuple(ms * g.flops / a.flops for ms, g, a in zip(wall, covered, after))  # type: ignore[call-overload]
    est_after = sum(per_work)
    details = dict(f.details)
    details.update(est_speedup_kind="throughput", ms_after_wall=f.est_ms_after, gemm_ms_after=per_work)
    return replace(f, est_ms_after=est_after,
                   est_speedup=f.est_ms / est_after if f.est_ms and est_after > 0 else None,
                   details=tuple(details.items()))


def growth(covered: list[Gemm], value: int, to: int, hw: Hardware) -> str:
    """``+7% width for +0% time``: what resizing ``value`` → ``to`` costs."""
    before = sum(gemm_time(g, hw).seconds for g in covered)
    after = sum(gemm_time(resize(g, value, to), hw).seconds for g in covered)
    return f"+{round(100 * (to / value - 1))}% width for {round(100 * (after / before - 1)):+d}% time"


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


# -- this rule ----------------------------------------------------------------------


def largest_tile_edge(hw: Hardware) -> int:
    return max(max(t) for t in hw.tiles)


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Finding]:
    edge = largest_tile_edge(hardware)

    def describe(covered: list[Gemm], value: int, to: int) -> str:
        param = covered[0].param(value) or "size"
        waste = waste_share(covered, hardware, "tile")
        return (f"{param} = {value} leaves partial output tiles in {len(covered)} GEMMs: "
                f"{100 * waste:.0f}% of their time computes padding; {to} fills the tiles "
                f"({growth(covered, value, to, hardware)})")

    return quantization_findings(CODE, NAME, SEVERITY, "tile", gemms, hardware, context,
                                 lambda value: edge, lambda value: edge, describe)
