"""The whole training step: every kernel of forward, backward and the optimizer,
priced on a GPU profile, in eager mode or as ``torch.compile`` runs it.

The default step (what the H100 measurements in ``docs/step-measurements.md`` ran):
bf16 autocast over fp32 weights, the model's own loss, ``loss.backward()``, fused
AdamW, ``zero_grad(set_to_none=True)``. Per kernel, from the profile (``Hardware``
and its ``step`` table):

    GEMM              shapelint.price.gemm (one kernel per op)
    attention         its GEMMs (shapelint.price.gemm) on the kernel PyTorch picks
                      (shapelint.physics.attention), plus attention_dropout_ps per
                      score element it computes where it applies dropout, and flash's
                      copies in and out of a padded head dimension; PyTorch's math
                      kernel as unfused fp32 GEMMs and softmax passes
    memory-bound op   max(bytes / (bandwidth · efficiency of its class), min_kernel_us);
                      a copy or pointwise op on a strided tensor at the strided rate
    optimizer         passes · parameter bytes / (bandwidth · optimizer_efficiency),
                      in ceil(tensors / 36) or ceil(elements / (65536 · 320)) launches
    GPU time          kernel time + kernels · kernel_gap_us
    host time         kernels · host_us_per_kernel + parameter tensors · host_us_per_tensor
                      (training); the CPU issuing the step (compile_host_* under
                      torch.compile, where the per-tensor part dominates: ``host_costs``)
    graph breaks      under torch.compile, where dynamo splits the step into more graphs
                      (``shapelint.load.compile_probe`` runs the model to find them): the ops
                      between the graphs eager, and compile_host_us_per_graph of host
                      time per graph beyond one forward and one backward graph
    step              max(GPU time, host time); in eager mode, where the host reads a
                      value from the GPU inside the step (transformers' packed-sequence
                      check in a causal LM's forward), the timeline of host and GPU
                      through those waits (``serialised_ms``)

**torch.compile** (Inductor, default mode; read from ``torch/_inductor/fx_passes/
pad_mm.py``, ``ir.py`` and ``choices.py`` of torch 2.11–2.13): the memory-bound ops
between two GEMM or attention kernels of one pass fuse into kernels that read what comes
from outside the run and write what is read outside it. They become one kernel per
iteration space (ops over the same number of elements), a reduction taking in the
pointwise ops over its input and over its result, and a reduction with few outputs and
long rows (a bias gradient summed over the tokens) two (Inductor's split reduction); an
op repeating an earlier one of its pass on the same tensors is dropped (common
subexpression elimination). Against the profiler's count of the compiled steps of
``docs/step-measurements.md`` (memsets apart): GPT-2 506 of 612 kernels, OPT 707 of 900
(three graph breaks), BERT 782 of 997, Llama 549 of 546, Qwen2.5 1701 of 1653. ``pad_mm`` pads a
GEMM (``mm``, ``addmm``, ``bmm``) whose M, K or N is not a multiple of 8 (bf16/fp16)
or 4 (fp32) when it is compute-bound by its own test and the padded GEMM with its pad
copies benchmarks more than 1.1x faster, and then runs the padded one; a transposed
operand it does not pad that an op of the same graph makes, the op writes in the order
whose leading dimension is aligned (`inductor_laid_out`). The optimizer
stays eager, as ``torch.compile(model)`` leaves it. Attention: a Hugging Face model
whose mask transformers skips in eager gets an explicit mask under compile (torch
< 2.14), and PyTorch picks the kernel for that call
(``shapelint.physics.attention.compiled_call``): a fused kernel then computes every
score tile (no causal skipping) at ``masked_attention_efficiency`` of its rate, and
the math kernel runs its forward GEMMs in fp32 and its backward GEMMs in the compute
dtype, with one softmax kernel each way (``docs/step-measurements.md``).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Literal

from shapelint.hardware import Hardware
from shapelint.model.records import Gemm, GraphBreaks, Op, Operand, Slice
from shapelint.physics.attention import FLASH_PAD_COPIES, FLASH_PAD_TO, head_dim, math_kernel
from shapelint.physics.reshape import set_dim
from shapelint.price.gemm import CAUSAL_WORK, gemm_ms, work_ms

Mode = Literal["eager", "compile"]
MODES: tuple[Mode, ...] = ("eager", "compile")

#: passes over each parameter's bytes an optimizer step makes (reads + writes):
#: AdamW reads param, grad, exp_avg, exp_avg_sq and writes param, exp_avg, exp_avg_sq
OPTIMIZER_PASSES: dict[str, int] = {"adamw": 7, "adam": 7, "sgd": 3, "none": 0}
#: multi_tensor_apply (aten/src/ATen/native/cuda/MultiTensorApply.cuh): tensors per
#: launch at depth 4, elements per chunk, chunks (blocks) per launch
MULTI_TENSOR_TENSORS = 36
MULTI_TENSOR_CHUNK = 65536
MULTI_TENSOR_BLOCKS = 320

#: pad_mm: the alignment (elements) it pads M, K, N to, per element size
PAD_MM_ALIGN: dict[int, int] = {2: 8, 4: 4}
#: pad_mm pads when the original benchmarks slower than this times the padded one
PAD_MM_MARGIN = 1.1
#: pad_mm's machine balance is halved ("dram_gbps might be underestimating bandwidth")
PAD_MM_BALANCE = 0.5
#: the GEMM ops pad_mm matches
PAD_MM_OPS = ("mm", "addmm", "bmm")


@dataclass(frozen=True)
class StepTime:
    """One training step's estimate: ``ms`` is the step, the larger of the GPU time
    and the host time to issue its kernels."""

    ms: float
    gpu_ms: float
    host_ms: float
    gemm_ms: float
    kernels: int
    mode: Mode
    #: kernel time per class (gemm, attention, pointwise, reduction, copy, fill, fused,
    #: between_graphs, optimizer)
    by_class: tuple[tuple[str, float], ...] = ()
    #: times the host waits for the GPU inside the step (eager: a value read on the host)
    syncs: int = 0
    #: host time of the graphs beyond one forward and one backward graph and of the ops
    #: run eagerly between them (``between_graphs``; compile mode, where probed)
    graphs_host_ms: float = 0.0

    @property
    def bound(self) -> str:
        return "host" if self.host_ms > self.gpu_ms else "gpu"

    @property
    def gemm_share(self) -> float:
        return self.gemm_ms / self.ms if self.ms else 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "step_ms": round(self.ms, 4), "gpu_ms": round(self.gpu_ms, 4), "host_ms": round(self.host_ms, 4),
            "gemm_ms": round(self.gemm_ms, 4), "kernels": self.kernels, "mode": self.mode, "bound": self.bound,
            "by_class": {k: round(v, 4) for k, v in self.by_class}, "host_syncs": self.syncs,
        }


@dataclass(frozen=True)
class Step:
    """What the step model needs from a capture."""

    gemms: Sequence[Gemm]
    ops: Sequence[Op]
    #: (element count, bytes per element) of each trained parameter
    params: Sequence[tuple[int, int]]
    training: bool = True
    #: positions in ``ops`` before which an eager step's host reads a value from the GPU
    #: (``shapelint.capture.recorder.note_host_sync``), waiting for every kernel issued before
    syncs: tuple[int, ...] = ()
    #: positions in ``ops`` where torch.compile's graph breaks (``shapelint.capture.recorder.note_graph_break``)
    breaks: tuple[int, ...] = ()
    #: the graphs torch.compile calls and the ops it runs eagerly between them, where
    #: probed (``shapelint.load.compile_probe``); None: one forward and one backward graph
    graphs: GraphBreaks | None = None

    @cached_property
    def regions(self) -> list[Fused]:
        """The fused kernels of a compiled step (they do not depend on GEMM times)."""
        return fused_regions(self.ops)

    @cached_property
    def made_in_graph(self) -> dict[int, tuple[str, ...]]:
        """Per 2-D GEMM (mm, addmm), its transposed operands (``a``, ``b``) that an op
        Inductor generates makes in the same compiled graph (not a parameter, an input,
        a GEMM's output or a tensor from another graph): see `inductor_laid_out`."""
        return transposed_made_in_graph(self.ops, self.gemms, self.breaks)


# -- kernels ---------------------------------------------------------------------------


def memory_kernel_ms(nbytes: float, efficiency: float, hw: Hardware) -> float:
    """One memory-bound kernel moving ``nbytes`` at ``efficiency`` of the datasheet bandwidth."""
    seconds = nbytes / (hw.memory_bandwidth_gbps * 1e9 * efficiency)
    return 1e3 * max(seconds, hw.step.min_kernel_us * 1e-6)


def op_ms(op: Op, hw: Hardware) -> float:
    """An eager memory-bound op (not a GEMM or attention)."""
    s = hw.step
    if op.kind == "reduction":
        eff = s.reduction_efficiency
    elif op.kind in ("copy", "pointwise") and op.strided:
        eff = s.strided_copy_efficiency
    else:
        eff = s.elementwise_efficiency
    return memory_kernel_ms(op.bytes, eff, hw)


def optimizer_ms(params: Sequence[tuple[int, int]], optimizer: str, hw: Hardware) -> tuple[float, int]:
    """(time, launches) of the optimizer step over ``params``."""
    passes = OPTIMIZER_PASSES[optimizer]
    if not passes or not params:
        return 0.0, 0
    nbytes = passes * sum(n * b for n, b in params)
    chunks = sum(math.ceil(n / MULTI_TENSOR_CHUNK) for n, _ in params)
    launches = max(math.ceil(len(params) / MULTI_TENSOR_TENSORS), math.ceil(chunks / MULTI_TENSOR_BLOCKS))
    seconds = nbytes / (hw.memory_bandwidth_gbps * 1e9 * hw.step.optimizer_efficiency)
    return 1e3 * seconds, launches


# -- attention ----------------------------------------------------------------------------


def attention_ms(call: Sequence[Gemm], hw: Hardware, mode: Mode,
                 times: Mapping[int, float] | None = None) -> tuple[float, int]:
    """(time, kernels) of one attention op of the step: ``call`` is the GEMMs of one
    kernel (the forward's, or the backward's), plus, on flash with a head dimension it
    pads, the copies in and out of the padded layout. ``times`` overrides GEMMs' times
    (a finding's after-times, as a fused kernel runs them eager: under compile they are
    taken to run fused with the mask, where transformers gives one)."""
    times = times or {}
    extra = dict(call[0].extra)
    masked = mode == "compile" and "compiled" in extra
    kernel = extra.get("compiled") if masked else extra.get("kernel")
    causal = bool(extra.get("is_causal")) and not masked
    if kernel == "math" and not any(g.index in times for g in call):
        work = math_kernel(call, backward_dtype=call[0].dtype if mode == "compile" else None)
        return work_ms(work, hw), len(work.gemms) + 1
    ms = 0.0
    for g in call:
        if g.index in times:  # eager fused time; all tiles, at the masked rate, under a mask
            ms += times[g.index] / ((CAUSAL_WORK if extra.get("is_causal") else 1.0) * hw.step.masked_attention_efficiency
                                    if masked else 1.0)
        elif masked:
            full = replace(g, extra=tuple((k, False if k == "is_causal" else v) for k, v in g.extra))
            ms += gemm_ms(full, hw) / hw.step.masked_attention_efficiency
        else:
            ms += gemm_ms(g, hw)
    scores = next((g for g in call if g.role == "attn_scores"), call[0])
    if extra.get("dropout"):
        elements = scores.batch * scores.m * scores.n * (CAUSAL_WORK if causal else 1.0)
        ms += elements * hw.step.attention_dropout_ps * 1e-9
    d = head_dim(scores)
    # copies into and out of the padded head dimension (a finding on these GEMMs fixes the head dimension)
    if kernel == "flash" and d % FLASH_PAD_TO and not any(g.index in times for g in call):
        padded = d + -d % FLASH_PAD_TO
        nbytes = scores.batch * scores.m * (d + padded) * scores.dtype_bytes
        ms += FLASH_PAD_COPIES * memory_kernel_ms(nbytes, hw.step.strided_copy_efficiency, hw)
        return ms, 1 + FLASH_PAD_COPIES
    return ms, 1


# -- torch.compile: pad_mm --------------------------------------------------------------


def pad_mm_padded(g: Gemm, hw: Hardware) -> tuple[Gemm, float] | None:
    """The GEMM Inductor's pad_mm would run instead of ``g`` (padded, and the ms of its
    pad copies), or None when it leaves ``g`` as it is.

    pad_mm decides by timing eager ops (``should_pad_bench``: ``aten.constant_pad_nd``
    on a tensor laid out as the operand is, then the GEMM), and a transposed operand's
    eager pad is a slow transposing copy (``transpose_copy_efficiency``, 0.143 on an
    H100). The pad it then puts in the graph is an Inductor kernel, which tiles a
    transposing copy like any of its fused kernels (``elementwise_efficiency``): GPT-2
    medium's LM head, whose three GEMMs pad_mm pads, measured 1.008x compiled for its
    vocabulary fix (H100, 2026-11-25), where pricing the executed copy at the eager
    rate gave 1.064x, and gives 1.012x at Inductor's."""
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
    Measured on an H100 (torch 2.11, ``benchmarks/pad_mm_decisions.py`` and
    ``--verify --step``): pad_mm leaves the LM head's weight-gradient GEMM
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


#: the GEMM ops whose operands `transposed_made_in_graph` follows: 2-D, Linear layers'
LAID_OUT_OPS = ("mm", "addmm")


def transposed_made_in_graph(ops: Sequence[Op], gemms: Sequence[Gemm],
                             breaks: Sequence[int]) -> dict[int, tuple[str, ...]]:
    """See `Step.made_in_graph`. The graphs: the forward splits at each break; the
    backward of the graphs after a break (the loss's) runs before the first backward
    GEMM, the rest of the backward after it; a forward tensor reaches the backward
    graph as a saved input."""
    first_backward_gemm = next((i for i, op in enumerate(ops) if op.backward and op.kind in ("gemm", "attention")),
                               len(ops))

    def graph(i: int) -> tuple[bool, int]:
        if not ops[i].backward:
            return False, bisect.bisect_right(breaks, i)
        return True, len(breaks) if breaks and i < first_backward_gemm else 0

    made_by: dict[int, int] = {}
    out: dict[int, tuple[str, ...]] = {}
    for pos, op in enumerate(ops):
        if op.kind == "gemm" and op.gemms:
            operands = op.reads[-2:]  # mm(mat1, mat2), addmm(bias, mat1, mat2)
            for i in op.gemms:
                g = gemms[i]
                if g.op.split(".")[0] not in LAID_OUT_OPS or len(operands) < 2:
                    continue
                names = tuple(name for name, (serial, _) in zip(("a", "b"), operands)
                              if getattr(g, name).transposed and serial in made_by
                              and ops[made_by[serial]].kind not in ("gemm", "attention")
                              and graph(made_by[serial]) == graph(pos))
                if names:
                    out[i] = names
        for serial, _ in op.writes:
            made_by[serial] = pos
    return out


# -- torch.compile: fusion --------------------------------------------------------------


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

    def kernels(self, hw: Hardware) -> int:
        return self.pointwise + sum(1 + _splits(n, out, hw) for n, out in self.reductions)


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
                 *_kernel_groups(run))


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


# -- the step ----------------------------------------------------------------------------


def step_time(step: Step, hw: Hardware, mode: Mode = "eager", optimizer: str = "adamw",
              gemm_times: Mapping[int, float] | None = None, extra_ms: float = 0.0) -> StepTime:
    """The step's estimate. ``gemm_times`` overrides GEMM records' times (a finding's
    after-times); ``extra_ms`` adds GPU time (a change's side costs)."""
    gemm_times = gemm_times or {}
    classes: dict[str, float] = {}
    per_kernel_us, per_tensor_us = host_costs(hw, mode)
    #: (kernel ms, kernels, host ms) in the order the host issues them (eager: one entry per op)
    issued: list[tuple[float, int, float]] = []

    def add(kind: str, ms: float, launched: int, host_ms: float = 0.0) -> None:
        classes[kind] = classes.get(kind, 0.0) + ms
        issued.append((ms, launched, launched * per_kernel_us * 1e-3 + host_ms))

    def record_ms(i: int) -> float:
        if i in gemm_times:
            return gemm_times[i]
        g = step.gemms[i]
        return compiled_gemm_ms(g, hw, step.made_in_graph.get(i, ())) if mode == "compile" else gemm_ms(g, hw)

    for op in step.ops:
        if op.kind == "attention" and op.gemms:
            add("attention", *attention_ms([step.gemms[i] for i in op.gemms], hw, mode, gemm_times))
        elif op.kind in ("gemm", "attention"):
            add(op.kind, sum(record_ms(i) for i in op.gemms) if op.gemms else hw.min_gemm_us * 1e-3, 1)
        elif mode == "eager":
            add(op.kind, op_ms(op, hw), 1)
        else:
            issued.append((0.0, 0, 0.0))  # fused into the regions below; keeps positions for syncs
    if mode == "compile":
        for region in step.regions:
            launched = region.kernels(hw)
            add("fused", max(memory_kernel_ms(region.bytes, hw.step.elementwise_efficiency, hw),
                             launched * hw.step.min_kernel_us * 1e-3), launched)
    graphs_host = 0.0
    if mode == "compile" and step.graphs is not None:
        issued.append(between_graphs(step.graphs, hw, step.training))
        classes["between_graphs"] = issued[-1][0]
        graphs_host = issued[-1][2]
    if step.training:
        opt_ms, launches = optimizer_ms(step.params, optimizer, hw)
        if launches:
            add("optimizer", opt_ms, launches, len(step.params) * per_tensor_us * 1e-3)
    if extra_ms:
        add("side", extra_ms, 0)
    kernels = sum(n for _, n, _ in issued)
    kernel_ms = sum(classes.values())
    gpu = kernel_ms + kernels * hw.step.kernel_gap_us * 1e-3
    host = sum(h for _, _, h in issued)
    ms = max(gpu, host)
    syncs = step.syncs if mode == "eager" else ()
    if syncs:
        ms = serialised_ms(issued, syncs, hw.step.kernel_gap_us)
    gemm = classes.get("gemm", 0.0) + classes.get("attention", 0.0)
    return StepTime(ms, gpu, host, gemm, kernels, mode, tuple(sorted(classes.items())), len(syncs), graphs_host)


def between_graphs(graphs: GraphBreaks, hw: Hardware, training: bool = True) -> tuple[float, int, float]:
    """(kernel ms, kernels, host ms) of what a compiled step runs besides its graphs'
    kernels: the ops between its graphs, eager (the shortest kernel each, and the eager
    host cost of one), and each graph beyond one forward and one backward graph
    (``compile_host_us_per_graph``); an inference step runs only the forward's. Measured
    on an H100, torch 2.11, transformers 5.17 (``docs/benchmarks.md``, "Tenth run"): a
    step of opus-mt-en-de calls 18 + 13 graphs and runs 63 ops between them, OPT-125m
    15 + 14 and 46, GPT-2 with a break forced before each block 15 + 14 and 11. (The
    fused regions priced from the capture may hold some of those ops' work too: a few
    microseconds each, counted twice.)"""
    st = hw.step
    ops = graphs.step_eager_ops(training)
    kernel_ms = ops * st.min_kernel_us * 1e-3
    host_ms = (ops * st.host_us_per_kernel + graphs.extra_graphs(training) * st.compile_host_us_per_graph) * 1e-3
    return kernel_ms, ops, host_ms


def host_costs(hw: Hardware, mode: Mode) -> tuple[float, float]:
    """The host time of a step on ``hw`` in ``mode``: (us per kernel, us per parameter
    tensor). Fitted on 11 Hugging Face models' training steps issued onto an idle H100
    (``benchmarks/host_phases.py``, two machines): eager 25 us per kernel + 34 us per
    tensor (RMS error 10%; a fixed part per step adds nothing general: it is the models'
    Python); compiled 3.6 us per kernel + 138 us per tensor (17%; per kernel alone 34%:
    a compiled step's host time follows its graphs' inputs, not its kernels). An
    inference step (no optimizer) pays per kernel only. The profiles hold these at the
    typical host's speed; ``shapelint calibrate`` scales them to yours."""
    st = hw.step
    if mode == "compile":
        return st.compile_host_us_per_kernel, st.compile_host_us_per_tensor
    return st.host_us_per_kernel, st.host_us_per_tensor


def serialised_ms(issued: Sequence[tuple[float, int, float]], syncs: Sequence[int], gap_us: float) -> float:
    """A step whose host reads the GPU at ``syncs`` (positions in ``issued``, the
    (kernel ms, kernels, host ms) the host issues in order): in a loop of such steps the host
    waits at each sync until the GPU has run everything issued, and then the GPU waits
    for the host to issue the next kernel. The step runs from its first sync to the
    next step's: the ops before it belong to the next step's cycle."""
    first = syncs[0]
    waits = set(syncs) - {first}
    host = gpu = 0.0
    for i in [*range(first, len(issued)), *range(first)]:
        if i in waits:
            host = max(host, gpu)
        ms, n, host_ms = issued[i]
        host += host_ms
        gpu = max(gpu, host) + ms + n * gap_us * 1e-3
    return max(host, gpu)


# -- side costs of a change ---------------------------------------------------------------


def slice_ms(s: Slice, hw: Hardware, mode: Mode, training: bool) -> float:
    """What slicing a padded tensor back costs a step: in eager mode the forward's
    consumer reads the slice strided (the ``.float()`` upcast of sliced logits) and
    the backward zero-fills the padded gradient and copies the slice's gradient into
    it; compiled, one fused kernel writes the padded gradient strided."""
    st = hw.step
    bw = hw.memory_bandwidth_gbps * 1e9
    cols_bytes = s.rows * s.cols * s.element_bytes
    padded_bytes = s.rows * s.padded * s.element_bytes
    if mode == "compile":
        return memory_kernel_ms(padded_bytes, st.strided_copy_efficiency, hw) if training else 0.0
    strided_read = 1e3 * cols_bytes * (1 / st.strided_copy_efficiency - 1 / st.elementwise_efficiency) / bw
    if not training:
        return strided_read
    fill = memory_kernel_ms(padded_bytes, st.elementwise_efficiency, hw)
    copy_in = memory_kernel_ms(2 * cols_bytes, st.strided_copy_efficiency, hw)
    return strided_read + fill + copy_in


def side_ms(slices: Iterable[Slice], hw: Hardware, mode: Mode, training: bool) -> float:
    return sum(slice_ms(s, hw, mode, training) for s in slices)


__all__ = ["MODES", "Mode", "Step", "StepTime", "attention_ms", "between_graphs", "compiled_gemm_ms", "fused_regions",
           "host_costs", "inductor_laid_out", "op_ms", "optimizer_ms", "pad_mm_padded", "serialised_ms", "side_ms",
           "slice_ms", "step_time"]
