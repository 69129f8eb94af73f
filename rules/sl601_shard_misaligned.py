"""A layer size aligned on one GPU is misaligned on its tensor-parallel shard.

## What it does
Under ``--tp N``, checks the layers tensor parallelism splits (column-parallel
outputs, row-parallel inputs) for a size that is a multiple of 16 bytes whole but
whose shard, the size divided by N, is not: ``intermediate_size = 5464`` is 683 × 8,
aligned on one GPU, and 2732 = 683 × 4 on each of 2 GPUs. It suggests the whole
size as a multiple of 8 × N elements (bf16), so that every shard is aligned.
Vocabulary sizes are SL501's and sizes misaligned even whole are SL101's.

## Why is this bad?
Each GPU runs the shard's GEMMs, and cuBLAS's fast kernels need 16-byte aligned
rows of the shard: a misaligned leading dimension runs at 0.17-0.4 of the aligned
rate on an H100 (SL101's measurements), and a layer that was fine on one GPU slows
exactly when it is split. Megatron-LM pads the vocabulary to a multiple of
128 × TP for the same reason; other sizes it leaves to the user.

## Example
```python
# intermediate_size 5464 with --tp 2: 2732 per GPU
nn.Sequential(nn.Linear(2048, 5464), nn.GELU(), nn.Linear(5464, 2048))
```

## Use instead
```python
nn.Sequential(nn.Linear(2048, 5472), nn.GELU(), nn.Linear(5472, 2048))  # 2736 per GPU
```
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from shapelint.check.rule_api import Example, RuleContext, phases
from shapelint.hardware import Hardware
from shapelint.model.records import (
    Change,
    Dim,
    Gemm,
    Proposal,
    Severity,
    SizeSearch,
    Suggestion,
)
from shapelint.physics.alignment import misaligned_layer_sizes
from shapelint.physics.reshape import resize

CODE = "SL601"
NAME = "shard-misaligned"
SEVERITY: Severity = "error"

#: search for the shard's padded size up to the next multiple of this many elements
SEARCH_SPAN = 256

BAD = [
    Example("nn.Sequential(nn.Linear(2048, 5464), nn.GELU(), nn.Linear(5464, 2048))", "torch.randn(8192, 2048)",
            tp=2, expect={"from": 2732, "to": 2736}, min_speedup=1.5),
    Example("nn.Sequential(nn.Linear(4096, 11000), nn.GELU(), nn.Linear(11000, 4096))", "torch.randn(8192, 4096)",
            tp=4, expect={"from": 2750, "to": 2752}, min_speedup=1.5),
]
GOOD = [
    # 5472 = 2 x 2736: every shard aligned
    Example("nn.Sequential(nn.Linear(2048, 5472), nn.GELU(), nn.Linear(5472, 2048))", "torch.randn(8192, 2048)",
            tp=2),
    # one GPU: 5464 is aligned
    Example("nn.Sequential(nn.Linear(2048, 5464), nn.GELU(), nn.Linear(5464, 2048))", "torch.randn(8192, 2048)"),
]


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Proposal]:
    if context.tp <= 1:
        return

    def skip(value: int, g: Gemm) -> bool:
        return context.is_vocab_dim(value) or not context.is_shard_of_aligned(value, g, hardware)

    for value, covered in misaligned_layer_sizes(gemms, hardware, skip):
        yield _proposal(covered, value, hardware, context)


def _proposal(covered: tuple[Gemm, ...], value: int, hw: Hardware, context: RuleContext) -> Proposal:
    g = covered[0]
    align = hw.align_elems(g.dtype_bytes)
    param = g.param(value) or "size"
    whole = value * context.tp

    def at(sizes: tuple[int, ...]) -> Change:
        (to,) = sizes
        return Change(
            Suggestion(param, value, to),
            tuple(resize(h, value, to) for h in covered),
            f"{param} = {whole} is aligned on one GPU, but split over --tp {context.tp} each GPU's shard is {value}, "
            f"not a multiple of {align} elements (16 bytes), a leading dimension of {len(covered)} {g.dtype} GEMMs "
            f"({phases(covered)}): make the whole size {to * context.tp}, a multiple of {align} × {context.tp}",
            (("dimension", value), ("whole", whole), ("tp", context.tp), ("align_elems", align)),
        )

    return Proposal(CODE, NAME, SEVERITY, covered, SizeSearch((Dim(value, align, SEARCH_SPAN),), at))
