"""Tile and wave quantization: cuBLAS computes a GEMM's ``m x n`` output in whole
tiles (the profile's tile shapes), and runs the tiles in waves of one per SM.

>>> from shapelint.hardware import resolve
>>> round(quantization(16384, 776, 1, resolve("h100")).tile, 4)  # 13 tiles of 64 for 776 columns
0.9327
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from shapelint.hardware import Hardware, ceil_div
from shapelint.model.records import Gemm, gemm_flops

Cause = Literal["tile", "wave"]


@dataclass(frozen=True)
class Quantization:
    """For the profile tile that wastes least: the useful fraction of the output
    tiles' work (``tile``) and of the waves' time (``wave``: the last partial wave,
    weighted by how much of it cuBLAS still pays on this architecture)."""

    tile: float
    wave: float
    shape: tuple[int, int]

    def efficiency(self, cause: Cause) -> float:
        return self.tile if cause == "tile" else self.wave


def quantization(m: int, n: int, batch: int, hw: Hardware) -> Quantization:
    best = Quantization(0.0, 0.0, hw.tiles[0])
    for tm, tn in hw.tiles:
        tiles = ceil_div(m, tm) * ceil_div(n, tn) * batch
        tile_eff = (m * n * batch) / (tiles * tm * tn)
        wave_raw = (tiles / hw.sms) / ceil_div(tiles, hw.sms)
        wave_eff = 1.0 - hw.wave_weight * (1.0 - wave_raw)
        if tile_eff * wave_eff > best.tile * best.wave:
            best = Quantization(tile_eff, wave_eff, (tm, tn))
    return best


def waste(gemms: Iterable[Gemm], hw: Hardware, cause: Cause) -> float:
    """Share of the math of ``gemms`` (FLOP-weighted) that ``cause`` quantization
    throws away: what it costs where the GEMMs are compute-bound (the pricer decides
    whether they are)."""
    return shape_waste(((g.m, g.n, g.k, g.batch) for g in gemms), hw, cause)


def shape_waste(shapes: Iterable[tuple[int, int, int, int]], hw: Hardware, cause: Cause) -> float:
    """:func:`waste` of GEMMs given as (m, n, k, batch)."""
    useful = spent = 0.0
    for m, n, k, batch in shapes:
        flops = gemm_flops(m, n, k, batch)
        useful += flops
        spent += flops / quantization(m, n, batch, hw).efficiency(cause)
    return 1 - useful / spent if spent else 0.0
