"""How ``--verify`` runs a GEMM record on the GPU: random operands (never zeros) with
exactly the recorded layouts, as the op that ran it in training. ``mm``/``addmm``/``bmm``
run on strided views that reproduce the recorded leading dimensions, offsets, batch
strides and transposes; convolutions as ``aten.convolution`` /
``convolution_backward`` with the recorded geometry; fused attention as
``F.scaled_dot_product_attention`` forward / backward, one kernel for several GEMM
records (:func:`kernel_key`). A fusion (attention written by hand) runs as a whole block
before and after (:func:`gpu_block_runner`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from shapelint.model.dtypes import TORCH_DTYPE_NAMES
from shapelint.model.records import Finding, Gemm, Operand

#: a GEMM record's kernel, ready to call (None: it cannot run here)
Runner = Callable[[Gemm], "Callable[[], object] | None"]
#: a finding's whole block before and after, for a fusion (None: not a fusion)
BlockRunner = Callable[[Finding, dict[int, Gemm]], "tuple[Callable[[], object], Callable[[], object]] | None"]


def kernel_key(g: Gemm) -> Any:
    """What identifies the kernel a GEMM runs in: the fused attention kernels run
    several GEMMs each (timed once, on their first GEMM)."""
    if g.op.startswith("sdpa."):
        part = g.op.split(".", 1)[1]
        if part not in ("qk", "qk_recompute"):
            return None
        return ("sdpa", part, g.m, g.n, g.k, g.batch, g.dtype, g.extra)
    return (g.op, g.phase, g.m, g.n, g.k, g.batch, g.dtype, g.a, g.b, g.out, g.extra)


def materialize(op: Operand, batch: int, batched: bool, dtype: Any, device: str) -> Any:
    """A random tensor with exactly ``op``'s layout (strides, offset, batch stride)."""
    import torch

    rows, cols = op.rows, op.cols
    if op.copied:  # neither stride is 1: every other element of a wider buffer
        base = torch.randn(batch, rows, 2 * cols, dtype=dtype, device=device)[..., ::2]
        return base if batched else base[0]
    bs = op.batch_stride or (rows * cols if batch > 1 else 0)
    strides = (1, op.ld) if op.transposed else (op.ld, 1)
    extent = ((cols - 1) * op.ld + rows) if op.transposed else ((rows - 1) * op.ld + cols)
    size = op.offset + (batch - 1) * bs + extent
    storage = torch.randn(size, dtype=dtype, device=device)
    if batched:
        return storage.as_strided((batch, rows, cols), (bs, *strides), op.offset)
    return storage.as_strided((rows, cols), strides, op.offset)


def gpu_runner(device: str = "cuda") -> Runner:
    import torch

    def runner(g: Gemm) -> Callable[[], object] | None:
        if g.dtype not in TORCH_DTYPE_NAMES:
            return None
        dtype = getattr(torch, TORCH_DTYPE_NAMES[g.dtype])
        torch.backends.cuda.matmul.allow_tf32 = g.dtype == "tf32"
        torch.backends.cudnn.allow_tf32 = g.dtype == "tf32"
        if g.role == "conv":
            return _conv_runner(g, dtype, device)
        if g.op.startswith("sdpa."):
            return _sdpa_runner(g, dtype, device)
        batched = g.op in ("bmm", "baddbmm") or g.batch > 1
        a = materialize(g.a, g.batch, batched, dtype, device)
        b = materialize(g.b, g.batch, batched, dtype, device)
        if batched:
            return lambda: torch.bmm(a, b)
        if g.op in ("addmm", "_addmm_activation"):
            bias = torch.randn(g.n, dtype=dtype, device=device)
            return lambda: torch.addmm(bias, a, b)
        return lambda: torch.mm(a, b)

    return runner


def _conv_runner(g: Gemm, dtype: Any, device: str) -> Callable[[], object] | None:
    import torch

    from shapelint.physics.conv import ConvCall

    if not g.extra:
        return None
    call = ConvCall(g.module, g.extra)
    if call.transposed:
        return None
    groups = call.groups
    n_batch, _, *spatial = call.shape("input")
    kernel = list(call.kernel_shape)
    rs = math.prod(kernel)
    part = g.op.split(".", 1)[1] if "." in g.op else "forward"
    if part == "forward":
        c_out, c_in = g.n * groups, g.k * groups // rs
    elif part == "grad_input":
        c_out, c_in = g.k * groups, g.n * groups // rs
    else:
        c_out, c_in = g.m * groups, g.n * groups // rs
    channels_last = not g.a.copied
    fmt = torch.channels_last if channels_last and len(spatial) == 2 else torch.contiguous_format
    inp = torch.randn(n_batch, c_in, *spatial, dtype=dtype, device=device).to(memory_format=fmt)
    w = torch.randn(c_out, c_in // groups, *kernel, dtype=dtype, device=device).to(memory_format=fmt)
    stride, padding, dilation = (list(call.shape(k)) for k in ("stride", "padding", "dilation"))
    conv = torch.ops.aten.convolution.default
    if part == "forward":
        return lambda: conv(inp, w, None, stride, padding, dilation, False, [0] * len(spatial), groups)
    out = conv(inp, w, None, stride, padding, dilation, False, [0] * len(spatial), groups)
    grad = torch.randn_like(out).to(memory_format=fmt)
    mask = [part == "grad_input", part == "grad_weight", False]
    back = torch.ops.aten.convolution_backward.default
    return lambda: back(grad, inp, w, None, stride, padding, dilation, False, [0] * len(spatial), groups, mask)


def _sdpa_runner(g: Gemm, dtype: Any, device: str) -> Callable[[], object] | None:
    import torch
    import torch.nn.functional as F

    causal = bool(dict(g.extra).get("is_causal", False))
    bh, tq, tk, d = g.batch, g.m, g.n, g.k
    q = torch.randn(1, bh, tq, d, dtype=dtype, device=device, requires_grad=True)
    k = torch.randn(1, bh, tk, d, dtype=dtype, device=device, requires_grad=True)
    v = torch.randn(1, bh, tk, d, dtype=dtype, device=device, requires_grad=True)
    if g.op == "sdpa.qk":
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    grad = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)


def graphed(fn: Callable[[], object], device: str) -> Callable[[], object]:
    """``fn`` captured once as a CUDA graph, its replay to be timed: the block's GPU time,
    as a training step that keeps the GPU busy runs it, without the host's time to issue
    each kernel (a standalone block of small kernels, forward and backward through
    autograd, is otherwise timed at the host's pace: perceiver-pytorch's latent
    self-attention, 0.66 ms queued against about 0.1 ms of kernels). ``fn`` itself on
    the CPU, or where the block cannot be captured (:func:`both_graphed` then refuses the
    block)."""
    import torch

    if not device.startswith("cuda"):
        return fn
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(GRAPH_WARMUP):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
    except RuntimeError:  # not capturable here (a kernel that syncs): timed as issued
        torch.cuda.synchronize()
        return fn
    return graph.replay


#: calls before a block is captured (autograd's and the kernels' lazy set-up run first)
GRAPH_WARMUP = 3


def gpu_block_runner(device: str = "cuda", graph: bool = False) -> BlockRunner:
    """Hand-written attention (a GEMM fed by a softmax) against the fused kernel: QKᵀ,
    the score chain the model ran (``shapelint.measure.score_chain``; the scaling and
    softmax where the finding carries none), PV and their backward, or
    F.scaled_dot_product_attention with the mask and dropout the chain had. ``graph``:
    each side captured as a CUDA graph (:func:`graphed`), timed at the GPU's pace, as the
    estimate prices it; off by default, as ``--verify`` and the corpus runs have timed
    blocks so far (a block of small kernels is then timed at the host's pace:
    docs/known-gaps.md)."""
    import torch
    import torch.nn.functional as F

    from shapelint.measure.score_chain import DROPOUT_P, finding_chain, fused_bias, replay

    def runner(f: Finding, by_index: dict[int, Gemm]) -> tuple[Callable[[], object], Callable[[], object]] | None:
        covered = [by_index[i] for i in f.gemms]
        pv = next((g for g in covered if g.role == "after_softmax"), None)
        if pv is None or pv.dtype not in TORCH_DTYPE_NAMES:
            return None
        bh, tq, tk, dv = pv.batch, pv.m, pv.k, pv.n
        qk = next((g for g in covered if g.phase == "forward" and (g.m, g.n, g.batch) == (tq, tk, bh)), None)
        d = qk.k if qk is not None else dv
        dtype = getattr(torch, TORCH_DTYPE_NAMES[pv.dtype])
        chain = finding_chain(f, pv.dtype_bytes)
        dtypes = {4: torch.float32, pv.dtype_bytes: dtype}
        training = any(g.phase != "forward" for g in covered)
        # learned: () or the mask, where the fix's bias needs its gradient (both sides take it)
        mask, learned = fused_bias(f, chain, training, (1, bh, tq, tk), dtype, device)
        drop = DROPOUT_P * (chain.dropout and training)
        q = torch.randn(1, bh, tq, d, dtype=dtype, device=device, requires_grad=True)
        k = torch.randn(1, bh, tk, d, dtype=dtype, device=device, requires_grad=True)
        v = torch.randn(1, bh, tk, dv, dtype=dtype, device=device, requires_grad=True)
        grad = torch.randn(1, bh, tq, dv, dtype=dtype, device=device)

        def unfused_forward() -> torch.Tensor:
            return replay(chain, q @ k.transpose(-1, -2), dtypes, tq, tk, *learned).to(dtype) @ v

        def fused_forward() -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)

        sides: tuple[Callable[[], object], Callable[[], object]] = (unfused_forward, fused_forward)
        if training:  # forward and backward; inference: the forward pass alone
            inputs = (q, k, v, *learned)
            sides = (lambda: torch.autograd.grad(unfused_forward(), inputs, grad),
                     lambda: torch.autograd.grad(fused_forward(), inputs, grad))
        return both_graphed(sides, device) if graph else sides

    return runner


def both_graphed(sides: tuple[Callable[[], object], Callable[[], object]],
                 device: str) -> tuple[Callable[[], object], Callable[[], object]]:
    """Both sides of a block as CUDA graphs, or an error where either cannot be captured
    on the GPU: one side graphed and the other timed as issued would mix GPU time with the
    host's pace (off the GPU both stay as issued)."""
    out = (graphed(sides[0], device), graphed(sides[1], device))
    if device.startswith("cuda") and any(g is fn for g, fn in zip(out, sides)):
        raise RuntimeError("the block cannot be captured as a CUDA graph (a kernel that synchronises); "
                           "not timed as graphs")
    return out


__all__ = ["BlockRunner", "Runner", "gpu_block_runner", "gpu_runner", "graphed", "kernel_key", "materialize"]
