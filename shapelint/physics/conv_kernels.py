"""Which kernel a convolution runs in each memory layout, and whether it transposes.

PyTorch picks the layout from the tensors (``cudnn_conv_suggest_memory_format``:
channels-last when the input or the weight is) and then the kernel
(``aten/src/ATen/native/Convolution.cpp``, H100, torch 2.11, cuDNN 9.19; measured in
``docs/step-model.md``, "Convolutions"):

- ``depthwise`` (one channel per group): no tensor-core GEMM in either layout. A bf16
  NCHW input runs PyTorch's own ``_conv_depthwise2d`` kernel (``use_cudnn_depthwise``
  takes fp16 only), a channels-last one cuDNN's NHWC kernel, about 3x faster; neither
  transposes.
- ``gemm_1x1``: a 1x1, stride-1 convolution over at least ``GEMM_1X1_MIN_PIXELS`` output
  pixels runs as cuBLASLt GEMMs on NCHW tensors, without transposes (measured at 36^2
  and 56^2; at 14^2 and 7^2 cuDNN's implicit GEMM with transposes ran).
- ``grouped`` (several channels per group) and ``implicit_gemm`` (the rest): cuDNN's
  NHWC kernels, which transpose each NCHW activation they read or write.
"""

from __future__ import annotations

from math import prod
from typing import Literal

from shapelint.model.records import Gemm
from shapelint.physics.conv import ConvCall

ConvKernel = Literal["depthwise", "gemm_1x1", "grouped", "implicit_gemm"]

#: output pixels (H·W) from which a 1x1 stride-1 NCHW convolution runs as cuBLASLt GEMMs
GEMM_1X1_MIN_PIXELS = 1024
#: group widths that cuDNN's channels-last grouped kernels run at the implicit-GEMM
#: rate (64 per group measured 1.21x faster than NCHW; 56 per group 0.75x)
GROUPED_NHWC_WIDTH = 64

_GEOMETRY = {"input", "weight", "groups", "transposed"}


def call_of(g: Gemm) -> ConvCall | None:
    """The convolution a GEMM record belongs to, where its geometry was recorded."""
    return ConvCall(g.module, g.extra) if g.role == "conv" and _GEOMETRY <= dict(g.extra).keys() else None


def conv_kernel(c: ConvCall) -> ConvKernel:
    """The kind of kernel PyTorch runs convolution ``c`` on (either layout)."""
    if c.depthwise:
        return "depthwise"
    stride = c.shape("stride") if "stride" in dict(c.extra) else ()
    pixels = prod(c.shape("input")[2:])
    if (c.groups == 1 and not c.transposed and all(k == 1 for k in c.kernel_shape)
            and all(s == 1 for s in stride) and pixels >= GEMM_1X1_MIN_PIXELS):
        return "gemm_1x1"
    return "grouped" if c.groups > 1 else "implicit_gemm"


def transposes(kernel: ConvKernel) -> bool:
    """Whether the kernel transposes NCHW activations (cuDNN's NHWC kernels do)."""
    return kernel in ("grouped", "implicit_gemm")


def grouped_width_fast(c: ConvCall) -> bool:
    """A grouped convolution whose group width channels-last runs at the implicit-GEMM rate."""
    return (c.in_channels // c.groups) % GROUPED_NHWC_WIDTH == 0


__all__ = ["GEMM_1X1_MIN_PIXELS", "GROUPED_NHWC_WIDTH", "ConvKernel", "call_of", "conv_kernel", "grouped_width_fast",
           "transposes"]
