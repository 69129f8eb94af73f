"""Which kernel a convolution (and a batch norm) runs in each memory layout, and
whether it transposes.

PyTorch picks the layout from the tensors (``cudnn_conv_suggest_memory_format``:
channels-last when the input or the weight is) and then the kernel
(``aten/src/ATen/native/Convolution.cpp``, H100, torch 2.11, cuDNN 9.19; measured in
``docs/step-model.md``, "Convolutions"):

- ``depthwise`` (one channel per group): no tensor-core GEMM in either layout. A bf16
  NCHW input runs PyTorch's own ``_conv_depthwise2d`` kernel (``use_cudnn_depthwise``
  takes fp16 only), a channels-last one cuDNN's NHWC kernel, about 3x faster; neither
  transposes.
- ``gemm_1x1``: a 1x1, stride-1 convolution over at least ``GEMM_1X1_MIN_PIXELS`` output
  pixels runs as cuBLASLt GEMMs on NCHW tensors, without transposes (measured at 28^2,
  36^2 and 56^2; at 14^2 and 7^2 cuDNN's implicit GEMM with transposes ran).
- ``grouped`` (several channels per group) and ``implicit_gemm`` (the rest): cuDNN's
  NHWC kernels, which transpose each NCHW activation they read or write, and a weight
  (or its gradient) of a kernel larger than 1x1 (KCRS <-> KRSC; a 1x1 weight lies the
  same in both layouts), each in a kernel of its own (``transposed_bytes``).

A 1x1 stride-1 convolution on channels-last tensors is a row-major GEMM over N·H·W
rows: with at least ``GEMM_1X1_MIN_ROWS`` of them it ran as cuBLASLt GEMMs at every
pixel count (nvjet kernels, MBConv at batch 256 down to 14^2: 50176 rows, in the H100
profile of ``benchmarks/step_profile.py``); with 12544 or fewer rows over fewer than
``GEMM_1X1_MIN_PIXELS`` pixels (1024->256 at 14^2 and 2048->512 at 7^2, batch 64) as
cuDNN's implicit GEMM, 1.56-1.60x faster than NCHW. (A layer of at least that many pixels
is priced as GEMMs in either layout, as NCHW measured.)

Batch norm (``BATCH_NORM``): PyTorch's eager kernels differ by layout as well; NCHW
runs ``batch_norm_collect_statistics_kernel`` / ``batch_norm_backward_kernel`` (one
block per channel striding over N and H·W), channels-last the ``*_channels_last_kernel``
family (coalesced over channels), about 3x faster per byte (``docs/step-model.md``).
"""

from __future__ import annotations

from math import prod
from typing import Literal

from shapelint.model.records import Gemm
from shapelint.physics.conv import ConvCall

ConvKernel = Literal["depthwise", "gemm_1x1", "grouped", "implicit_gemm"]

#: pixels (H·W, input = output at stride 1) from which a 1x1 stride-1 NCHW convolution
#: runs as cuBLASLt GEMMs: 28^2 ran without transposes (ResNet-50 at batch 8, --verify on
#: an H100, docs/data/corpus_findings_conv_h100_2026-11-26.json), 14^2 with them
GEMM_1X1_MIN_PIXELS = 784
#: rows (N·H·W) from which a 1x1 stride-1 channels-last convolution runs as cuBLASLt
#: GEMMs whatever its pixel count (50176 measured so, 12544 not; the midpoint)
GEMM_1X1_MIN_ROWS = 32768
#: group widths that cuDNN's channels-last grouped kernels run at the implicit-GEMM
#: rate (64 per group measured 1.21x faster than NCHW; 56 per group 0.75x)
GROUPED_NHWC_WIDTH = 64

_GEOMETRY = {"input", "weight", "groups", "transposed"}

#: the aten ops of a batch norm that run PyTorch's batch-norm kernels (a training step's
#: forward and backward; Inductor decomposes the ``_legit`` ones into fused reductions)
BATCH_NORM: frozenset[str] = frozenset({
    "native_batch_norm", "native_batch_norm_backward", "_native_batch_norm_legit",
    "_native_batch_norm_legit_functional", "cudnn_batch_norm",
    "cudnn_batch_norm_backward", "batch_norm_backward",
})


def call_of(g: Gemm) -> ConvCall | None:
    """The convolution a GEMM record belongs to, where its geometry was recorded."""
    return ConvCall(g.module, g.extra) if g.role == "conv" and _GEOMETRY <= dict(g.extra).keys() else None


def conv_kernel(c: ConvCall, channels_last: bool = False) -> ConvKernel:
    """The kind of kernel PyTorch runs convolution ``c`` on, in NCHW or channels-last."""
    if c.depthwise:
        return "depthwise"
    stride = c.shape("stride") if "stride" in dict(c.extra) else ()
    pixels = prod(c.shape("input")[2:])
    rows = pixels * c.shape("input")[0]
    if (c.groups == 1 and not c.transposed and all(k == 1 for k in c.kernel_shape)
            and all(s == 1 for s in stride)
            and (pixels >= GEMM_1X1_MIN_PIXELS or (channels_last and rows >= GEMM_1X1_MIN_ROWS))):
        return "gemm_1x1"
    return "grouped" if c.groups > 1 else "implicit_gemm"


def nchw(g: Gemm) -> bool:
    """Whether a convolution's GEMM reads or writes NCHW activations (operands the record
    marks as copied: the implicit GEMM's layout is channels-last)."""
    return any(op.copied for op in (g.a, g.b, g.out))


def kernel_of(g: Gemm) -> ConvKernel | None:
    """The kernel a convolution's GEMM record runs on, in the layout its operands have;
    None for a record without convolution geometry."""
    call = call_of(g)
    return conv_kernel(call, channels_last=not nchw(g)) if call is not None else None


def transposes(kernel: ConvKernel) -> bool:
    """Whether the kernel transposes NCHW activations (cuDNN's NHWC kernels do)."""
    return kernel in ("grouped", "implicit_gemm")


def transposed_bytes(g: Gemm) -> tuple[int, ...]:
    """Bytes read and written by each transpose kernel cuDNN runs around convolution GEMM
    ``g`` on NCHW tensors (none where its kernel does not transpose): one per NCHW
    activation it reads or writes (``Gemm.copy_bytes``), and one for the weight, or the
    weight gradient it writes, where the kernel is larger than 1x1."""
    call, kernel = call_of(g), kernel_of(g)
    if call is None or kernel is None or not nchw(g) or not transposes(kernel):
        return ()
    acts = tuple(2 * op.rows * op.cols * g.batch * g.dtype_bytes for op in (g.a, g.b, g.out) if op.copied)
    weight = (2 * prod(call.shape("weight")) * g.dtype_bytes,) if call.kernel > 1 else ()
    return acts + weight


def grouped_width_fast(c: ConvCall) -> bool:
    """A grouped convolution whose group width channels-last runs at the implicit-GEMM rate."""
    return (c.in_channels // c.groups) % GROUPED_NHWC_WIDTH == 0


__all__ = ["BATCH_NORM", "GEMM_1X1_MIN_PIXELS", "GEMM_1X1_MIN_ROWS", "GROUPED_NHWC_WIDTH", "ConvKernel", "call_of", "conv_kernel",
           "grouped_width_fast", "kernel_of", "nchw", "transposed_bytes", "transposes"]
