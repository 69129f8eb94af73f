"""A GEMM record with a layer size changed: what padding a layer (``resize``) or
sharding one side of it (``set_dim``) does to its dimensions and operands."""

from __future__ import annotations

from dataclasses import replace
from math import gcd

from shapelint.hardware import ceil_div
from shapelint.model.records import Dim, Gemm, Operand


def _resize_operand(op: Operand, old: int, new: int) -> Operand:
    rows = new if op.rows == old else op.rows
    cols = new if op.cols == old else op.cols
    ld = new if op.ld == old else op.ld
    # a batch stride that held `old` rows or columns grows with them
    batch_stride = op.batch_stride
    if batch_stride and (op.rows == old or op.cols == old):
        batch_stride = rows * cols if op.batch_stride == op.rows * op.cols else batch_stride
    return replace(op, rows=rows, cols=cols, ld=ld, batch_stride=batch_stride)


def resized_dims(g: Gemm, old: int, new: int) -> tuple[int, int, int]:
    """(m, n, k) of :func:`resize`'s GEMM, without building it (a size search tries many)."""
    return (new if g.m == old else g.m, new if g.n == old else g.n, new if g.k == old else g.k)


def resize(g: Gemm, old: int, new: int) -> Gemm:
    """The same GEMM with every dimension and leading dimension equal to ``old``
    set to ``new`` (what padding a layer's size from ``old`` to ``new`` does)."""
    if old == new:
        return g
    m, n, k = resized_dims(g, old, new)
    return replace(
        g,
        m=m,
        n=n,
        k=k,
        a=_resize_operand(g.a, old, new),
        b=_resize_operand(g.b, old, new),
        out=_resize_operand(g.out, old, new),
    )


def set_dim(g: Gemm, axis: str, new: int) -> Gemm:
    """The same GEMM with dimension ``axis`` (``"m"``, ``"n"`` or ``"k"``) set to
    ``new``, and the operands that span it (A is m x k, B is k x n, C is m x n)
    changed with it: their rows/cols, and their leading dimension where it was
    that dimension (a dense matrix). Unlike :func:`resize`, other dimensions of
    the same value are left alone (a square layer sharded on one side)."""
    old = getattr(g, axis)
    if old == new:
        return g

    def fix(op: Operand, rows_axis: str, cols_axis: str) -> Operand:
        rows = new if rows_axis == axis else op.rows
        cols = new if cols_axis == axis else op.cols
        # the leading dimension is the extent of the unit-stride side when dense
        dense_side = rows_axis if op.transposed else cols_axis
        ld = new if dense_side == axis and op.ld == old else op.ld
        bs = rows * cols if op.batch_stride and op.batch_stride == op.rows * op.cols else op.batch_stride
        return replace(op, rows=rows, cols=cols, ld=ld, batch_stride=bs)

    dims = {"m": g.m, "n": g.n, "k": g.k, axis: new}
    return replace(g, m=dims["m"], n=dims["n"], k=dims["k"], a=fix(g.a, "m", "k"), b=fix(g.b, "k", "n"),
                   out=fix(g.out, "m", "n"))


def unit(dim: Dim) -> int:
    """The smallest step between candidate sizes: a multiple of the alignment step
    and of the tensor-parallel degree."""
    return dim.step * dim.must_divide // gcd(dim.step, dim.must_divide)


def candidates(dim: Dim) -> list[int]:
    """The sizes to try for ``dim``: multiples of ``unit(dim)`` from ``value`` up to
    the next multiple of ``search`` (at least one)."""
    u = unit(dim)
    first = ceil_div(dim.value, u) * u
    search = max(dim.search, u)
    limit = max(first, ceil_div(dim.value, search) * search)
    return list(range(first, limit + 1, u))


def smaller(dim: Dim) -> list[int]:
    """Multiples of ``unit(dim)`` below ``value``, at most ``below`` under it, largest first."""
    u = unit(dim)
    c = (dim.value - 1) // u * u
    out = []
    while c > 0 and dim.value - c <= dim.below:
        out.append(c)
        c -= u
    return out
