"""A layer size leaves the last wave of tiles over the SMs partly empty.

## What it does
cuBLAS runs a GEMM's output tiles in waves of one tile per SM; when the tile
count is just past a multiple of the SM count, the last wave keeps most SMs idle
but takes as long as a full one. For every tensor-core GEMM that is already
16-byte aligned (SL101 speaks for misaligned ones), compute-bound and not
attention, the rule takes each output dimension that is a constructor parameter
of the owning module (vocabulary sizes are SL501's) and the share of those GEMMs'
math lost to the partial wave: the wave efficiency of the profile tile that
wastes least (``physics.quantization``), weighted by how much of it cuBLAS still
pays on this architecture (``Hardware.wave_weight``: 1.0 on Volta/Turing, 0.35
on Hopper, whose stream-K kernels hide most of it). When that share reaches
MIN_WASTE it proposes a larger size (multiples of the alignment, up to
MAX_GROWTH more) that fills the waves, and names the nearest smaller one. When
a size also leaves partial tiles, SL202 may propose the same change; the report
keeps the one that saves more.

As for SL202, a larger size never runs faster: the gain is per unit of work
(``"est_speedup_kind": "throughput"``: ``est_ms_after`` is the current work at the
resized GEMMs' FLOP rate); the smaller size's gain is in wall-clock time. The
token count is part of the tile count, so a finding holds for the batch and
sequence length linted.

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

from collections.abc import Iterable, Sequence

from shapelint.check.rule_api import Example, RuleContext, quantization_proposals
from shapelint.hardware import Hardware
from shapelint.model.records import Gemm, Proposal, Severity

CODE = "SL203"
NAME = "wave-quantization"
SEVERITY: Severity = "warning"

#: look for a wave-filling size up to this fraction above the current one
MAX_GROWTH = 0.25
#: least share of a layer's math lost to the partial last wave worth a proposal
MIN_WASTE = 0.02

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


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Proposal]:
    def describe(covered: Sequence[Gemm], param: str, value: int, to: int, waste: float) -> str:
        return (f"{param} = {value} leaves the last wave of tiles over the {hardware.sms} SMs partly empty "
                f"in {len(covered)} GEMMs: {100 * waste:.0f}% of their math; {to} fills the waves "
                f"(+{round(100 * (to / value - 1))}% width)")

    return quantization_proposals(CODE, NAME, SEVERITY, "wave", MIN_WASTE, gemms, hardware, context,
                                  lambda value: int(value * (1 + MAX_GROWTH)), lambda value: int(value * MAX_GROWTH),
                                  describe)
