"""Where torch.compile breaks a Hugging Face model's training step into several graphs,
and what runs eagerly between them: found by running dynamo on the model itself.

Dynamo decides a graph break on values (a data-dependent branch such as transformers'
``if (mask == 1).all():``, a logging call), which fake tensors do not have, so shapelint
runs the model for real, on the CPU: the config as written but with its layer counts
cut to one and then two (every width kept; constant weights in bf16, no autocast, one
sequence of :data:`PROBE_TOKENS` tokens), forward and backward once to compile and once
to count, behind an AOTAutograd backend that runs the graphs it is given as they are.
(Not under autocast: the CUDA-like CPU autocast kernels shapelint registers for capture
are Python, and dynamo would break on them.) Counted per step: the compiled graphs called (forward and backward graphs
separately) and the ATen ops run outside every graph (views apart: they launch no
kernel). Both grow by the same amount per layer, so the counts at one and two layers
give them at the config's depth. Measured on an H100 (torch 2.11, transformers 5.17;
``docs/benchmarks.md``, "Graph breaks"): OPT compiles to 4 graphs and Marian to 9 where
transformers 5.24 compiles each to 1 (its mask code no longer branches on values), so
what this finds follows the installed transformers, as the user's step does.

The probe is skipped (``None``) for a model whose two-layer instance has more than
:data:`MAX_PROBE_PARAMS` parameters (70B-class widths) or that cannot run on the CPU;
the step is then priced as one graph, as before.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from shapelint.records import GraphBreaks

#: tokens in the probe's one sequence (enough for masks and position code to take their
#: usual branches; nothing in a graph break depends on the batch)
PROBE_TOKENS = 16
#: the largest two-layer instance probed (parameters); bf16, so 2 GB of weights and as
#: much again of gradients
MAX_PROBE_PARAMS = 1_000_000_000
#: reasons kept per probe (dynamo's first line of each, in the order met)
MAX_REASONS = 4


@dataclass
class _Counts:
    forward: int = 0
    backward: int = 0
    eager: int = 0


#: the profiler range around each compiled graph's call
GRAPH_RANGE = "shapelint::compiled_graph"


#: ATen ops that launch no kernel though their schema does not say they alias (an
#: allocation, a reshape of a fresh tensor)
NO_KERNEL = frozenset({"aten::empty", "aten::empty_strided", "aten::_unsafe_view", "aten::resize_", "aten::set_"})


def _is_view(name: str) -> bool:
    """An ATen op whose outputs alias an input without writing it, in every overload
    (it launches nothing; ``aten::to`` that converts shows its copy as a child op)."""
    packet = getattr(torch.ops.aten, name.removeprefix("aten::"), None)
    overloads = [getattr(packet, o) for o in packet.overloads()] if packet is not None else []
    if not overloads:
        return False
    return all(bool(op._schema.returns) and all(r.alias_info is not None and not r.alias_info.is_write
                                                for r in op._schema.returns) for op in overloads)


def _launches_kernel(name: str) -> bool:
    return name.startswith("aten::") and name not in NO_KERNEL and not _is_view(name)


def eager_ops(events: Any) -> int:
    """ATen ops of a profiled step that ran outside every compiled graph: the innermost
    ATen ops (those that do the work), views and allocations apart. (The CPU's split of
    an op into ATen ops stands for the GPU's kernels: close, not exact.)"""
    count = 0
    for ev in events:
        if not _launches_kernel(ev.name):
            continue
        if any(c.name.startswith("aten::") for c in ev.cpu_children):
            continue
        parent = ev.cpu_parent
        while parent is not None and parent.name != GRAPH_RANGE:
            parent = parent.cpu_parent
        count += parent is None
    return count


def _backend(counts: _Counts) -> Callable[..., Any]:
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def compiler(kind: str) -> Callable[..., Any]:
        def compile_graph(gm: torch.fx.GraphModule, _: Any) -> Callable[..., Any]:
            run = make_boxed_func(gm.forward)

            def call(args: list[Any]) -> Any:
                setattr(counts, kind, getattr(counts, kind) + 1)
                with torch.profiler.record_function(GRAPH_RANGE):
                    return run(args)

            call._boxed_call = True  # type: ignore[attr-defined]
            return call
        return compile_graph

    return aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"))  # type: ignore[no-any-return]


def _loss(out: Any) -> torch.Tensor:
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    first = out[0] if isinstance(out, (tuple, list)) else getattr(out, "logits", out)
    return first.float().sum()  # type: ignore[no-any-return]


def count_step(model: torch.nn.Module, inputs: dict[str, Any]) -> tuple[_Counts, tuple[str, ...]]:
    """Compile ``model``'s step with the counting backend, run it once to compile and
    once to count. Returns the second step's counts and dynamo's break reasons. Resets
    dynamo first (a function compiled earlier in this process recompiles on its next call)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()  # compiled as in a fresh process: no earlier model's cache entries
    counts = _Counts()
    before = dict(counters["graph_break"])
    step = torch.compile(lambda: model(**inputs), backend=_backend(counts), dynamic=False)
    _loss(step()).backward()
    counts.forward = counts.backward = counts.eager = 0
    model.zero_grad(set_to_none=True)
    with _quiet_stderr(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _loss(step()).backward()
    counts.eager = eager_ops(prof.events())
    reasons = tuple(str(k).strip().splitlines()[0][:200] for k, n in counters["graph_break"].items()
                    if n > before.get(k, 0))
    return counts, reasons[:MAX_REASONS]


def at_depth(one: _Counts, two: _Counts, layers: int) -> tuple[int, int, int]:
    """(forward graphs, backward graphs, eager ops) at ``layers`` from the counts at one
    and two layers: what the second layer added, once per layer after the first."""
    def scale(a: int, b: int) -> int:
        return max(a + (b - a) * (layers - 1), 0)

    return (scale(one.forward, two.forward), scale(one.backward, two.backward), scale(one.eager, two.eager))


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """The profiler's C++ side prints a line on stderr as it starts and stops (torch 2.13),
    past Python's ``sys.stderr``: file descriptor 2 goes to /dev/null meanwhile."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def _fresh_warnings() -> Iterator[None]:
    """transformers warns some things once per process (GPT-2's ``loss_type``), and dynamo
    breaks the graph at a warning: the probe compiles as a fresh training process does."""
    module = sys.modules.get("transformers.utils.logging")
    clear = getattr(getattr(module, "warning_once", None), "cache_clear", None)
    if callable(clear):
        clear()
    yield


def _cut_depth(config: Any, layers: int) -> Any:
    """A copy of ``config`` with every layer count ``layers`` (per-layer lists cut to match)."""
    from shapelint.validate import LAYER_KEYS

    cut = config.__class__.from_dict(config.to_dict())
    for sub in [cut, *(getattr(cut, k) for k in ("text_config", "encoder", "decoder") if hasattr(cut, k))]:
        for key in LAYER_KEYS:
            if isinstance(getattr(sub, key, None), int):
                setattr(sub, key, layers)
        for key in ("layer_types", "mlp_only_layers"):
            if isinstance(getattr(sub, key, None), list):
                setattr(sub, key, list(getattr(sub, key))[:layers])
    cut._attn_implementation = config._attn_implementation
    return cut


def probe_hf(config: Any, build: Callable[[Any], tuple[torch.nn.Module, dict[str, Any]]]) -> GraphBreaks | None:
    """Probe a Hugging Face model: ``build(config)`` makes the real (CPU) model and its
    inputs for a config. None where the probe cannot run (see the module docstring)."""
    from shapelint.validate import LAYER_KEYS

    depth = max((getattr(config, k) for k in LAYER_KEYS if isinstance(getattr(config, k, None), int)), default=0)
    if depth < 1:
        return None
    runs: list[_Counts] = []
    reasons: tuple[str, ...] = ()
    for layers in (1, 2) if depth > 1 else (1,):
        with torch.device("meta"):
            meta, _ = build(_cut_depth(config, layers))
        if sum(p.numel() for p in meta.parameters()) > MAX_PROBE_PARAMS:
            return None
        del meta
        torch.manual_seed(0)
        model, inputs = build(_cut_depth(config, layers))
        model = model.to(torch.bfloat16).train()
        with _fresh_warnings(), _quiet_stderr(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            counts, said = count_step(model, inputs)
        runs.append(counts)
        reasons = reasons or said
    fwd, bwd, eager = at_depth(runs[0], runs[-1], depth)
    return GraphBreaks(fwd, bwd, eager, reasons)


__all__ = ["MAX_PROBE_PARAMS", "PROBE_TOKENS", "GraphBreaks", "at_depth", "count_step", "probe_hf"]
