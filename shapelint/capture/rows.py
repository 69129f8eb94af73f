"""The records the recorder keeps while the model runs, and a moment of the recording.

Capture builds :class:`shapelint.model.records.Gemm` and
:class:`shapelint.model.records.Op` from these rows at the end; replay copies and
compares them in between (:mod:`shapelint.capture.replay`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from shapelint.model.records import KernelClass, Source
from shapelint.physics.gemm_shapes import GemmShape


@dataclass(frozen=True)
class ModuleInfo:
    path: str
    type: str
    params: tuple[tuple[str, int], ...]
    defined_at: Source | None


#: the owner of records no module ran (a GEMM outside every module)
ROOT_INFO = ModuleInfo("<root>", "", (), None)


@dataclass(frozen=True)
class Owner:
    module: ModuleInfo
    source: Source | None
    param_operand: bool


class ShapeRow(NamedTuple):
    """One GEMM as the recorder keeps it while the model runs;
    :class:`shapelint.model.records.Gemm` is built from it at the end."""

    shape: GemmShape
    phase: str
    owner: Owner | None
    role: str
    dtype: str


class OpRow(NamedTuple):
    """One op as the recorder keeps it while the model runs (shapelint.capture.replay copies
    and compares these); :class:`shapelint.model.records.Op` is built from it at the end."""

    name: str
    kclass: KernelClass
    backward: bool
    nbytes: int
    reads: tuple[tuple[int, int], ...]
    writes: tuple[tuple[int, int], ...]
    #: how many GEMM records it stands for (a GEMM or attention marker)
    gemms: int
    owner: str
    widest: int
    strided: bool
    numel: int
    out_numel: int
    channels_last: bool = False
    coalesced: bool = False
    cast: bool = False
    shape: tuple[int, ...] = ()
    #: a softmax's row: the length of the dimension it normalises
    row: int = 0


@dataclass(frozen=True)
class Position:
    """A moment of the recording: how many GEMM records and ops it holds, and the
    last serial number it gave a tensor."""

    shapes: int
    ops: int
    serial: int
