"""A layer size leaves partial output tiles: the GPU computes padding it throws away.

## What it does
cuBLAS splits a GEMM's ``m x n`` output into tiles (128x256, 128x128, 64x64...)
and computes whole tiles, so a size just past a tile edge pays for a whole extra
row of tiles. For every tensor-core GEMM that is already 16-byte aligned (SL101
speaks for misaligned ones), compute-bound (``physics.roofline``: where memory
is the bottleneck partial tiles cost nothing) and not attention, the rule takes
each output dimension that is a constructor parameter of the owning module
(``out_features``, ``in_features``, ``out_channels``...; vocabulary sizes are
SL501's) and the share of those GEMMs' math spent on partial tiles (the tile
efficiency of the profile tile that wastes least, ``physics.quantization``). When
that share reaches MIN_WASTE, it proposes a larger size, in multiples of the
alignment up to the next multiple of the largest tile edge, that brings the waste
under MIN_WASTE (the pricer picks the one that costs least per unit of work), and
names the nearest smaller size that does.

Padding a layer never makes its GEMMs faster in wall-clock time (the partial
tiles already cost as much as full ones): it gives the layer the extra width for
free. So the gain is a throughput, per unit of work: ``est_ms_after`` is the time
the current work would take at the padded layer's FLOP rate (the details say
``"est_speedup_kind": "throughput"``, as SL201's per-token estimate); the smaller
size's gain is in wall-clock time.

## Why is this bad?
The work done is rounded up to whole tiles: NVIDIA's *Matrix Multiplication
Background* guide shows throughput dropping each time a dimension crosses a tile
edge (with 128-wide tiles, ``n = 257`` computes 384 columns: a third of the
math is wasted). For ``nn.Linear(8192, 776)`` over 16384 tokens on an H100 even
the best tile (64 wide) computes 832 columns for 776: 6.7% of the GEMM math
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

from collections.abc import Iterable, Sequence

from shapelint.check.rule_api import Example, RuleContext, quantization_proposals
from shapelint.hardware import Hardware
from shapelint.model.records import Gemm, Proposal, Severity

CODE = "SL202"
NAME = "tile-quantization"
SEVERITY: Severity = "warning"

#: least share of a layer's math spent on partial tiles worth a proposal
MIN_WASTE = 0.02

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


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Proposal]:
    edge = max(max(t) for t in hardware.tiles)

    def describe(covered: Sequence[Gemm], param: str, value: int, to: int, waste: float) -> str:
        return (f"{param} = {value} leaves partial output tiles in {len(covered)} GEMMs: "
                f"{100 * waste:.0f}% of their math computes padding; {to} fills the tiles "
                f"(+{round(100 * (to / value - 1))}% width)")

    return quantization_proposals(CODE, NAME, SEVERITY, "tile", MIN_WASTE, gemms, hardware, context,
                                  lambda value: edge, lambda value: edge, describe)
