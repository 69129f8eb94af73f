"""A non-GEMM op of the captured step as the step model prices it: the kernel class it
launches and the memory it streams (``shapelint.capture.op_traffic`` fills it in)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: what a launched kernel does (``shapelint.physics.kernels`` says which op launches
#: which): GEMM and attention kernels are timed by the GEMM model
KernelClass = Literal["gemm", "attention", "pointwise", "reduction", "copy", "fill", "optimizer"]


@dataclass(frozen=True)
class Op:
    """One kernel-launching op of the step other than a GEMM, or a marker for a GEMM
    or attention op (``gemms``: the indices of its `Gemm` records), in execution order.

    ``bytes`` is what the op reads and writes, each tensor once (a broadcast input
    once per distinct element). ``reads`` and ``writes`` are (serial number, bytes) of
    the tensors it touches (a view shares its base's number), so that the step model can
    tell which intermediate results a fused kernel would keep on chip. ``backward``
    is True for the ops autograd runs; ``owner`` the module whose forward made the op
    (or its gradient)."""

    index: int
    name: str
    kind: KernelClass
    backward: bool
    bytes: int
    reads: tuple[tuple[int, int], ...] = ()
    writes: tuple[tuple[int, int], ...] = ()
    gemms: tuple[int, ...] = ()
    owner: str = ""
    #: bytes per element of the widest tensor (dtype of the work: 4 for fp32 math)
    element_bytes: int = 2
    #: a copy or pointwise op that reads or writes memory strided (a gap, or a unit stride
    #: off the innermost dimension): TensorIterator's non-vectorised path, sectors half used
    #: (``shapelint.capture.op_traffic.elementwise_access``)
    strided: bool = False
    #: elements the kernel iterates over (a reduction: its largest input), and the
    #: elements it produces (a reduction's output): what Inductor can fuse it with
    numel: int = 0
    out_numel: int = 0
    #: an activation it reads is laid out channels-last (NHWC, a 4-D or 5-D tensor whose
    #: channels are the innermost dimension): PyTorch runs other kernels (batch norm's
    #: ``*_channels_last_kernel``, ``shapelint.physics.conv_kernels``) on such tensors
    channels_last: bool = False
    #: a copy or pointwise op on TensorIterator's non-vectorised path that still reads
    #: whole sectors: a broadcast operand (an RMS norm's ``x * rsqrt``, RoPE's ``cos``), or
    #: permutations that agree on the innermost dimension (a transposed q beside q)
    coalesced: bool = False
    #: a copy or pointwise op that TensorIterator runs with a dynamic cast (its floating
    #: tensors of two dtypes, but the fp32 -> bf16/fp16 copy): never vectorised. Contiguous,
    #: it is also ``coalesced`` (``unrolled_elementwise_kernel``); otherwise neither
    #: ``coalesced`` nor ``strided``: :attr:`cast_offset`
    cast: bool = False
    #: the shape of the activation a batch norm normalises (N, C, spatial...): PyTorch's
    #: NCHW batch-norm kernels give each channel one block (``shapelint.physics.
    #: batch_norm``), so their time depends on it, not on the bytes alone; () for other ops
    shape: tuple[int, ...] = ()
    #: a softmax's row, the length of the dimension it normalises: PyTorch's CUDA softmax
    #: runs a warp per row where the row fits one (``shapelint.physics.kernels.warp_softmax``)
    row: int = 0

    @property
    def cast_offset(self) -> bool:
        """A cast where the iteration is not one contiguous run (``shapelint.capture.
        op_traffic.stream_access``'s ``cast_offset``): TensorIterator's offset-calculator
        kernel with a dynamic cast per element, as a bf16 score plus an fp32 ALiBi bias or
        mask broadcast over it runs, at a rate of its own."""
        return self.cast and not (self.coalesced or self.strided)

