"""A layer size leaves the last wave of tiles over the SMs partly empty.

## What it does
cuBLAS runs a GEMM's output tiles in waves of one tile per SM; when the tile
count is just past a multiple of the SM count, the last wave keeps most SMs idle
but takes as long as a full one. For every tensor-core GEMM that is already
16-byte aligned (SL101 speaks for misaligned ones) and not attention, the rule
takes each output dimension that is a constructor parameter of the owning
module (vocabulary sizes are SL501's) and estimates the share of the module's
GEMM time lost to the partial wave: the wave efficiency of the profile tile that
wastes least (``estimate.quantization``), weighted by how much of it cuBLAS still
pays on this architecture (``Hardware.wave_weight``: 1.0 on Volta/Turing, 0.35
on Hopper, whose stream-K kernels hide most of it). When that share and the
estimated gain of the fix both reach ``min_loss`` (5% by default) it suggests
the nearest larger size (multiples of the alignment, up to MAX_GROWTH more) that
fills the waves (``estimate.best_size``), and mentions the nearest smaller one.
Sizes that SL202 already reports (partial tiles) are left to it.

As for SL202, a larger size never runs faster: the estimate is per unit of work
(``"est_speedup_kind": "throughput"``: ``est_ms_after`` is the current work at the
resized GEMMs' FLOP rate; ``ms_after_wall`` the resized layer's own time,
``smaller_speedup`` the wall-clock gain of the smaller size). The token count is
part of the tile count, so a finding holds for the batch and sequence length
linted.

## Why is this bad?
NVIDIA's *Matrix Multiplication Background* guide: an A100 has 108 SMs; a
1792x1792 output in 256x128 tiles makes 98 tiles, one wave, while a slightly
larger one needs a second wave that is almost empty, so its time nearly doubles
for a few percent more work. On Hopper the measured effect is small: on our H200,
``4096 x N x 4096`` bf16 GEMMs run at 613-721 TFLOP/s for every N from 1024 to
4096 in steps of 128 (no wave cliff, and the slow points are not where the
waves break), so the rule stays quiet there at the default threshold (the
estimated wave loss of those shapes is under 3%); it speaks on Volta, Turing and
Ampere, where a GEMM has few tiles per SM.

## Example
```python
# V100 (80 SMs), fp16, 2048 tokens: the 2048 x 512 output is 64 tiles of 128x128,
# one wave with 16 SMs idle (the estimate: 15% of the layer's GEMM time)
nn.Linear(4096, 512)
```

## Use instead
```python
nn.Linear(4096, 640)   # 80 tiles: a full wave, 25% more width for 7% more time
```
"""

from __future__ import annotations

from typing import Iterable, Sequence

from shapelint.hardware import Hardware
from shapelint.records import Finding, Gemm
from shapelint.rule_api import Example, RuleContext
from shapelint.rules import sl202_tile_quantization as sl202

CODE = "SL203"
NAME = "wave-quantization"
SEVERITY = "warning"

#: look for a wave-filling size up to this fraction above the current one
MAX_GROWTH = 0.25

BAD = [
    # V100 (80 SMs), 2048 tokens: the forward output is 64 tiles of 128x128, one wave with 16 SMs idle
    Example("nn.Linear(4096, 512)", "torch.randn(2048, 4096)", dtype="fp16", gpu="v100",
            expect={"parameter": "out_features", "from": 512, "to": 640}, min_speedup=1.1),
    Example("nn.Linear(4096, 512)", "torch.randn(1024, 4096)", dtype="fp16", gpu="t4",
            expect={"parameter": "out_features", "from": 512, "to": 640}, min_speedup=1.1),
    Example("nn.Linear(4096, 1024)", "torch.randn(768, 4096)", dtype="fp16", gpu="v100",
            expect={"parameter": "out_features", "from": 1024}, min_speedup=1.1),
]
GOOD = [
    # Hopper: stream-K hides the partial wave (measured on an H200: 613-721 TFLOP/s for N = 1024..4096)
    Example("nn.Linear(4096, 1664)", "torch.randn(4096, 4096)", gpu="h200"),
    Example("nn.Linear(4096, 2688)", "torch.randn(4096, 4096)", gpu="h100"),
    # whole waves on a V100: 80 tiles of 128x128 for 80 SMs
    Example("nn.Linear(4096, 640)", "torch.randn(2048, 4096)", dtype="fp16", gpu="v100"),
    # enough tiles that the last wave is a small part of the time
    Example("nn.Linear(4096, 4096)", "torch.randn(16384, 4096)", dtype="fp16", gpu="v100"),
]


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Finding]:
    tiled = {(f.module, f.suggestion.from_) for f in sl202.check(gemms, hardware, context) if f.suggestion}

    def search(value: int) -> int:
        return int(value * (1 + MAX_GROWTH))

    def span(value: int) -> int:
        return int(value * MAX_GROWTH)

    def skip(covered: list[Gemm], value: int) -> bool:
        return (covered[0].module, value) in tiled

    def describe(covered: list[Gemm], value: int, to: int) -> str:
        param = covered[0].param(value) or "size"
        waste = sl202.waste_share(covered, hardware, "wave")
        return (f"{param} = {value} leaves the last wave of tiles over the {hardware.sms} SMs partly empty "
                f"in {len(covered)} GEMMs: {100 * waste:.0f}% of their time; {to} fills the waves "
                f"({sl202.growth(covered, value, to, hardware)})")

    return sl202.quantization_findings(CODE, NAME, SEVERITY, "wave", gemms, hardware, context,
                                       search, span, describe, skip)
