"""Which GPU kernel an aten op launches in an eager step, by class.

The step model (``shapelint.price.step``) prices every op of the step that launches
a kernel: GEMMs and attention by ``shapelint.price.gemm``, the rest by the bytes they
move at the bandwidth of their class. This module says, once, which ops launch
nothing (views, metadata, allocation), which are row reductions (softmax, norms,
losses: slower per byte than pointwise kernels), which only write (fills), and which
copy; everything else is a pointwise kernel. It also says which ops read only part
of an input (a gather reads the rows an index names, not the whole table).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from shapelint.model.records import KernelClass

#: ops that launch no kernel: views, metadata, allocation without initialisation
NO_KERNEL: frozenset[str] = frozenset({
    "t", "transpose", "permute", "view", "_unsafe_view", "reshape", "expand", "alias", "detach",
    "slice", "select", "unsqueeze", "squeeze", "as_strided", "_reshape_alias", "split", "chunk",
    "unbind", "narrow", "split_with_sizes", "numpy_T", "mT", "_conj", "lift_fresh", "view_as",
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "_local_scalar_dense",
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "device", "is_same_size", "set_",
    "resize_", "_has_compatible_shallow_copy_type", "is_nonzero", "_assert_async", "unfold",
    "_assert_tensor_metadata", "diagonal", "movedim", "swapaxes", "expand_as", "_neg_view",
    "real", "imag", "view_as_real", "view_as_complex", "as_strided_", "squeeze_", "unsqueeze_",
    "t_", "transpose_", "_nested_view_from_buffer", "_values", "_indices", "alias_copy",
})

#: ops that write memory without reading any (nll_loss_backward zero-fills the
#: gradient of the logits and writes one element per row: a memset-bound kernel)
FILL: frozenset[str] = frozenset({
    "nll_loss_backward", "nll_loss2d_backward",
    "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "fill_", "zero_", "new_zeros",
    "new_ones", "new_full", "scalar_tensor", "arange", "randn", "rand", "randint", "randn_like",
    "rand_like", "bernoulli_", "uniform_", "normal_", "linspace", "eye", "tril_indices", "triu_indices",
})

#: ops that copy (or cast) their input
COPY: frozenset[str] = frozenset({
    "_to_copy", "clone", "copy_", "contiguous", "_copy_from", "_copy_from_and_resize", "lift_fresh_copy",
    "constant_pad_nd", "cat", "stack", "slice_backward", "select_backward", "index_select", "gather",
    "embedding", "repeat", "roll", "flip", "tril", "triu", "masked_fill", "where", "index",
    "_unsafe_index", "slice_scatter", "select_scatter", "as_strided_scatter",
})

#: out-of-place ops that PyTorch runs as a contiguous clone of their input, then the
#: in-place op on the clone (aten's ``masked_fill`` is ``clone`` + ``masked_fill_``; its
#: backward, ``grad.masked_fill(mask, 0)``, the same): two kernels, the clone a
#: device-to-device memcpy (measured on an H100: 1.63 ms for an fp32 [8, 32, 1024, 1024]
#: masked_fill, its bytes read and written once priced 0.95 ms)
CLONE_FIRST: frozenset[str] = frozenset({"masked_fill"})


def launches(name: str) -> int:
    """Kernels an eager copy or pointwise op named ``name`` launches: two where it clones
    first (:data:`CLONE_FIRST`), else one."""
    return 2 if name in CLONE_FIRST else 1


def clone_bytes(name: str, written: int) -> int:
    """Bytes the clone before a :data:`CLONE_FIRST` op moves (what the op writes, read and
    written once more); 0 for any other op."""
    return 2 * written if name in CLONE_FIRST else 0


#: row reductions: softmax, normalisations, losses, sums
REDUCTION: frozenset[str] = frozenset({
    "sum", "mean", "amax", "amin", "max", "min", "var_mean", "var", "std", "norm", "linalg_vector_norm",
    "_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data", "logsumexp",
    "native_layer_norm", "native_layer_norm_backward", "native_group_norm", "native_group_norm_backward",
    "native_batch_norm", "native_batch_norm_backward", "_native_batch_norm_legit",
    "_native_batch_norm_legit_functional",
    "_fused_rms_norm", "_fused_rms_norm_backward", "nll_loss_forward",
    "nll_loss2d_forward", "embedding_dense_backward", "cumsum", "cumprod",
    "argmax", "argmin", "topk", "sort", "index_add", "scatter_add", "index_put", "_index_put_impl_",
    "scatter", "scatter_reduce", "all", "any", "prod", "mse_loss", "mse_loss_backward",
    "binary_cross_entropy_with_logits", "smooth_l1_loss", "huber_loss", "l1_loss",
    "avg_pool2d", "avg_pool2d_backward", "max_pool2d_with_indices", "max_pool2d_with_indices_backward",
    "adaptive_avg_pool2d", "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward", "upsample_nearest2d",
    "upsample_bilinear2d", "upsample_nearest2d_backward", "upsample_bilinear2d_backward",
    "nonzero", "unique", "_unique2", "bincount", "histc",
    *("selective_scan", "selective_scan_backward", "rms_norm", "rms_norm_backward"),  # SCAN, mamba_ssm's norms
})

#: softmax ops, forward and backward: PyTorch's CUDA kernels (``SoftMax.cu``) run a warp
#: per row where a row holds at most WARP_SOFTMAX_MAX_ROW elements and
#: WARP_SOFTMAX_MAX_ROW_BYTES bytes (``dispatch_softmax_forward``: the row in registers,
#: one pass at about the pointwise rate: 0.82-0.89 of the bandwidth on an H100 for fp32
#: rows of 512-1024, benchmarks/attention_finding_profile.py), and a block per row above
#: (the row reductions' rate); the backward multiplies the gradient by the output first
SOFTMAX: frozenset[str] = frozenset({"_softmax", "_log_softmax", "_softmax_backward_data",
                                     "_log_softmax_backward_data"})
WARP_SOFTMAX_MAX_ROW = 1024
WARP_SOFTMAX_MAX_ROW_BYTES = 4096


def warp_softmax(name: str, row: int, element_bytes: int) -> bool:
    """A softmax op (``name``) whose rows of ``row`` elements of ``element_bytes`` run
    PyTorch's warp-per-row kernel."""
    return name in SOFTMAX and 0 < row <= WARP_SOFTMAX_MAX_ROW and row * element_bytes <= WARP_SOFTMAX_MAX_ROW_BYTES


#: the fused SSM scans shapelint's stand-ins record (``shapelint.load.ssm_kernels``):
#: mamba_ssm's selective scan walks each channel's tokens with a block scan and an exp2
#: per state element, so it is priced as a row reduction by its bytes (not measured:
#: mamba_ssm was not on the H100 image; ``benchmarks/real_model_steps.py`` times it)
SCAN: frozenset[str] = frozenset({"selective_scan", "selective_scan_backward"})
#: what a report says where a capture holds them
SCAN_NOTE = ("SSM mixers priced as mamba_ssm's fused kernels (selective scan, causal conv1d, RMS norms), as a GPU "
             "step runs them: the CPU trace ran shapelint's stand-ins, not transformers' per-token fallback loop")


def scan_note(op_names: Iterable[str]) -> str | None:
    """:data:`SCAN_NOTE` where a capture's ops include a fused SSM scan, else None."""
    return SCAN_NOTE if any(name in SCAN for name in op_names) else None


#: ops that read their largest input only where an index points (a gather): embedding
#: (weight rows), index_select, gather, index; nll_loss_forward reads one logit per row.
GATHER: frozenset[str] = frozenset({
    "embedding", "index_select", "gather", "index", "_unsafe_index", "nll_loss_forward", "nll_loss2d_forward",
})


def read_bytes(name: str, inputs: Sequence[tuple[int, int, int]], written: int) -> list[int]:
    """The bytes an op reads of each input, given (bytes, elements, element size) of
    each: all of each, but a fill nothing, and a gather of its table (the largest
    input) what it writes, or one element per index where it reduces them (the loss),
    the index count being the smallest other input's."""
    sizes = [b for b, _, _ in inputs]
    if name in FILL:
        return [0] * len(inputs)
    if name in GATHER and len(inputs) > 1:
        table = max(range(len(inputs)), key=lambda i: sizes[i])
        indices = min((n for i, (_, n, _) in enumerate(inputs) if i != table), default=0)
        sizes[table] = min(sizes[table], max(written, indices * inputs[table][2]))
    return sizes


def kernel_class(name: str) -> KernelClass | None:
    """The class of kernel an aten op (by its overload packet's name) launches, or
    None when it launches none. GEMMs and attention are recognised by capture."""
    if name in NO_KERNEL:
        return None
    if name in FILL:
        return "fill"
    if name in COPY:
        return "copy"
    if name in REDUCTION:
        return "reduction"
    return "pointwise"
