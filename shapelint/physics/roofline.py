"""The roofline: a GEMM whose arithmetic intensity (FLOP per byte it must move) is
below the GPU's ops:byte ratio waits on memory; above it, on the math units.

The ratio is the datasheet ridge point in the GEMM's dtype, as NVIDIA's guides quote
it (``Hardware.ops_per_byte``).
"""

from __future__ import annotations

from shapelint.hardware import Hardware
from shapelint.model.records import Gemm


def ridge(g: Gemm, hw: Hardware) -> float:
    """The intensity (FLOP/B) at which ``g`` becomes compute-bound on ``hw``."""
    return hw.ops_per_byte(g.dtype)


def compute_bound(g: Gemm, hw: Hardware) -> bool:
    return g.intensity >= ridge(g, hw)
