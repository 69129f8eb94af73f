"""Attention kernels: which SDPA kernel PyTorch picks for a call (eager, and under
``torch.compile``), the fused scaled-dot-product kernels (flash, cuDNN,
memory-efficient), PyTorch's math kernel, and attention written by hand
(matmul → softmax → matmul).

A fused kernel's GEMMs are recorded with roles ``attn_scores`` (QKᵀ, and dP in
backward: they produce score tiles kept on chip) and ``attn_values`` (PV, dV, dQ,
dK: they read them). Hand-written attention is a batched matmul whose operand came
out of a softmax (role ``after_softmax``), with the batched matmul before it that
produced the scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from shapelint.hardware import ceil_div
from shapelint.model.records import ATTN_ROLES, Gemm, Op, Operand, Role, Work
from shapelint.physics.attention_bias import bias_grad_op, padding_ops

#: largest head dimension PyTorch's flash / cuDNN attention kernels take (bf16/fp16)
MAX_FUSED_HEAD_DIM = 256
#: element size of the dtypes the flash / cuDNN kernels run (bf16, fp16)
FLASH_DTYPE_BYTES = 2
#: flash pads a head dimension to a multiple of this (``pad_last_dim<8>`` in ATen's
#: attention.cu) and copies [B, H, T, d] tensors in and out of the padded layout: q, k,
#: v in and the output out forward; the output gradient in and dq, dk, dv out backward
FLASH_PAD_TO = 8
FLASH_PAD_COPIES = 4
#: the dtype PyTorch's math attention kernel computes half-precision inputs in
#: (torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp is False by default)
MATH_DTYPE = "fp32"
MATH_DTYPE_BYTES = 4
#: owning-module attributes that hold the head dimension / the number of heads
HEAD_DIM_PARAMS = ("head_dim", "head_size", "attention_head_size", "d_head", "dim_head", "kv_channels")
HEADS_PARAMS = ("num_heads", "num_attention_heads", "n_head", "n_heads", "nhead", "heads")

#: aten ops a hand-written attention's two matmuls run as (batched matmul)
BATCHED_OPS = ("bmm", "baddbmm")
#: passes over the score matrix that no GEMM record carries, forward: the softmax
#: reads S and writes P (scaling, masking and dropout add more; not counted)
SOFTMAX_PASSES_FORWARD = 2
#: ... and backward: the softmax backward reads P and dP and writes dS
SOFTMAX_PASSES_BACKWARD = 3
#: passes over the score matrix that the unfused GEMMs themselves make: forward
#: QKᵀ writes S, PV reads P; backward writes dP, reads P (dV) and dS twice (dQ, dK)
GEMM_PASSES_FORWARD = 2
GEMM_PASSES_BACKWARD = 4


# -- the kernel PyTorch picks ---------------------------------------------------------
# Mirrors ``sdp::select_sdp_backend`` (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp)
# for an sm90 GPU (H100/H200) with cuDNN >= 9.15.1, where PyTorch tries cuDNN, flash,
# memory-efficient, math in that order. docs/attention-kernels.md says which check
# each condition stands for.

# cuDNN's head dimensions on sm90 are those of torch 2.11 (its CUDA 13 wheel ships cuDNN
# 9.19): ``check_cudnn_tensor_shapes`` allows up to MAX_FUSED_HEAD_DIM from cuDNN 9.10, for
# the forward and the backward alike (measured: head dimension 160 in training ran cuDNN).
# The main branch's ``check_cudnn_d256_bprop_head_dim`` (backward only at both <= 128,
# (192, 128) or (256, 256)) applies from cuDNN 9.22 with a frontend that supports
# d256, which no torch 2.11 wheel has: not mirrored (docs/attention-kernels.md).
#: the memory-efficient kernel's head-dim and pointer alignment, bytes
#: (``minimum_gemm_alignment`` on sm80+: 128 bits)
EFFICIENT_ALIGN_BYTES = 16


@dataclass(frozen=True)
class AttentionCall:
    """What PyTorch's CUDA dispatcher reads off one SDPA call to pick its kernel
    (``shapelint.capture.run`` reads it off the tensors)."""

    d_qk: int
    d_v: int
    seq_q: int
    seq_k: int
    #: bytes per element of q, k, v; ``half``: fp16 or bf16
    element_bytes: int
    half: bool
    has_mask: bool
    mask_requires_grad: bool
    mask_broadcasts: bool
    dropout_p: float
    is_causal: bool
    requires_grad: bool
    efficient_aligned: bool
    #: the mask's last dimension has stride 1 (``check_last_dim_stride_equals_1_dense``
    #: reads the mask too: cuDNN and the memory-efficient kernel refuse an expanded one)
    mask_unit_stride: bool = True


def _cudnn_takes(c: AttentionCall) -> bool:
    if not c.half or (c.has_mask and (c.mask_requires_grad or not c.mask_broadcasts or not c.mask_unit_stride)):
        return False
    if c.d_qk % 8 or c.d_v % 8 or max(c.d_qk, c.d_v) > MAX_FUSED_HEAD_DIM or c.seq_k == 1:
        return False
    # no dropout-resolution check: torch 2.11 runs cuDNN for dropout 0.1 (measured, see
    # docs/attention-kernels.md), though main's check_cudnn_dropout refuses it; no
    # backward head-dimension check (above)
    return True


def _flash_takes(c: AttentionCall) -> bool:
    return (c.half and not c.has_mask and c.d_qk == c.d_v <= MAX_FUSED_HEAD_DIM
            and not (c.is_causal and c.seq_q != c.seq_k))


def _efficient_takes(c: AttentionCall) -> bool:
    align = EFFICIENT_ALIGN_BYTES // c.element_bytes
    return (c.efficient_aligned and c.d_qk % align == 0 and c.d_v % align == 0
            and not (c.has_mask and not c.mask_unit_stride))


def gpu_kernel(c: AttentionCall) -> str:
    """The SDPA kernel PyTorch runs this call on, on an H100/H200: ``cudnn``,
    ``flash``, ``efficient`` (memory-efficient) or ``math``."""
    if _cudnn_takes(c):
        return "cudnn"
    if _flash_takes(c):
        return "flash"
    return "efficient" if _efficient_takes(c) else "math"


def compiled_call(c: AttentionCall, causal: bool) -> AttentionCall:
    """The call as ``torch.compile`` traces it in a Hugging Face model whose mask
    code skipped the mask in eager (``transformers.masking_utils``: with torch < 2.14
    ``is_torchdynamo_exporting()`` is true while dynamo traces, so it never skips):
    SDPA gets an explicit boolean [B, 1, Tq, Tk] mask and ``is_causal=False``. A
    causal mask is materialised (last-dimension stride 1); a bidirectional one is
    a padding vector expanded over the keys (stride 0), which cuDNN and the
    memory-efficient kernel refuse, so it runs the math kernel. Seen on an H100
    with torch 2.11 and transformers 5.17 (GPT-2, Llama, Qwen2: cuDNN with the
    mask; BERT and head_dim 100: math) and on the CPU with transformers 5.23
    (docs/step-measurements.md)."""
    return replace(c, has_mask=True, mask_requires_grad=False, mask_broadcasts=True,
                   mask_unit_stride=causal, is_causal=False)


def kernel_at(call: Sequence[Gemm], d: int) -> str:
    """The kernel PyTorch picks for the fused call ``call`` (its GEMM records) with q, k
    and v at head dimension ``d``: the call as its records tell it (sequence lengths, a
    causal flag, a mask, and whether that mask is a bias that needs its gradient)."""
    g = next((h for h in call if h.op == "sdpa.qk"), call[0])
    extra = dict(g.extra)
    grad = "bias_grad" in extra
    masked = grad or bool(extra.get(MASKED))
    dropout = extra.get("dropout")
    return gpu_kernel(AttentionCall(
        d_qk=d, d_v=d, seq_q=g.m, seq_k=g.n, element_bytes=g.dtype_bytes, half=g.dtype in ("bf16", "fp16"),
        has_mask=masked, mask_requires_grad=grad, mask_broadcasts=True,
        dropout_p=dropout if isinstance(dropout, float) else 0.0,
        is_causal=bool(extra.get("is_causal")), requires_grad=any(h.phase != "forward" for h in call),
        efficient_aligned=True))


def with_kernel(g: Gemm, kernel: str) -> Gemm:
    """``g`` tagged with the SDPA kernel that runs it."""
    return replace(g, extra=tuple((k, kernel if k == "kernel" else v) for k, v in g.extra))


#: query rows one thread block of the fused forward kernels takes on sm90 (cuDNN's
#: ``sdpa_sm90_flash_fprop``, as flash's forward): the keys are a loop inside the block, so
#: the grid is batch·heads x query blocks whatever the keys (an H100 ran 8 x 128 and
#: 8 x 256 queries over 50176 keys in the same 0.43-0.44 ms: 8 and 16 blocks, one wave)
FUSED_FORWARD_ROWS = 128


def forward_blocks(g: Gemm) -> int:
    """Thread blocks of the fused forward kernel a forward record of a fused call runs in
    (its ``m`` is the queries, its batch the batch·heads)."""
    return g.batch * ceil_div(g.m, FUSED_FORWARD_ROWS)


def is_fused(g: Gemm) -> bool:
    """A GEMM inside a fused scaled-dot-product attention kernel."""
    return g.role in ATTN_ROLES and g.op.startswith("sdpa.")


def head_dim(g: Gemm) -> int:
    """The head dimension a fused attention GEMM runs with: the k of the GEMMs that
    produce scores (QKᵀ, dP), the n of those that read them (PV, dV, dQ, dK)."""
    return g.k if g.role == "attn_scores" else g.n


def head_axis(g: Gemm, d: int) -> str | None:
    """The axis of an attention GEMM that is its head dimension ``d``: a fused kernel's
    by its role (:func:`head_dim`), a batched matmul's where exactly one axis is ``d``
    (None where a sequence length equals it too: which is which is not known)."""
    if is_fused(g):
        return "k" if g.role == "attn_scores" else "n"
    axes = [axis for axis in ("m", "n", "k") if getattr(g, axis) == d]
    return axes[0] if len(axes) == 1 else None


def _per_head(op: Operand, d: int) -> Operand:
    if not op.in_memory or d not in (op.rows, op.cols):
        return op
    return Operand(op.rows, op.cols, d, op.transposed, op.copied,
                   batch_stride=op.rows * op.cols if op.batch_stride else 0)


def per_head(g: Gemm, d: int) -> Gemm:
    """The GEMM with the head-dimension operands read as rows of ``d`` elements: how a
    kernel that does not take this head dimension natively sees them."""
    return replace(g, a=_per_head(g.a, d), b=_per_head(g.b, d), out=_per_head(g.out, d))


def param_of(g: Gemm, names: tuple[str, ...], value: int | None = None) -> tuple[str, int] | None:
    """The first of ``names`` among the owning module's parameters (of ``value``, if given)."""
    params = dict(g.module_params)
    for name in names:
        if name in params and (value is None or params[name] == value):
            return name, params[name]
    return None


def keep_width(d: int, heads: int, align: int) -> tuple[int, int] | None:
    """(heads, head_dim) with the same hidden size heads·d and an aligned head_dim of
    at most MAX_FUSED_HEAD_DIM, the head_dim nearest ``d``; None if there is none."""
    hidden = heads * d
    options = [c for c in range(align, MAX_FUSED_HEAD_DIM + 1, align) if hidden % c == 0]
    if not options:
        return None
    best = min(options, key=lambda c: (abs(c - d), -c))
    return hidden // best, best


def bias_grad_bytes(scores: Gemm) -> int:
    """Bytes a fused kernel's backward writes for the gradient of an additive mask that
    needs one (T5's learned position bias): ``_efficient_attention_backward`` writes
    ``grad_bias`` at the expanded [B, H, Tq, Tk] shape in the mask's dtype, whatever the
    mask broadcasts (autograd then sums it to the mask's shape, an op of its own). None
    of it where the mask needs no gradient."""
    element = dict(scores.extra).get("bias_grad")
    return scores.batch * scores.m * scores.n * int(element) if isinstance(element, int) else 0


def softmax_traffic_bytes(score_elems: int, dtype_bytes: int, training: bool) -> int:
    """Bytes the softmax passes over a materialised score matrix move (forward, and
    backward when training)."""
    passes = SOFTMAX_PASSES_FORWARD + (SOFTMAX_PASSES_BACKWARD if training else 0)
    return score_elems * dtype_bytes * passes


def _in_memory(op: Operand) -> Operand:
    if op.in_memory:
        return op
    return Operand(op.rows, op.cols, op.cols, batch_stride=op.rows * op.cols)


def math_kernel(call: Sequence[Gemm], backward_dtype: str | None = None) -> Work:
    """The same fused attention on PyTorch's math kernel: plain batched GEMMs in fp32
    with the scores in memory (no QKᵀ recompute in backward), plus the softmax passes
    over the fp32 score matrix: forward passes where ``call`` holds forward GEMMs,
    backward passes where it holds backward ones. ``backward_dtype``: the dtype the
    backward GEMMs run in where it is not fp32 (under torch.compile Inductor runs
    them in the compute dtype: bf16 ``bmm`` in the post-grad graph, torch 2.11)."""
    def math(g: Gemm) -> Gemm:
        backward = g.phase in ("grad_input", "grad_weight")
        dtype = backward_dtype if backward and backward_dtype else MATH_DTYPE
        return replace(g, dtype=dtype, role="", a=_in_memory(g.a), b=_in_memory(g.b), out=_in_memory(g.out))

    unfused = tuple(math(g) for g in call if not g.op.endswith("qk_recompute"))
    qk = next((g for g in call if g.role == "attn_scores"), call[0])
    passes = (SOFTMAX_PASSES_FORWARD * any(g.phase in ("forward", "recompute") for g in call)
              + SOFTMAX_PASSES_BACKWARD * any(g.phase in ("grad_input", "grad_weight") for g in call))
    return Work(unfused, qk.batch * qk.m * qk.n * MATH_DTYPE_BYTES * passes)


# -- attention written by hand -------------------------------------------------------


def _is_scores(op: Operand, tq: int, tk: int) -> bool:
    return (op.rows, op.cols) in ((tq, tk), (tk, tq))


def _on_chip(op: Operand) -> Operand:
    return Operand(op.rows, op.cols, op.cols, in_memory=False)


#: op names in a score chain that add a mask or bias to the scores (the fused call then
#: takes an additive mask) and that apply dropout to the probabilities
MASK_FILL_OPS = ("masked_fill", "masked_fill_", "where")
BIAS_OPS = ("add", "add_", "sub", "sub_")
MASKING_OPS = MASK_FILL_OPS + BIAS_OPS
DROPOUT_OPS = ("native_dropout",)
#: extra keys of a fused record made from hand-written attention: the kernel takes an
#: additive mask (every tile at its kernel's bias rate) / draws dropout (the records
#: standing for a whole kernel carry its dropout time); a bias that needs its gradient
#: carries ``bias_grad`` (its element size) as a captured call's records do
WITH_BIAS, WITH_DROPOUT = "with_bias", "with_dropout"
#: a fused attention record's extra key: the call has a mask that needs no gradient (a
#: padding or causal mask), which PyTorch's kernel choice reads
MASKED = "masked"


@dataclass(frozen=True)
class ChainNeeds:
    """What the fused call must do that the hand-written chain did: take an additive
    mask or bias (``bias``), one that needs its gradient (``bias_grad``: a learned
    position bias, which cuDNN refuses), and draw dropout."""

    bias: bool = False
    dropout: bool = False
    bias_grad: bool = False


def fused(g: Gemm, tq: int, tk: int, op: str, needs: ChainNeeds = ChainNeeds(), whole: bool = False,
          kernel: str = "") -> Gemm:
    """``g`` as the fused attention kernel runs it (named ``op``; ``kernel``: the SDPA
    kernel PyTorch picks for the call, :meth:`HandWritten.kernel`): score-shaped
    operands stay on chip; a GEMM that produces scores is ``attn_scores``, one that
    reads them ``attn_values``; with what the chain ``needs`` (``whole``: the record
    stands for the whole kernel, and carries its dropout)."""
    a = _on_chip(g.a) if _is_scores(g.a, tq, tk) else g.a
    b = _on_chip(g.b) if _is_scores(g.b, tq, tk) else g.b
    out = _on_chip(g.out) if _is_scores(g.out, tq, tk) else g.out
    role: Role = "attn_scores" if not out.in_memory else "attn_values"
    extra: tuple[tuple[str, object], ...] = (("is_causal", False),)
    extra += (("kernel", kernel),) if kernel else ()
    extra += (("bias_grad", g.dtype_bytes),) if needs.bias_grad else ()
    extra += ((WITH_BIAS, True),) if needs.bias else ()
    extra += ((WITH_DROPOUT, True),) if needs.dropout and whole else ()
    return replace(g, op=op, a=a, b=b, out=out, role=role, extra=extra)


@dataclass
class HandWritten:
    """One hand-written attention: its QKᵀ and PV GEMMs and their backward GEMMs."""

    qk: Gemm
    pv: Gemm
    backward: list[Gemm] = field(default_factory=list)

    @property
    def tq(self) -> int:
        return self.pv.m

    @property
    def tk(self) -> int:
        return self.pv.k

    @property
    def gemms(self) -> list[Gemm]:
        return [self.qk, self.pv, *self.backward]

    @property
    def score_elems(self) -> int:
        return self.pv.batch * self.tq * self.tk

    def _dims(self) -> tuple[list[int], list[int]]:
        return sorted((self.tq, self.tk, self.qk.k)), sorted((self.tq, self.tk, self.pv.n))

    def recompute_slot(self) -> int | None:
        """Position (among the backward GEMMs) of the one producing dP: the fused
        backward recomputes S = QKᵀ there, from the same tiles."""
        return next((i for i, g in enumerate(self.backward) if _is_scores(g.out, self.tq, self.tk)), None)

    def kernel(self, needs: ChainNeeds = ChainNeeds()) -> str:
        """The SDPA kernel PyTorch picks for the call that replaces this attention
        (:func:`gpu_kernel`): q, k and v as the GEMMs read them, the chain's mask or bias
        (broadcast, with its gradient where it needs one) and its dropout."""
        half = self.pv.dtype in ("bf16", "fp16")
        align = EFFICIENT_ALIGN_BYTES // self.pv.dtype_bytes
        return gpu_kernel(AttentionCall(
            d_qk=self.qk.k, d_v=self.pv.n, seq_q=self.tq, seq_k=self.tk, element_bytes=self.pv.dtype_bytes,
            half=half, has_mask=needs.bias, mask_requires_grad=needs.bias_grad, mask_broadcasts=True,
            dropout_p=0.0,  # the dispatcher reads no dropout probability (_cudnn_takes)
            is_causal=False, requires_grad=bool(self.backward),
            efficient_aligned=not (self.qk.k % align or self.pv.n % align)))

    def fused(self, needs: ChainNeeds = ChainNeeds()) -> list[Gemm]:
        """The fused kernel's GEMMs, one per recorded GEMM: the forward QKᵀ with S on
        chip, PV reading P on chip, and each backward GEMM with dS/dP/P on chip. They
        carry the names the capture gives SDPA's GEMMs (``sdpa.qk`` and
        ``sdpa.qk_recompute`` stand for the whole forward / backward kernel), the kernel
        PyTorch picks for the call (:meth:`kernel`), and what the chain ``needs`` (a
        mask, dropout)."""
        slot, kernel = self.recompute_slot(), self.kernel(needs)
        qk = fused(self.qk, self.tq, self.tk, "sdpa.qk", needs, whole=True, kernel=kernel)
        pv = fused(self.pv, self.tq, self.tk, "sdpa.pv", needs, kernel=kernel)
        return [qk, pv, *(fused(g, self.tq, self.tk, "sdpa.qk_recompute" if i == slot else "sdpa.bwd", needs,
                                whole=i == slot, kernel=kernel) for i, g in enumerate(self.backward))]

    def recompute(self, needs: ChainNeeds = ChainNeeds()) -> tuple[Gemm, ...]:
        """What the fused backward adds: QKᵀ computed again (none without backward), in
        the backward kernel (its phase: that kernel's grid, not the forward's)."""
        slot = self.recompute_slot()
        if slot is None:
            return ()
        qk = fused(self.qk, self.tq, self.tk, "sdpa.qk", needs, kernel=self.kernel(needs))
        return (replace(qk, phase=self.backward[slot].phase),)

    def bias_padding(self, needs: ChainNeeds) -> tuple[Op, ...]:
        """The kernels PyTorch runs to pad the fused call's bias where the memory-efficient
        kernel runs it (``shapelint.physics.attention_bias``): the fix's bias is of the
        scores' shape where it needs its gradient, a [Tq, Tk] mask otherwise."""
        if not needs.bias or self.kernel(needs) != "efficient":
            return ()
        elems = self.score_elems if needs.bias_grad else self.tq * self.tk
        return padding_ops(elems, self.tk, self.pv.dtype_bytes, needs.bias_grad, bool(self.backward))

    def bias_grad_bytes(self, needs: ChainNeeds) -> int:
        """Bytes the fused backward writes for the gradient of a bias that needs one
        (:func:`bias_grad_bytes`: its record carries ``bias_grad``, the scores' element
        size, as under autocast SDPA takes the mask in the compute dtype)."""
        return bias_grad_bytes(self.fused(needs)[0]) if self.backward else 0


def fused_added(atts: Sequence[HandWritten], needs: ChainNeeds) -> Work:
    """What the fused calls replacing ``atts`` run besides their GEMMs' records: QKᵀ
    computed again in backward, the expanded gradient of a bias that needs one (an
    elementwise write, as the step prices a captured call's), and the copies PyTorch
    makes of a bias the memory-efficient kernel cannot read unpadded."""
    grads = tuple(bias_grad_op(nbytes) for att in atts if (nbytes := att.bias_grad_bytes(needs)))
    return Work(tuple(g for att in atts for g in att.recompute(needs)),
                ops=grads + tuple(op for att in atts for op in att.bias_padding(needs)))


def find_hand_written(gemms: Sequence[Gemm]) -> dict[str, list[HandWritten]]:
    """Hand-written attentions by module: each PV GEMM fed by a softmax, paired with
    the closest earlier batched GEMM of its module producing its [Tq, Tk] operand."""
    by_module: dict[str, list[Gemm]] = {}
    for g in gemms:
        by_module.setdefault(g.module, []).append(g)
    out: dict[str, list[HandWritten]] = {}
    for module, gs in by_module.items():
        used: set[int] = set()
        found = _forward_pairs(gs, used)
        for att in found:
            _take_backward(att, gs, used)
        if found:
            out[module] = found
    return out


def _forward_pairs(gs: Sequence[Gemm], used: set[int]) -> list[HandWritten]:
    """One module's hand-written attentions, forward: each PV batched matmul that reads
    a softmax's output with the latest earlier batched matmul whose output is its
    [Tq, Tk] operand (both are then ``used``)."""
    found: list[HandWritten] = []
    for pv in gs:
        if pv.role != "after_softmax" or pv.op not in BATCHED_OPS or pv.phase not in ("forward", "recompute"):
            continue
        partners = [g for g in gs if g.index < pv.index and g.index not in used and g.op in BATCHED_OPS
                    and g.phase == pv.phase and g.batch == pv.batch and (g.m, g.n) == (pv.m, pv.k)]
        if not partners:
            continue
        att = HandWritten(partners[-1], pv)
        used.update((att.qk.index, pv.index))
        found.append(att)
    return found


def _take_backward(att: HandWritten, gs: Sequence[Gemm], used: set[int]) -> None:
    """The (up to four) backward batched matmuls of ``att``: unused ones of its batch
    whose dimensions are those of QKᵀ or PV."""
    shapes = att._dims()
    for g in gs:
        if len(att.backward) == 4:
            break
        if (g.phase == "grad_input" and g.op in BATCHED_OPS and g.index not in used
                and g.batch == att.pv.batch and sorted((g.m, g.n, g.k)) in shapes):
            att.backward.append(g)
            used.add(g.index)
