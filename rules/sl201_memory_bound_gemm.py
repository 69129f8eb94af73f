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
suggests it. Only a weight's GEMMs count (two activations, as in a chunked scan,
have no token count); a layer that sees fewer tokens than the step (an output layer
on the last position only) is told why. The finding covers the module's GEMMs of
every phase that share that token dimension. Layers too narrow to become compute-bound
at any token count are not proposed.

The estimated speedup is a throughput gain (``"est_speedup_kind": "throughput"``),
not a shorter step: time per token now over time per token at the suggested count.

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

from collections.abc import Iterable, Sequence

from shapelint.check.rule_api import Example, RuleContext, by_module, few_tokens_note
from shapelint.hardware import Hardware
from shapelint.model.records import ATTN_ROLES, Change, Gemm, Proposal, Severity, Suggestion
from shapelint.physics.reshape import resize
from shapelint.physics.roofline import compute_bound, ridge

CODE = "SL201"
NAME = "memory-bound-gemm"
SEVERITY: Severity = "info"

#: look for the compute-bound token count up to this many tokens
MAX_TOKENS = 1 << 24
#: roles whose GEMM dimensions are not the token count of a weight GEMM
SKIP_ROLES = ATTN_ROLES | {"after_softmax", "conv"}

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


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Proposal]:
    for _module, own in by_module(g for g in gemms if g.role not in SKIP_ROLES).items():
        needed: dict[int, int] = {}  # tokens now -> tokens needed
        for g in own:
            tokens = _tokens(g) if g.phase == "forward" else None
            if tokens is None or compute_bound(g, hardware):
                continue
            to = _tokens_needed(g, tokens, ridge(g, hardware))
            if to is not None:
                needed[tokens] = max(to, needed.get(tokens, 0))
        for tokens, to in needed.items():
            covered = tuple(h for h in own if tokens in (h.m, h.n, h.k))
            yield _proposal(covered, tokens, to, hardware, few_tokens_note(tokens, context.tokens))


def _tokens(g: Gemm) -> int | None:
    """The forward GEMM's token dimension: the one of m, n, k that is not a constructor
    parameter (``m`` of a Linear) where the two others are (the weight); None for two
    activations (Mamba2's chunked scan: its 5 is the chunk count, not tokens)."""
    free = [v for v in (g.m, g.n, g.k) if g.param(v) is None]
    return free[0] if len(free) == 1 else None


def intensity_at(g: Gemm, tokens: int, to: int) -> float:
    """The GEMM's arithmetic intensity with ``to`` tokens instead of ``tokens``."""
    return resize(g, tokens, to).intensity


def _tokens_needed(g: Gemm, tokens: int, target: float) -> int | None:
    """The smallest token count whose intensity reaches ``target`` (intensity grows
    with the token count); None when no count up to MAX_TOKENS does."""
    if intensity_at(g, tokens, MAX_TOKENS) < target:
        return None
    lo, hi = tokens, MAX_TOKENS  # intensity(lo) < target <= intensity(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if intensity_at(g, tokens, mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"

def _proposal(covered: tuple[Gemm, ...], tokens: int, to: int, hw: Hardware, why: str = "") -> Proposal:
    g = next(h for h in covered if h.phase == "forward")
    ops_per_byte = ridge(g, hw)
    after = tuple(resize(h, tokens, to) for h in covered)
    change = Change(Suggestion("batch", tokens, to), after, (
        f"memory-bound at {_count(tokens, 'token')} per step: arithmetic intensity {g.intensity:.0f} FLOP/B "
        f"< {ops_per_byte:.0f}, the GPU's {g.dtype} ops:byte ({_count(len(covered), 'GEMM')}); "
        f"{to} tokens per step (batch x sequence) make it compute-bound{why}"),
        (("intensity", g.intensity), ("ops_per_byte", ops_per_byte),
         ("intensity_after", after[covered.index(g)].intensity), ("tokens", tokens), ("tokens_needed", to)),
    )
    return Proposal(CODE, NAME, SEVERITY, covered, change, gain="throughput")
