"""Convolutions: one call's geometry, its implicit GEMMs (forward, grad-input,
grad-weight) and how they change with other channel counts.

The GEMM table itself lives in ``shapelint.physics.gemm_shapes`` (the capture builds the
records with it); :func:`rebuild` runs the same functions on stand-in activations
with the new channel counts, so the two can never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from math import prod
from typing import cast

from shapelint.model.records import Gemm
from shapelint.physics.gemm_shapes import GemmShape, conv_dgrad_gemm, conv_forward_gemm, conv_wgrad_gemm

#: a stem's input channels (RGB images...) up to this many are left alone: cuDNN has
#: kernels for 3- and 4-channel inputs, and padding the image buys little
STEM_MAX_IN_CHANNELS = 4

Extra = tuple[tuple[str, object], ...]


@dataclass(frozen=True)
class ConvCall:
    """One convolution (its recorded geometry), whose forward and backward GEMMs share it."""

    module: str
    extra: Extra

    def _get(self, key: str) -> object:
        return dict(self.extra)[key]

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(int(d) for d in cast(Sequence[int], self._get(key)))

    @property
    def transposed(self) -> bool:
        return bool(self._get("transposed"))

    @property
    def groups(self) -> int:
        return int(cast(int, self._get("groups")))

    @property
    def in_channels(self) -> int:
        return self.shape("input")[1]

    @property
    def out_channels(self) -> int:
        w = self.shape("weight")
        return w[1] * self.groups if self.transposed else w[0]

    @property
    def spatial_dims(self) -> int:
        """1 for a Conv1d, 2 for a Conv2d, 3 for a Conv3d."""
        return len(self.shape("input")) - 2

    @property
    def kernel_shape(self) -> tuple[int, ...]:
        return self.shape("weight")[2:]

    @property
    def kernel(self) -> int:
        return prod(self.kernel_shape)

    @property
    def depthwise(self) -> bool:
        """One channel per group: no tensor-core GEMM (PyTorch runs its own kernels)."""
        return self.in_channels // self.groups == 1 or self.out_channels // self.groups == 1

    def with_channels(self, c_in: int, c_out: int) -> Extra:
        """The recorded geometry with other channel counts."""
        n, _, *spatial = self.shape("input")
        g = self.groups
        x = dict(self.extra)
        x["input"] = (n, c_in, *spatial)
        x["weight"] = ((c_in, c_out // g, *self.kernel_shape) if self.transposed
                       else (c_out, c_in // g, *self.kernel_shape))
        return tuple(x.items())


def conv_calls(gemms: Sequence[Gemm]) -> list[tuple[ConvCall, list[Gemm]]]:
    """Each convolution of the step with its GEMMs (forward and backward), by module
    and recorded geometry."""
    calls: dict[tuple[str, Extra], list[Gemm]] = {}
    for g in gemms:
        if g.role == "conv" and {"input", "weight", "groups", "transposed"} <= dict(g.extra).keys():
            calls.setdefault((g.module, g.extra), []).append(g)
    return [(ConvCall(module, extra), members) for (module, extra), members in calls.items()]


def as_channels_last(g: Gemm) -> Gemm:
    """``g`` with its activations in NHWC: no transposing copies (SL402's change, and
    what Inductor's layout optimisation makes of an NCHW convolution)."""
    extra = tuple((k, True if k == "channels_last" else v) for k, v in g.extra)
    return replace(g, a=replace(g.a, copied=False), b=replace(g.b, copied=False),
                   out=replace(g.out, copied=False), extra=extra)


def gemm_kind(g: Gemm, transposed: bool) -> str:
    """Which of the three implicit GEMMs ``g`` is (a transposed convolution swaps fwd and dgrad)."""
    if g.op.endswith("grad_weight"):
        return "wgrad"
    if g.op.endswith("grad_input"):
        return "fwd" if transposed else "dgrad"
    return "dgrad" if transposed else "fwd"


def misaligned_channels(c: ConvCall, align: int) -> dict[str, int]:
    """The channel parameters of ``c`` not a multiple of ``align`` per group (a
    stem's few input channels and depthwise convolutions excepted)."""
    if c.depthwise:
        return {}
    g = c.groups
    out = {}
    if (c.in_channels // g) % align and c.in_channels > STEM_MAX_IN_CHANNELS:
        out["in_channels"] = c.in_channels
    if (c.out_channels // g) % align:
        out["out_channels"] = c.out_channels
    return out


class _Activation:
    """A stand-in for an activation tensor: ``rows`` (N·H·W) of ``channels``, laid out
    NCHW (``copied``: cuDNN transposes it) or channels-last, as gemm_shapes reads it."""

    def __init__(self, rows: int, channels: int, nchw: bool) -> None:
        self.shape = (1, channels, rows)
        self._stride = (channels * rows, rows, 1) if nchw else (channels * rows, 1, channels)

    def stride(self) -> tuple[int, ...]:
        return self._stride

    def dim(self) -> int:
        return 3


class _Weight:
    def __init__(self, kernel: tuple[int, ...]) -> None:
        self.shape = (0, 0, *kernel)


def rebuild(g: Gemm, c: ConvCall, c_in: int, c_out: int) -> Gemm:
    """GEMM ``g`` of convolution ``c`` with ``c_in`` input and ``c_out`` output channels
    (the rows, N·H·W, and the memory layout stay as they are)."""
    p, q = (c_out, c_in) if c.transposed else (c_in, c_out)
    kind = gemm_kind(g, c.transposed)
    # where each side's rows and layout are recorded: fwd reads P (A) and writes Q (out);
    # dgrad reads Q (A) and writes P (out); wgrad reads Q transposed (A) and P (B)
    if kind == "fwd":
        p_op, q_rows, q_op = g.a, g.out.rows, g.out
    elif kind == "dgrad":
        p_op, q_rows, q_op = g.out, g.a.rows, g.a
    else:
        p_op, q_rows, q_op = g.b, g.a.cols, g.a
    p_act = _Activation(p_op.rows, p, p_op.copied)
    q_act = _Activation(q_rows, q, q_op.copied)
    w = _Weight(c.kernel_shape)
    shape: GemmShape
    if kind == "fwd":
        shape = conv_forward_gemm(g.op, p_act, q_act, w, c.groups)
    elif kind == "dgrad":
        shape = conv_dgrad_gemm(g.op, q_act, p_act, w, c.groups)
    else:
        shape = conv_wgrad_gemm(g.op, q_act, p_act, w, c.groups)
    return replace(g, m=shape.m, n=shape.n, k=shape.k, batch=shape.batch, a=shape.a, b=shape.b, out=shape.out,
                   extra=c.with_channels(c_in, c_out))
