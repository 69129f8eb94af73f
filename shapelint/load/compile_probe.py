"""Where torch.compile breaks a Hugging Face model's training step into several graphs,
and what runs eagerly between them: found by running dynamo on the model itself.

Dynamo decides a graph break on values (a data-dependent branch such as transformers'
``if (mask == 1).all():``, a logging call), which fake tensors do not have, so shapelint
runs the model for real, on the CPU: the config as written but with each layer stack
(a decoder's; an encoder's and a decoder's; a multimodal model's towers) cut to one
layer and then two (every width kept; constant weights in bf16, no autocast, one
sequence of :data:`PROBE_TOKENS` tokens), forward and backward once to compile and once
to count, behind an AOTAutograd backend that runs the graphs it is given as they are.
(Not under autocast: the CUDA-like CPU autocast kernels shapelint registers for capture
are Python, and dynamo would break on them.) Counted per step: the compiled graphs
called (forward and backward separately) and the ATen ops run outside every graph
(views and allocations apart: they launch no kernel), forward and backward. What a
stack's second layer adds is taken as what each further layer adds (stacks of
different depths are grown one at a time), which gives the counts at the config's
depth; it assumes the layers of a stack alike (a ``layer_types`` pattern is cut to the
probe's depth, and constant weights route every token alike through a mixture of
experts). What this finds follows the installed transformers, as the user's step
does: compiled, OPT-125m calls 15 + 14 graphs a step and opus-mt-en-de 18 + 13 with
transformers 5.17, each 1 + 1 with 5.24, whose mask code no longer branches on values
(``docs/benchmarks.md``).

The probe is skipped (``None``) for a model whose two-layer instance has more than
:data:`MAX_PROBE_PARAMS` parameters (70B-class widths), that has no layer count, or
that cannot run on the CPU; the step is then priced as one graph. It resets dynamo's
caches, and transformers' once-per-process warnings may be given again after it.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch.utils._pytree import tree_map

from shapelint.capture.run import loss_or_outputs
from shapelint.model.records import GraphBreaks

#: tokens in the probe's one sequence (enough for masks and position code to take their
#: usual branches; nothing in a graph break depends on the batch)
PROBE_TOKENS = 16
#: the largest vocabulary probed: a larger one is cut to this (token ids drawn below it)
PROBE_VOCAB = 4096
#: the largest two-layer instance probed (parameters); bf16, so 2 GB of weights and as
#: much again of gradients
MAX_PROBE_PARAMS = 1_000_000_000
#: reasons kept per probe (dynamo's first line of each, in the order met)
MAX_REASONS = 4


@dataclass
class _Counts:
    forward: int = 0
    backward: int = 0
    #: eager ops, all and the backward's
    eager: int = 0
    eager_backward: int = 0


#: the profiler range around each compiled graph's call
GRAPH_RANGE = "shapelint::compiled_graph"


#: ATen ops that launch no kernel though their schema does not say they alias (an
#: allocation, a reshape of a fresh tensor)
NO_KERNEL = frozenset({"aten::empty", "aten::empty_strided", "aten::_unsafe_view", "aten::resize_", "aten::set_"})


@functools.lru_cache(maxsize=None)
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


def _backward(out: Any) -> None:
    """The step's backward, as capture differentiates it: the model's loss, else its outputs."""
    outs = [t for t in loss_or_outputs(out) if t.requires_grad and t.is_floating_point()]
    torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])


def count_step(model: torch.nn.Module, inputs: dict[str, Any]) -> tuple[_Counts, tuple[str, ...]]:
    """Compile ``model``'s step with the counting backend, run it once to compile and
    once to count. Returns the second step's counts and dynamo's break reasons. Resets
    dynamo first (a function compiled earlier in this process recompiles on its next call)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()  # compiled as in a fresh process: no earlier model's cache entries
    counts = _Counts()
    before = dict(counters["graph_break"])
    step = torch.compile(lambda: model(**inputs), backend=_backend(counts), dynamic=False)
    _backward(step())
    counts.forward = counts.backward = 0
    model.zero_grad(set_to_none=True)
    cpu = [torch.profiler.ProfilerActivity.CPU]
    with _quiet_stderr(), torch.profiler.profile(activities=cpu) as forward:
        out = step()
    with _quiet_stderr(), torch.profiler.profile(activities=cpu) as backward:
        _backward(out)
    counts.eager_backward = eager_ops(backward.events())
    counts.eager = eager_ops(forward.events()) + counts.eager_backward
    reasons = tuple(str(k).strip().splitlines()[0][:200] for k, n in counters["graph_break"].items()
                    if n > before.get(k, 0))
    return counts, reasons[:MAX_REASONS]


def at_depth(one: _Counts, two: _Counts, layers: int) -> _Counts:
    """The counts at ``layers`` from those at one and two layers: what the second layer
    added, once per layer after the first."""
    return _Counts(**{f.name: max(getattr(one, f.name) + (getattr(two, f.name) - getattr(one, f.name)) * (layers - 1), 0)
                      for f in fields(_Counts)})


def _summed(base: _Counts, per_stack: list[tuple[_Counts, int]]) -> _Counts:
    """The counts of a model from ``base`` (every layer stack at one layer) and, per
    stack grown, ``(the counts with it at two layers, its depth)``: what its second
    layer added, times its layers after the first (stacks of one depth grow together:
    one entry)."""
    def total(name: str) -> int:
        one = getattr(base, name)
        return max(one + sum(getattr(at_depth(base, two, depth), name) - one for two, depth in per_stack), 0)

    return _Counts(**{f.name: total(f.name) for f in fields(_Counts)})


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


def forget_warnings_once() -> None:
    """transformers warns some things once per process (``logger.warning_once``, GPT-2's
    ``loss_type`` warning), and dynamo breaks the graph at a warning: a model compiles
    as in a fresh process only once they are forgotten (the probe, and each variant of
    ``--verify --step``). A warning given before may then be given again."""
    module = sys.modules.get("transformers.utils.logging")
    clear = getattr(getattr(module, "warning_once", None), "cache_clear", None)
    if callable(clear):
        clear()


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    """transformers' warnings (the probe's config is cut short, its inputs tiny) and
    dynamo's (each graph break it meets) off meanwhile: the report says what they cost."""
    module = sys.modules.get("transformers.utils.logging")
    get, set_ = getattr(module, "get_verbosity", None), getattr(module, "set_verbosity", None)
    saved = get() if callable(get) else None
    dynamo = logging.getLogger("torch._dynamo")
    dynamo_level = dynamo.level
    if callable(set_):
        set_(logging.ERROR)
    dynamo.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        dynamo.setLevel(dynamo_level)
        if callable(set_) and saved is not None:
            set_(saved)


@contextlib.contextmanager
def _dynamo_reset_after() -> Iterator[None]:
    """Dynamo's caches emptied at the end too: they hold the probe's models (up to
    gigabytes of weights) through their guards."""
    try:
        yield
    finally:
        torch._dynamo.reset()


#: a layer stack: (the sub-config's attribute names from the top config, its layer-count attribute)
Stack = tuple[tuple[str, ...], str]


def _configs(config: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """``config`` and its sub-configs, each with its attribute names from the top."""
    yield path, config
    for name in getattr(config, "sub_configs", None) or {}:
        sub = getattr(config, name, None)
        if sub is not None and hasattr(sub, "to_dict"):
            yield from _configs(sub, (*path, name))


def layer_stacks(config: Any) -> dict[Stack, int]:
    """Every layer count of ``config`` and its sub-configs (an encoder's and a decoder's,
    a multimodal model's text and vision towers), under the attribute it is stored in."""
    from shapelint.load.validate import LAYER_KEYS

    out: dict[Stack, int] = {}
    for path, cfg in _configs(config):
        aliases = getattr(cfg, "attribute_map", None) or {}
        for key in LAYER_KEYS:
            value = getattr(cfg, key, None)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
                out.setdefault((path, aliases.get(key, key)), value)
    return out


def _small_vocab(cfg: Any) -> None:
    """A vocabulary over :data:`PROBE_VOCAB` cut to it, and the special token ids past it
    moved inside (the embedding and LM head are most of a small instance's weights, and
    no graph break depends on their size)."""
    for key in ("vocab_size", "decoder_vocab_size"):
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value > PROBE_VOCAB:
            setattr(cfg, key, PROBE_VOCAB)
    for key, value in list(vars(cfg).items()):
        if key.endswith("_token_id") and isinstance(value, int) and value >= PROBE_VOCAB:
            setattr(cfg, key, PROBE_VOCAB - 1)
        elif key.endswith("_token_id") and isinstance(value, list):
            setattr(cfg, key, [min(v, PROBE_VOCAB - 1) if isinstance(v, int) else v for v in value])


def _cut_depth(config: Any, depths: dict[Stack, int]) -> Any:
    """A copy of ``config`` with the given layer counts (per-layer lists cut to match)
    and a vocabulary of at most :data:`PROBE_VOCAB`."""
    cut = copy.deepcopy(config)
    subs = dict(_configs(cut))
    for sub in subs.values():
        _small_vocab(sub)
    for (path, key), layers in depths.items():
        sub = subs[path]
        setattr(sub, key, layers)
        for per_layer in ("layer_types", "mlp_only_layers"):
            if isinstance(getattr(sub, per_layer, None), list):
                setattr(sub, per_layer, list(getattr(sub, per_layer))[:layers])
    return cut


def probe_hf(config: Any, build: Callable[[Any], tuple[torch.nn.Module, dict[str, Any]]]) -> GraphBreaks | None:
    """Probe a Hugging Face model: ``build(config)`` makes the real (CPU) model and its
    inputs for a config. Every layer stack at one layer, then at two (each stack on its
    own where their depths differ). None where the probe cannot run (see the module
    docstring). The global RNG is left as it was."""
    stacks = layer_stacks(config)
    if not stacks:
        return None
    ones = dict.fromkeys(stacks, 1)
    if len(set(stacks.values())) == 1:  # one depth: the stacks grow together
        grown = [(dict.fromkeys(stacks, 2), next(iter(stacks.values())))]
    else:
        grown = [({**ones, stack: 2}, depth) for stack, depth in stacks.items()]
    grown = [(depths, depth) for depths, depth in grown if depth > 1]
    with torch.device("meta"):
        meta, _ = build(_cut_depth(config, dict.fromkeys(stacks, 2)))
    if sum(p.numel() for p in meta.parameters()) > MAX_PROBE_PARAMS:
        return None
    del meta
    runs: list[_Counts] = []
    reasons: tuple[str, ...] = ()
    with torch.random.fork_rng(devices=[]), _quiet_logs(), _dynamo_reset_after():
        for depths in [ones, *(depths for depths, _ in grown)]:
            torch.manual_seed(0)
            model, inputs = build(_cut_depth(config, depths))
            inputs = tree_map(lambda t: t.to(torch.bfloat16) if isinstance(t, torch.Tensor) and t.is_floating_point()
                              else t, inputs)  # speech features, pixels: in the weights' dtype
            forget_warnings_once()
            counts, said = count_step(model.to(torch.bfloat16).train(), inputs)
            runs.append(counts)
            reasons = reasons or said
    total = _summed(runs[0], [(run, depth) for run, (_, depth) in zip(runs[1:], grown)])
    return GraphBreaks(total.forward, total.backward, total.eager, reasons, total.eager_backward)


__all__ = ["MAX_PROBE_PARAMS", "PROBE_TOKENS", "GraphBreaks", "at_depth", "count_step", "forget_warnings_once",
           "layer_stacks", "probe_hf"]
