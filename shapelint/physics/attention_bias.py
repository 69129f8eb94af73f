"""The kernels PyTorch runs around the memory-efficient SDPA kernel to align an additive
bias: ``preprocess_mask`` (``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``
and ``attention.cu``) hands the kernel a bias whose strides, but the last, are
multiples of ``mem_eff_alignment`` elements; another bias is padded to it first
(``pad_bias``: ``at::pad`` of the last dimension, then sliced back), a fill of the
padded tensor and a copy of the bias into it. Autograd runs the pad and slice backward
where the bias needs its gradient: one more fill and two more copies.

Measured on an H100 (torch 2.11, bf16, B 8, H 12, head dim 64; ``benchmarks/
attention_finding_profile.py``, 2026-11-26): at T=1023 and T=1500 a [B, H, T, T] bias
costs the forward one bf16 fill (61 / 131 us) and one strided copy (249 / 530 us: the
bias read and written, 0.48 of the copy bandwidth, the step's strided-copy rate), and a
bias that needs its gradient two more copies and one more fill in backward (743 / 1585
us of copies, 121 / 262 us of fills in all); at T=1024 none of them. SL302's fix on
WavLM's and SpeechT5's encoders (T=1023, the bias of the scores' shape with its
gradient) spent 0.89 ms of its 2.56 ms a layer there.
"""

from __future__ import annotations

from shapelint.model.records import Op

#: the element alignment the memory-efficient kernel needs of a bias's strides
#: (``mem_eff_alignment`` in ``preprocess_mask``)
EFFICIENT_BIAS_ALIGN = 8
#: copies and fills of the padded bias: forward, and added backward where the bias
#: needs its gradient (the pad's and the slice's backward)
PAD_FORWARD = (("fill_", 1), ("copy_", 1))
PAD_BACKWARD = (("fill_", 1), ("copy_", 2))


def bias_grad_op(nbytes: int) -> Op:
    """The fused backward's write of a bias's gradient at the expanded [B, H, Tq, Tk]
    shape (``shapelint.physics.attention.bias_grad_bytes``) as the kernel it is priced as,
    where a captured call's is too (``shapelint.price.kernels.attention_ms``): an
    elementwise write."""
    return Op(index=-1, name="grad_bias", kind="pointwise", backward=True, bytes=nbytes)


def needs_padding(row_elems: int) -> bool:
    """A contiguous bias with rows of ``row_elems`` elements (the keys) is padded."""
    return row_elems % EFFICIENT_BIAS_ALIGN != 0


def padding_ops(bias_elems: int, row_elems: int, element_bytes: int, grad: bool, training: bool) -> tuple[Op, ...]:
    """The ops PyTorch runs to pad a contiguous bias of ``bias_elems`` elements in rows
    of ``row_elems`` for the memory-efficient kernel (none where its rows are aligned):
    the forward's fill of the padded copy and strided copy into it, and, training with a
    bias that needs its gradient, the backward's. Each copy reads the bias and writes as
    much into the padded layout (strided); each fill writes the padded tensor."""
    if not needs_padding(row_elems):
        return ()
    padded = bias_elems // row_elems * (row_elems + -row_elems % EFFICIENT_BIAS_ALIGN) * element_bytes
    plain = bias_elems * element_bytes
    steps = [(name, n, False) for name, n in PAD_FORWARD]
    steps += [(name, n, True) for name, n in PAD_BACKWARD] if grad and training else []
    return tuple(Op(index=-1, name=name, kind="fill" if name == "fill_" else "copy", backward=backward,
                    bytes=padded if name == "fill_" else 2 * plain, element_bytes=element_bytes,
                    strided=name == "copy_", numel=bias_elems, out_numel=bias_elems)
                 for name, n, backward in steps for _ in range(n))


__all__ = ["EFFICIENT_BIAS_ALIGN", "bias_grad_op", "needs_padding", "padding_ops"]
