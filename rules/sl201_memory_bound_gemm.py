"""A layer's GEMMs are memory-bound: too few tokens per step to use the GPU's math.

## What it does
For each module, takes its forward GEMMs (not attention, not convolutions) and
compares their arithmetic intensity (FLOP per byte moved: ``Gemm.intensity``)
with the GPU's ops:byte ratio in that dtype (``Hardware.ops_per_byte``: the
datasheet ridge point of the roofline, as NVIDIA's guides quote it). Below it,
the GEMM waits on memory. For a Linear with an ``in x out`` weight and ``T``
tokens, ``intensity(T) = 2·T·in·out / (bytes·(T·in + in·out + T·out))``: the
rule solves for the smallest token count (the GEMM dimension that is not a
module parameter: ``m`` of a Linear's forward) that reaches the ridge, and
suggests it. The finding covers the module's GEMMs of every phase that share
that token dimension. Layers too narrow to become compute-bound at any token
count, and modules whose GEMM time is a negligible share of the step, are not
reported.

The estimated speedup is a throughput gain, not a shorter step: time per token
at the current token count over time per token at the suggested one (the step
gets longer, but each token costs less). ``est_ms_after`` is the time the
current tokens would take at the larger batch's per-token rate, and the finding's
details say ``"est_speedup_kind": "throughput"``.

## Why is this bad?
A memory-bound GEMM spends its time reading the weights, whatever the batch.
NVIDIA's *Matrix Multiplication Background* guide works the example of
``nn.Linear(1024, 4096)`` in fp16: at batch 512 its intensity is 315 FLOP/B,
above a V100's 139 (125 TFLOP/s / 900 GB/s): compute-bound; at batch 1 it is
about 1 FLOP/B. Measured on our H200 (bf16, 4096 x 4096 weight,
shared/data/gemm_truth.json rows tagged batch_sweep): 1 to 128 tokens all take
0.018-0.019 ms (1.8 to 227 TFLOP/s: the time goes to reading the 32 MB of
weights), 256 tokens 0.023 ms (377 TFLOP/s), 1024 tokens 0.048 ms (724 TFLOP/s).
The rule asks for 230 tokens there (ridge 989 / 4.8 = 206 FLOP/B) and estimates
207x the tokens/s of batch 1; the measurement gives 207x at 256 tokens.

## Example
```python
layer = nn.Linear(1024, 4096)
y = layer(torch.randn(1, 1024))      # one token per step, fp16 on a V100
```

## Use instead
```python
y = layer(torch.randn(168, 1024))    # batch requests / tokens: 168 reach the ridge
```
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Iterable, Sequence

from shapelint.estimate import resize, total_ms
from shapelint.hardware import Hardware
from shapelint.records import Finding, Gemm, Suggestion
from shapelint.rule_api import Example, RuleContext, by_module, make_finding

CODE = "SL201"
NAME = "memory-bound-gemm"
SEVERITY = "info"

#: report a GEMM whose intensity is below this fraction of the GPU's ops:byte ratio
RIDGE_FRACTION = 1.0
#: ignore modules (all repeats of a layer together) under this share of the step's GEMM time
MIN_STEP_SHARE = 0.02
#: look for the compute-bound token count up to this many tokens
MAX_TOKENS = 1 << 24
#: roles whose GEMM dimensions are not the token count of a weight GEMM
SKIP_ROLES = frozenset({"attn_scores", "attn_values", "after_softmax", "conv"})

BAD = [
    # the guide's example at batch 1 (inference: one token per step)
    Example("nn.Linear(1024, 4096)", "torch.randn(1, 1024)", dtype="fp16", gpu="v100", training=False,
            expect={"parameter": "batch", "from": 1, "to": 168}, min_speedup=50.0),
    Example("nn.Linear(1024, 4096)", "torch.randn(1, 1024)", dtype="fp16", gpu="v100",
            expect={"parameter": "batch", "from": 1, "to": 168}, min_speedup=50.0),
    # the measured H200 sweep: one token through a 4096 x 4096 weight
    Example("nn.Linear(4096, 4096, bias=False)", "torch.randn(1, 4096)", gpu="h200", training=False,
            expect={"parameter": "batch", "from": 1, "to": 230}, min_speedup=100.0),
    # decode-style MLP: 8 sequences x 1 token on an H100
    Example("nn.Sequential(nn.Linear(4096, 16384), nn.GELU(), nn.Linear(16384, 4096))",
            "torch.randn(8, 1, 4096)", training=False,
            expect={"parameter": "batch", "from": 8}, min_speedup=10.0),
]
GOOD = [
    # the guide's example at batch 512: intensity 315 > 139 on a V100
    Example("nn.Linear(1024, 4096)", "torch.randn(512, 1024)", dtype="fp16", gpu="v100"),
    Example("nn.Linear(4096, 4096)", "torch.randn(8, 1024, 4096)"),
    # a head on one pooled token: memory-bound, but a negligible share of the step
    Example("nn.Sequential(nn.Linear(1024, 8192), nn.GELU(), nn.Linear(8192, 1024),"
            " nn.AdaptiveAvgPool2d((1, None)), nn.Linear(1024, 1024))",
            "torch.randn(1, 16384, 1024)", training=False),
    # a narrow classifier head: no token count makes it compute-bound
    Example("nn.Linear(4096, 8)", "torch.randn(16384, 4096)"),
]


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Finding]:
    step_ms = total_ms(gemms, hardware)
    groups: dict[str, float] = {}
    for g in gemms:
        key = _glob(g.module)
        groups[key] = groups.get(key, 0.0) + total_ms([g], hardware)
    for module, own in by_module(g for g in gemms if g.role not in SKIP_ROLES).items():
        if step_ms <= 0 or groups.get(_glob(module), 0.0) < MIN_STEP_SHARE * step_ms:
            continue
        needed: dict[int, int] = {}  # tokens now -> tokens needed
        for g in own:
            if g.phase != "forward":
                continue
            ridge = hardware.ops_per_byte(g.dtype)
            if g.intensity >= RIDGE_FRACTION * ridge:
                continue
            tokens = _tokens(g)
            if tokens is None:
                continue
            to = _tokens_needed(g, tokens, ridge)
            if to is not None:
                needed[tokens] = max(to, needed.get(tokens, 0))
        for tokens, to in needed.items():
            covered = [h for h in own if tokens in (h.m, h.n, h.k)]
            yield _finding(covered, tokens, to, hardware)


def _glob(module: str) -> str:
    """``h.3.mlp`` → ``h.*.mlp``: repeated layers count together."""
    return re.sub(r"(?<=\.)\d+(?=\.|$)", "*", module)


def _tokens(g: Gemm) -> int | None:
    """The forward GEMM's token dimension: the first of m, n, k that is not a
    constructor parameter of the module (``m`` of a Linear)."""
    for value in (g.m, g.n, g.k):
        if g.param(value) is None:
            return value
    return None


def intensity_at(g: Gemm, tokens: int, to: int) -> float:
    """The GEMM's arithmetic intensity with ``to`` tokens instead of ``tokens``."""
    return resize(g, tokens, to).intensity


def _tokens_needed(g: Gemm, tokens: int, ridge: float) -> int | None:
    """The smallest token count whose intensity reaches ``ridge`` (intensity grows
    with the token count); None when no count up to MAX_TOKENS does."""
    if intensity_at(g, tokens, MAX_TOKENS) < ridge:
        return None
    lo, hi = tokens, MAX_TOKENS  # intensity(lo) < ridge <= intensity(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if intensity_at(g, tokens, mid) >= ridge:
            hi = mid
        else:
            lo = mid
    return hi


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _finding(covered: list[Gemm], tokens: int, to: int, hw: Hardware) -> Finding:
    g = next(h for h in covered if h.phase == "forward")
    ridge = hw.ops_per_byte(g.dtype)
    after = [resize(h, tokens, to) for h in covered]
    # throughput: the current tokens at the larger batch's time per token
    scale = tokens / to
    speedup = total_ms(covered, hw) / (total_ms(after, hw) * scale)
    f = make_finding(
        CODE, NAME, SEVERITY, covered, after, hw,
        f"memory-bound at {_count(tokens, 'token')} per step: arithmetic intensity {g.intensity:.0f} FLOP/B "
        f"< {ridge:.0f}, the GPU's {g.dtype} ops:byte ({_count(len(covered), 'GEMM')}); "
        f"{to} tokens per step (batch x sequence) make it compute-bound "
        f"(est. {speedup:.1f}x tokens/s on these GEMMs)",
        Suggestion("batch", tokens, to),
        {
            "intensity": g.intensity,
            "ops_per_byte": ridge,
            "intensity_after": after[covered.index(g)].intensity,
            "tokens": tokens,
            "tokens_needed": to,
            "est_speedup_kind": "throughput",
            "est_ms_after_batch": total_ms(after, hw),
        },
    )
    after_ms = tuple(ms * scale for ms in f.detail("gemm_ms_after", ()))  # type: ignore[union-attr]
    details = dict(f.details)
    details["gemm_ms_after"] = after_ms
    est_after = sum(after_ms)
    return replace(
        f,
        est_ms_after=est_after,
        est_speedup=f.est_ms / est_after if f.est_ms and est_after > 0 else None,
        details=tuple(details.items()),
    )
