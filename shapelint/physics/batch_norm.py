"""The kernels PyTorch's eager batch norm launches for an activation's shape and layout,
with the launch geometry that sets their speed (``aten/src/ATen/native/cuda/
Normalization.cuh``; training, CUDA).

A batch norm's time is not its bytes over one rate: on NCHW activations its statistics
and backward kernels give each channel one block of 512 threads, which walks the
channel's N·H·W elements alone, so a layer of 16-96 channels keeps 16-96 blocks busy on a
GPU that holds hundreds, and takes the time of one channel's walk however many channels
it has; the transform kernel splits (channel, image) pairs into blocks of as few as 64
threads, so a small H·W launches hundreds of thousands of tiny blocks. The
channels-last kernels tile (channels x rows) with ``flexible_launch_configs``: a few
channels still leave them short of blocks (at most 128 along the rows). Each kernel is
described here by what sets its time: its blocks, their threads, the fraction of the
lanes that load an element (a row of H·W = 49 walked by 64 threads uses 49 of them),
and the bytes it reads and writes; ``shapelint.price.batch_norm`` turns that into time.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod
from typing import Literal

#: the kernel families, each priced by its own rates (``StepProfile.batch_norm_*``):
#: statistics (Welford's running mean and variance: a division per element, bound by
#: arithmetic, not memory) of each layout, NCHW backward (two passes over a channel),
#: NCHW transform (pointwise over (channel, image) blocks), channels-last backward
#: reduce (two reads, then a reduction across blocks through staging memory and
#: semaphores) and the other channels-last kernels (transform, backward element-wise:
#: streaming passes)
Family = Literal["nchw_stats", "nchw_backward", "nchw_transform", "channels_last_stats", "channels_last_reduce",
                 "channels_last"]
FAMILIES: tuple[Family, ...] = ("nchw_stats", "nchw_backward", "nchw_transform", "channels_last_stats",
                                "channels_last_reduce", "channels_last")

#: Normalization.cuh's constants
MAX_BLOCK_SIZE = 512
ELEMENTS_PER_THREAD = 16
OPTIMAL_TILE_W = 32
MAX_H_BLOCK = 128
MAX_GRID_SIZE = 65535
#: the most threads and blocks one SM holds (every CUDA GPU since Volta)
THREADS_PER_SM = 2048
BLOCKS_PER_SM = 32


@dataclass(frozen=True)
class BnKernel:
    """One kernel of a batch norm: ``blocks`` of ``threads`` threads, ``lanes`` the
    fraction of their loads that fall on an element, ``bytes`` read and written, in
    elements of ``element_bytes`` (a thread loads one element at a time)."""

    name: str
    family: Family
    blocks: int
    threads: int
    lanes: float
    bytes: int
    element_bytes: int = 2

    def resident(self, sms: int) -> int:
        """Blocks the GPU runs at once (by threads per SM, and blocks per SM)."""
        return sms * min(BLOCKS_PER_SM, max(1, THREADS_PER_SM // self.threads))


def num_threads(n: int) -> int:
    """``getNumThreads``: the power of two from 32 to 512 that covers ``n``."""
    return next((t for t in (32, 64, 128, 256) if n <= t), MAX_BLOCK_SIZE)


def last_pow2(n: int) -> int:
    """``lastPow2``: the largest power of two not above ``n`` (1 for 0)."""
    return 1 << (max(n, 1).bit_length() - 1)


def _walk(n: int, threads: int) -> float:
    """Fraction of the lanes busy when ``threads`` threads stride over ``n`` elements."""
    return n / (ceil(n / threads) * threads) if n else 1.0


def flexible_launch(reduction: int, stride: int, coop: bool = False) -> tuple[int, int, int, int]:
    """``flexible_launch_configs``: (block_x, block_y, grid_x, grid_y) of a channels-last
    kernel over ``reduction`` rows of ``stride`` channels."""
    block_x = min(last_pow2(stride), OPTIMAL_TILE_W)
    block_y = min(last_pow2(ceil(reduction / ELEMENTS_PER_THREAD)), MAX_BLOCK_SIZE // block_x)
    if block_x * block_y != MAX_BLOCK_SIZE:
        block_x = min(last_pow2(stride), MAX_BLOCK_SIZE // block_y)
    grid_x = ceil(stride / block_x)
    grid_y = min(ceil(reduction / (block_y * ELEMENTS_PER_THREAD)), MAX_H_BLOCK)
    if coop and grid_y < 8:
        grid_y = 1
    return block_x, block_y, grid_x, grid_y


def _nchw(n: int, c: int, plane: int, backward: bool, element_bytes: int) -> tuple[BnKernel, ...]:
    tensor = n * c * plane * element_bytes
    tf = num_threads(plane)
    walk = _walk(plane, tf)
    if backward:  # a block per channel: reduce (x, dy), then read both again, write dx
        return (BnKernel("batch_norm_backward_kernel", "nchw_backward", c, MAX_BLOCK_SIZE, walk, 5 * tensor,
                         element_bytes),)
    stats = BnKernel("batch_norm_collect_statistics_kernel", "nchw_stats", c, MAX_BLOCK_SIZE, walk, tensor,
                     element_bytes)
    tf = max(num_threads(plane // 4), min(num_threads(plane), 64))
    tb = max(64 // tf, 1)
    grid_y = min(max(1, min(256 * 1024 // c, ceil(n / tb))), MAX_GRID_SIZE)
    transform = BnKernel("batch_norm_transform_input_kernel", "nchw_transform", c * grid_y, tf * tb,
                         _walk(plane, tf), 2 * tensor, element_bytes)
    return stats, transform


def _channels_last(n: int, c: int, plane: int, backward: bool, element_bytes: int) -> tuple[BnKernel, ...]:
    tensor = n * c * plane * element_bytes
    rows = n * plane

    def kernel(name: str, family: Family, passes: int, coop: bool) -> BnKernel:
        bx, by, gx, gy = flexible_launch(rows, c, coop)
        return BnKernel(name, family, gx * gy, bx * by, c / (gx * bx), passes * tensor, element_bytes)

    if backward:
        return (kernel("batch_norm_backward_reduce_channels_last_kernel", "channels_last_reduce", 2, True),
                kernel("batch_norm_backward_elemt_channels_last_kernel", "channels_last", 3, False))
    return (kernel("batch_norm_collect_statistics_channels_last_kernel", "channels_last_stats", 1, True),
            kernel("batch_norm_transform_input_channels_last_kernel", "channels_last", 2, False))


def batch_norm_kernels(shape: tuple[int, ...], channels_last: bool, backward: bool,
                       element_bytes: int = 2) -> tuple[BnKernel, ...]:
    """The kernels of a training batch norm's forward (or backward) over an activation
    of ``shape`` (N, C, spatial...) of ``element_bytes`` elements, in either layout;
    () where the shape has no channel dimension."""
    if len(shape) < 2 or not prod(shape):
        return ()
    n, c, plane = shape[0], shape[1], prod(shape[2:])
    make = _channels_last if channels_last else _nchw
    return make(n, c, plane, backward, element_bytes)


__all__ = ["BLOCKS_PER_SM", "FAMILIES", "THREADS_PER_SM", "BnKernel", "Family", "batch_norm_kernels",
           "flexible_launch", "last_pow2", "num_threads"]
