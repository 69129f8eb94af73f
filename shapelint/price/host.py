"""The host's side of a step: the CPU time to issue its kernels, the waits where it reads
a value from the GPU, and what torch.compile's graph breaks add.

A host issues a step's kernels one after another (``host_costs``: per kernel, and per
parameter tensor in training); the step takes the longer of that and the GPU's time,
except where the host waits for the GPU inside the step (``serialised_ms``). Under
torch.compile, a step dynamo splits into more graphs than one forward and one backward
runs the ops between them eagerly and pays host time per extra graph
(``between_graphs``; ``shapelint.load.compile_probe`` finds the graphs).
"""

from __future__ import annotations

from collections.abc import Sequence

from shapelint.hardware import Hardware
from shapelint.model.graphs import GraphBreaks
from shapelint.price.kernels import Mode

#: what the host issues, in order: (kernel ms, kernels, host ms) of one op, a fused
#: region, the optimizer...
Issued = tuple[float, int, float]


def between_graphs(graphs: GraphBreaks, hw: Hardware, training: bool = True) -> Issued:
    """(kernel ms, kernels, host ms) of what a compiled step runs besides its graphs'
    kernels: the ops between its graphs, eager (the shortest kernel each, and the eager
    host cost of one), and each graph beyond one forward and one backward graph
    (``compile_host_us_per_graph``); an inference step runs only the forward's. The
    graphs and eager ops of measured models are in ``docs/benchmarks.md`` ("Graph
    breaks"). (The fused regions priced from the capture may hold some of those ops'
    work too: a few microseconds each, counted twice.)"""
    st = hw.step
    ops = graphs.step_eager_ops(training)
    kernel_ms = ops * st.min_kernel_us * 1e-3
    host_ms = (ops * st.host_us_per_kernel + graphs.extra_graphs(training) * st.compile_host_us_per_graph) * 1e-3
    return kernel_ms, ops, host_ms


def host_costs(hw: Hardware, mode: Mode) -> tuple[float, float]:
    """The host time of a step on ``hw`` in ``mode``: (us per kernel, us per parameter
    tensor). Fitted on 11 Hugging Face models' training steps issued onto an idle H100
    (``docs/benchmarks.md``, "The host model"): eager 25 us per kernel + 34 us per
    tensor (RMS error 10%; a fixed part per step adds nothing general: it is the models'
    Python); compiled 3.6 us per kernel + 138 us per tensor (17%; per kernel alone 34%:
    a compiled step's host time follows its graphs' inputs, not its kernels). An
    inference step (no optimizer) pays per kernel only. The profiles hold these at the
    typical host's speed; ``shapelint calibrate`` scales them to yours."""
    st = hw.step
    if mode == "compile":
        return st.compile_host_us_per_kernel, st.compile_host_us_per_tensor
    return st.host_us_per_kernel, st.host_us_per_tensor


def serialised_ms(issued: Sequence[Issued], syncs: Sequence[int], gap_us: float) -> float:
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


__all__ = ["Issued", "between_graphs", "host_costs", "serialised_ms"]
