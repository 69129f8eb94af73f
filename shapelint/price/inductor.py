"""Inductor's part of a compiled step: what ``torch.compile`` (default mode) does to the
GEMMs and memory-bound ops the step model prices. Read from ``torch/_inductor/fx_passes/
pad_mm.py``, ``ir.py`` and ``choices.py`` of torch 2.11–2.13.

- **pad_mm** pads a GEMM (``mm``, ``addmm``, ``bmm``) whose M, K or N is not a multiple
  of 8 (bf16/fp16) or 4 (fp32) when it is compute-bound by its own test and the padded
  GEMM with its pad copies benchmarks more than 1.1x faster, and then runs the padded
  one (`pad_mm_padded`).
- **Layout**: a transposed operand pad_mm does not pad that an op of the same graph
  makes, the op writes in the order whose leading dimension is aligned
  (`inductor_laid_out`, `transposed_made_in_graph`).
- **Fusion**: the memory-bound ops between two GEMM or attention kernels of one pass
  fuse into kernels that read what comes from outside the run and write what is read
  outside it (`fused_regions`). They become one kernel per iteration space (ops over
  the same number of elements), a reduction taking in the pointwise ops over its input
  and over its result, and a reduction with few outputs and long rows (a bias gradient
  summed over the tokens) two (Inductor's split reduction); an op repeating an earlier
  one of its pass on the same tensors is dropped (common subexpression elimination).
  Against the profiler's count of the compiled steps of ``docs/step-measurements.md``
  (memsets apart): GPT-2 506 of 612 kernels, OPT 707 of 900 (three graph breaks), BERT
  782 of 997, Llama 549 of 546, Qwen2.5 1701 of 1653.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from shapelint.hardware import Hardware
from shapelint.model.records import Gemm, Op, Operand
from shapelint.physics.conv import conv_calls
from shapelint.physics.conv_kernels import BATCH_NORM
from shapelint.physics.reshape import set_dim
from shapelint.price.gemm import gemm_ms
from shapelint.price.kernels import memory_kernel_ms

#: pad_mm: the alignment (elements) it pads M, K, N to, per element size
PAD_MM_ALIGN: dict[int, int] = {2: 8, 4: 4}
#: pad_mm pads when the original benchmarks slower than this times the padded one
PAD_MM_MARGIN = 1.1
#: pad_mm's machine balance is halved ("dram_gbps might be underestimating bandwidth")
PAD_MM_BALANCE = 0.5
#: the GEMM ops pad_mm matches
PAD_MM_OPS = ("mm", "addmm", "bmm")


# -- pad_mm ------------------------------------------------------------------------------


def pad_mm_padded(g: Gemm, hw: Hardware) -> tuple[Gemm, float] | None:
    """The GEMM Inductor's pad_mm would run instead of ``g`` (padded, and the ms of its
    pad copies), or None when it leaves ``g`` as it is.

    pad_mm decides by timing eager ops (``should_pad_bench``: ``aten.constant_pad_nd``
    on a tensor laid out as the operand is, then the GEMM), and a transposed operand's
    eager pad is a slow transposing copy (``transpose_copy_efficiency``, 0.143 on an
    H100). The pad it then puts in the graph is an Inductor kernel, which tiles a
    transposing copy like any of its fused kernels (``elementwise_efficiency``): the
    executed copy is priced at Inductor's rate, which matches the compiled speedup of
    GPT-2 medium's vocabulary fix (``docs/step-measurements.md``), and the eager rate
    overstates it."""
    align = PAD_MM_ALIGN.get(g.dtype_bytes)
    if align is None or g.op.split(".")[0] not in PAD_MM_OPS or g.role not in ("", "after_softmax"):
        return None
    pads = {axis: -getattr(g, axis) % align for axis in ("m", "k", "n")}
    if not any(pads.values()) or not _compute_bound(g, hw):
        return None
    padded = g
    for axis, extra in pads.items():
        if extra:
            padded = set_dim(padded, axis, getattr(g, axis) + extra)
    timed = executed = 0.0
    for op, axes in ((g.a, ("m", "k")), (g.b, ("k", "n"))):
        if any(pads[a] for a in axes):
            nbytes = 2 * op.rows * op.cols * g.batch * g.dtype_bytes
            eager = hw.step.transpose_copy_efficiency if op.transposed else hw.step.elementwise_efficiency
            timed += memory_kernel_ms(nbytes, eager, hw)
            executed += memory_kernel_ms(nbytes, hw.step.elementwise_efficiency, hw)
    if gemm_ms(g, hw) <= PAD_MM_MARGIN * (gemm_ms(padded, hw) + timed):
        return None
    return padded, executed


def _compute_bound(g: Gemm, hw: Hardware) -> bool:
    """pad_mm's ``is_mm_compute_bound``: arithmetic intensity above half the machine balance."""
    m, k, n = g.m, g.k, g.n
    intensity = m * n * k / max(1, m * k + n * k + m * n)
    tflops = hw.tensor_tflops.get(g.dtype, hw.fp32_tflops)
    return intensity > PAD_MM_BALANCE * 1000 * tflops / hw.memory_bandwidth_gbps


def compiled_gemm_ms(g: Gemm, hw: Hardware, made_in_graph: tuple[str, ...] = ()) -> float:
    """A GEMM's time in a compiled step: padded by pad_mm where it pads it, else with
    the operands Inductor lays out itself (``made_in_graph``) as it lays them out."""
    padded = pad_mm_padded(g, hw)
    if padded is None:
        return gemm_ms(inductor_laid_out(g, made_in_graph, hw) or g, hw)
    return gemm_ms(padded[0], hw) + padded[1]


def inductor_laid_out(g: Gemm, made_in_graph: tuple[str, ...], hw: Hardware) -> Gemm | None:
    """``g`` as Inductor runs it when a transposed operand whose leading dimension
    breaks the alignment rule is made in the same compiled graph (``made_in_graph``):
    the op making it writes it in the other order, whose leading dimension is aligned.
    Measured (``docs/benchmarks.md``, "pad_mm's decisions", and ``--verify --step``):
    pad_mm leaves the LM head's weight-gradient GEMM
    (``dlogits^T @ x``) unpadded in BERT, RoBERTa and GPT-2 alike, yet fixing the
    vocabulary gains nothing compiled in BERT (1.004-1.007x) and RoBERTa (0.995x),
    whose loss is in the model's graph; GPT-2's loss is a graph of its own and there
    the GEMM runs misaligned (4.28 ms, align1). None when nothing changes."""
    align = hw.align_elems(g.dtype_bytes)

    def laid_out(op: Operand, name: str) -> Operand:
        if name in made_in_graph and op.transposed and op.ld % align and op.cols % align == 0:
            return replace(op, transposed=False, ld=op.cols)
        return op

    a, b = laid_out(g.a, "a"), laid_out(g.b, "b")
    return None if (a, b) == (g.a, g.b) else replace(g, a=a, b=b)


#: Inductor skips its layout optimisation when the graph has this many nodes per convolution or more
LAYOUT_OPT_NODES_PER_CONV = 300


def layout_optimized(gemms: Sequence[Gemm], graph_ops: int) -> bool:
    """Whether Inductor runs a training graph's convolutions channels-last whatever the
    model's layout (``GraphLowering.decide_layout_opt``, ``is_inference=False``):
    there are convolutions, fewer than ``LAYOUT_OPT_NODES_PER_CONV`` graph nodes per
    convolution (``graph_ops``: the step's forward ops stand for the graph's nodes), no
    grouped convolution with more than one input channel per group, none whose kernel
    is wider than 1 with at least twice the input channels of its output, and not
    every convolution 64 channels or fewer each way. Measured (H100, 2026-11-26,
    ``benchmarks/real_model_steps.py``): an NCHW MBConv stack compiled ran 40.9 ms, the
    same channels-last 40.8 ms, NCHW eager 132.6 ms."""
    calls = [c for c, _ in conv_calls(gemms)]
    weights = [c.shape("weight") for c in calls]
    if not weights or graph_ops >= LAYOUT_OPT_NODES_PER_CONV * len(weights):
        return False
    if any(c.groups > 1 and w[1] > 1 for c, w in zip(calls, weights)):
        return False
    if any(len(w) > 2 and w[0] * 2 <= w[1] and w[2] > 1 for w in weights):
        return False
    return not all(w[0] <= 64 and w[1] <= 64 for w in weights)


#: the GEMM ops whose operands `transposed_made_in_graph` follows: 2-D, Linear layers'
LAID_OUT_OPS = ("mm", "addmm")


def transposed_made_in_graph(ops: Sequence[Op], gemms: Sequence[Gemm],
                             breaks: Sequence[int]) -> dict[int, tuple[str, ...]]:
    """Per 2-D GEMM (mm, addmm), its transposed operands (``a``, ``b``) that an op
    Inductor generates makes in the same compiled graph (not a parameter, an input, a
    GEMM's output or a tensor from another graph): see `inductor_laid_out`."""
    graphs = CompiledGraphs(ops, breaks)
    made_by: dict[int, int] = {}
    out: dict[int, tuple[str, ...]] = {}
    for pos, op in enumerate(ops):
        if op.kind == "gemm" and op.gemms:
            operands = op.reads[-2:]  # mm(mat1, mat2), addmm(bias, mat1, mat2)
            for i in op.gemms:
                names = _made_here(gemms[i], operands, pos, made_by, graphs)
                if names:
                    out[i] = names
        for serial, _ in op.writes:
            made_by[serial] = pos
    return out


class CompiledGraphs:
    """Which compiled graph runs each op of a step: the forward splits at each graph
    break; the backward of the graphs after a break (the loss's) runs before the first
    backward GEMM, the rest of the backward after it; a forward tensor reaches the
    backward graph as a saved input."""

    def __init__(self, ops: Sequence[Op], breaks: Sequence[int]) -> None:
        self.ops, self.breaks = ops, breaks
        self.first_backward_gemm = next(
            (i for i, op in enumerate(ops) if op.backward and op.kind in ("gemm", "attention")), len(ops))

    def of(self, i: int) -> tuple[bool, int]:
        """(backward, graph number) of ``ops[i]``."""
        if not self.ops[i].backward:
            return False, bisect.bisect_right(self.breaks, i)
        return True, len(self.breaks) if self.breaks and i < self.first_backward_gemm else 0


def _made_here(g: Gemm, operands: Sequence[tuple[int, int]], pos: int, made_by: Mapping[int, int],
               graphs: CompiledGraphs) -> tuple[str, ...]:
    """The transposed operands of ``g`` (run by ``ops[pos]``, reading ``operands``) that an
    op other than a GEMM or attention made in the same graph."""
    if g.op.split(".")[0] not in LAID_OUT_OPS or len(operands) < 2:
        return ()

    def made_here(name: str, serial: int) -> bool:
        maker = made_by.get(serial)
        return (getattr(g, name).transposed and maker is not None
                and graphs.ops[maker].kind not in ("gemm", "attention") and graphs.of(maker) == graphs.of(pos))

    return tuple(name for name, (serial, _) in zip(("a", "b"), operands) if made_here(name, serial))


# -- fusion ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Fused:
    """A run of memory-bound ops between two GEMM/attention kernels of one pass, as
    Inductor fuses it: the bytes it must still read and write, the kernels it becomes
    (``pointwise``: one per iteration space that no reduction absorbs) and the
    (elements read, elements made) of each distinct reduction kernel."""

    ops: tuple[int, ...]
    bytes: int
    pointwise: int
    reductions: tuple[tuple[int, int], ...]
    #: it holds a batch norm: Inductor's ``triton_red_fused__native_batch_norm_legit_*``
    #: kernels reduce over N·H·W per channel and read the activation again to apply it
    norm: bool = False

    def kernels(self, hw: Hardware) -> int:
        return self.pointwise + sum(1 + _splits(n, out, hw) for n, out in self.reductions)

    def ms(self, hw: Hardware) -> float:
        """Its GPU time: its bytes at Inductor's pointwise rate, or at the measured rate of
        its batch-norm kernels (``fused_norm_efficiency``), and at least one shortest
        kernel per kernel it launches."""
        eff = hw.step.fused_norm_efficiency if self.norm else hw.step.elementwise_efficiency
        return max(memory_kernel_ms(self.bytes, eff, hw), self.kernels(hw) * hw.step.min_kernel_us * 1e-3)


#: Inductor splits a reduction in two kernels when it has too few outputs to fill the GPU
#: (fewer than 64 per SM: ``torch/_inductor/ir.py`` ``Reduction.num_splits``) and each
#: output sums more than this many elements. Inductor's own threshold is 8192 for an
#: inner reduction and none for an outer one (``choices.py`` ``reduction_split_factor``);
#: the outer ones of a step (bias and norm-weight gradients summed over the tokens) are
#: told from a row reduction (a norm over the hidden size) by their length
SPLIT_REDUCTION_MIN = 4096
SPLIT_OUTPUTS_PER_SM = 64


def _splits(numel: int, out_numel: int, hw: Hardware) -> int:
    few_outputs = out_numel < SPLIT_OUTPUTS_PER_SM * hw.sms
    return int(few_outputs and numel > SPLIT_REDUCTION_MIN * max(1, out_numel))


def fused_regions(ops: Sequence[Op]) -> list[Fused]:
    """Group the memory-bound ops of ``ops`` into Inductor's fused kernels. An op that
    repeats an earlier op of its pass on the same tensors (autocast casting one
    activation for each of three projections) is one node after Inductor's common
    subexpression elimination, and is dropped."""
    readers: dict[int, set[int]] = {}
    for op in ops:
        for serial, _ in op.reads:
            readers.setdefault(serial, set()).add(op.index)
    out: list[Fused] = []
    run: list[Op] = []
    seen: set[tuple[object, ...]] = set()

    def close() -> None:
        if run:
            out.append(_fuse(run, readers))
            run.clear()

    for op in ops:
        if op.kind in ("gemm", "attention") or (run and run[-1].backward != op.backward):
            close()
        if op.kind in ("gemm", "attention"):
            continue
        key = (op.name, op.backward, op.reads, tuple(b for _, b in op.writes))
        if op.kind in ("copy", "pointwise") and key in seen:
            continue
        seen.add(key)
        run.append(op)
    close()
    return out


def _fuse(run: Sequence[Op], readers: Mapping[int, set[int]]) -> Fused:
    inside = {op.index for op in run}
    written: set[int] = set()
    read_bytes: dict[int, int] = {}
    for op in run:
        for serial, nbytes in op.reads:
            if serial not in written:
                read_bytes[serial] = max(read_bytes.get(serial, 0), nbytes)
        written.update(serial for serial, _ in op.writes)
    write_bytes: dict[int, int] = {}
    for op in run:
        for serial, nbytes in op.writes:
            # kept on chip only when every reader is inside the run (a tensor nothing
            # reads is a result: a gradient the optimizer reads, the loss)
            read_by = readers.get(serial)
            if not read_by or not read_by <= inside:
                write_bytes[serial] = max(write_bytes.get(serial, 0), nbytes)
    return Fused(tuple(op.index for op in run), sum(read_bytes.values()) + sum(write_bytes.values()),
                 *_kernel_groups(run), norm=any(op.name in BATCH_NORM for op in run))


def _kernel_groups(run: Sequence[Op]) -> tuple[int, tuple[tuple[int, int], ...]]:
    """Inductor fuses nodes that iterate over the same elements: a reduction with the
    pointwise ops over its input (a norm's prologue and normalised output) and over its
    result (``rsqrt(mean + eps)``), reductions of one shape with each other; every other
    iteration space (a weight's cast beside the activations) is a kernel of its own."""
    reductions: dict[tuple[int, int], None] = {}
    epilogue: set[int] = set()
    results: set[int] = set()
    spaces: set[int] = set()
    for op in run:
        if op.kind == "reduction":
            reductions[(op.numel, op.out_numel)] = None
            epilogue.update(serial for serial, _ in op.writes)
            results.add(op.out_numel)
        elif op.numel in results and any(serial in epilogue for serial, _ in op.reads):
            epilogue.update(serial for serial, _ in op.writes)
        else:
            spaces.add(op.numel)
    return len(spaces - {n for n, _ in reductions}), tuple(reductions)
