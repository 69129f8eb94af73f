"""The time of an eager batch norm: its kernels (``shapelint.physics.batch_norm``), each
timed by one law of block-parallel streaming.

A kernel's blocks each stream their share of its bytes, every thread at a rate of its
own in elements a second, whatever their width (the loads it keeps in flight:
``batch_norm_<family>_thread_meps``) after a fixed
start (``batch_norm_block_us``: a block's launch, its per-channel parameters, its final
reduction); the GPU runs ``resident`` blocks at once, in waves. Whatever the blocks could
stream, the kernel moves its bytes no faster than its family's fraction of the datasheet
bandwidth (``batch_norm_<family>_efficiency``). Both rates count only the lanes that load
an element. So a batch norm over few channels on NCHW activations (16-96 blocks of 512
threads on a GPU that holds 528) takes the time of one channel's walk, and one over
thousands of channels runs at its family's bandwidth; fitted on 66 shapes of each layout
(``benchmarks/bn_shape_rates.py``, ``docs/step-model.md``).
"""

from __future__ import annotations

from shapelint.hardware import Hardware
from shapelint.model.step_ops import Op
from shapelint.physics.batch_norm import BnKernel, Family, batch_norm_kernels
from shapelint.physics.conv_kernels import BATCH_NORM

#: the aten ops of a batch norm's backward (the rest of ``BATCH_NORM`` are forwards)
BACKWARD_OPS = frozenset(name for name in BATCH_NORM if name.endswith("_backward"))  # the rest are forwards


def rates(family: Family, hw: Hardware) -> tuple[float, float]:
    """(elements per second per thread, fraction of the datasheet bandwidth) of a family."""
    s = hw.step
    table = {
        "nchw_stats": (s.batch_norm_nchw_stats_thread_meps, s.batch_norm_nchw_stats_efficiency),
        "nchw_backward": (s.batch_norm_nchw_backward_thread_meps, s.batch_norm_nchw_backward_efficiency),
        "nchw_transform": (s.batch_norm_nchw_transform_thread_meps, s.batch_norm_nchw_transform_efficiency),
        "channels_last_stats": (s.batch_norm_channels_last_stats_thread_meps,
                                s.batch_norm_channels_last_stats_efficiency),
        "channels_last_reduce": (s.batch_norm_channels_last_reduce_thread_meps,
                                 s.batch_norm_channels_last_reduce_efficiency),
        "channels_last": (s.batch_norm_channels_last_thread_meps, s.batch_norm_channels_last_stream_efficiency),
    }
    meps, eff = table[family]
    return meps * 1e6, eff


def kernel_ms(k: BnKernel, hw: Hardware) -> float:
    """One batch-norm kernel: its blocks' waves, or its family's bandwidth, whichever is
    slower; never under the shortest kernel."""
    per_thread, eff = rates(k.family, hw)
    waves = max(1.0, k.blocks / k.resident(hw.sms))
    elements = k.bytes / k.element_bytes / k.blocks
    block_s = hw.step.batch_norm_block_us * 1e-6 + elements / (per_thread * k.threads * k.lanes)
    stream_s = k.bytes / (eff * hw.memory_bandwidth_gbps * 1e9 * k.lanes)
    return 1e3 * max(waves * block_s, stream_s, hw.step.min_kernel_us * 1e-6)


def activation_bytes(op: Op) -> int:
    """Bytes per element of the activation a batch norm op normalises (its first read:
    the input forward, the output's gradient backward)."""
    numel = op.numel or 1
    return max(1, op.reads[0][1] // numel) if op.reads else 2


def op_kernels(op: Op) -> tuple[BnKernel, ...]:
    """The kernels of a batch norm op whose activation's shape was recorded."""
    return batch_norm_kernels(op.shape, op.channels_last, op.name in BACKWARD_OPS, activation_bytes(op))


def batch_norm_ms(op: Op, hw: Hardware) -> float | None:
    """A batch norm op's time, its kernels' sum; None where its shape is unknown or the
    profile has no law for one of its kernels (a thread rate of 0)."""
    kernels = op_kernels(op)
    if not kernels or any(rates(k.family, hw)[0] <= 0 for k in kernels):
        return None
    return sum(kernel_ms(k, hw) for k in kernels)


__all__ = ["BACKWARD_OPS", "activation_bytes", "batch_norm_ms", "kernel_ms", "op_kernels", "rates"]
