"""The training step ``--verify --step`` times, for one variant of a model (shapelint's
documented default step, the one the step model prices):

parameters in fp32, the forward under ``torch.autocast`` in the lint's precision (bf16 by
default; fp32 and tf32 without autocast), the model's own loss where it returns one, else
the loss the lint traces (a gradient of ones on every floating output), ``backward``, the
optimizer of ``--optimizer`` (``torch.optim.AdamW(fused=True)`` by default; foreach where
the device has no fused kernel), ``zero_grad(set_to_none=True)``. An inference target runs
the forward under ``no_grad``. With ``--compile`` the forward and loss run under
``torch.compile`` (default mode, ``dynamic=False``); the optimizer stays eager, as
``torch.compile(model)`` leaves it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from shapelint.capture.precision import AUTOCAST_PRECISIONS, PRECISIONS, cast_tree
from shapelint.capture.run import loss_or_outputs, output_tensors, split_inputs
from shapelint.errors import ShapelintError
from shapelint.load.compile_probe import forget_warnings_once
from shapelint.load.real import Built
from shapelint.measure.timer import COMPILE_EXTRA_WARMUP, first_call_s, warm_up
from shapelint.model.step_verification import VariantRun

#: the optimizer's learning rate (any: it is never evaluated)
LEARNING_RATE = 1e-4


class _Loss(torch.nn.Module):
    """The model's forward and what the step differentiates (what torch.compile compiles)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
        return loss_or_outputs(self.model(*args, **kwargs))


@dataclass
class Trainer:
    """One variant's model, optimizer and step."""

    label: str
    built: Built
    inputs: Any
    step: Callable[[], object]
    optimizer: str
    fused: bool | None
    compile_s: float | None = None
    first_step_s: float = 0.0
    graphs: int | None = None
    own_inputs: bool = False
    sliced: tuple[str, ...] = ()

    def run(self, block_ms: tuple[float, ...]) -> VariantRun:
        """Its timed run as the report gives it (its blocks' means, ms to 4 decimals)."""
        return VariantRun(tuple(round(x, 4) for x in block_ms),
                          None if self.compile_s is None else round(self.compile_s, 2),
                          self.graphs, self.sliced, self.own_inputs)


def _optimizer(params: list[torch.nn.Parameter], name: str) -> tuple[torch.optim.Optimizer | None, bool | None]:
    """The optimizer the step model prices, fused where the device has the kernel; one
    parameter group per tensor class (a fused kernel cannot mix DTensor shards and
    plain tensors, as a tensor-parallel model holds)."""
    classes = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam, "sgd": torch.optim.SGD}
    if name == "none" or not params:
        return None, None
    cls = classes[name]
    by_class: dict[type, list[torch.nn.Parameter]] = {}
    for p in params:
        by_class.setdefault(type(p.data), []).append(p)
    groups = [{"params": ps} for ps in by_class.values()]
    try:
        return cls(groups, lr=LEARNING_RATE, fused=True), True
    except (RuntimeError, ValueError, TypeError):  # no fused kernel for these tensors' device
        return cls(groups, lr=LEARNING_RATE), False


def make_trainer(label: str, built: Built, inputs: Any, *, device: str, precision: str, training: bool,
                 optimizer: str, compile: bool, backend: str = "inductor",
                 wrap: Callable[[torch.nn.Module], torch.nn.Module] | None = None) -> Trainer:
    """The default training step of ``built`` (see the module docstring); ``wrap``: the
    parallel layout's wrapper (``shapelint.measure.parallel_wrap``)."""
    model = built.model.float().train(training)
    if wrap is not None:
        model = wrap(model)
    args, kwargs = split_inputs(cast_tree(inputs, torch.float32))
    params = [p for p in model.parameters() if p.requires_grad] if training else []
    opt, fused = _optimizer(params, optimizer) if training else (None, None)
    grads_in = [t for t in output_tensors((args, kwargs)) if t.requires_grad]
    wrapper: Callable[..., list[torch.Tensor]] = _Loss(model)
    if compile:
        wrapper = torch.compile(wrapper, backend=backend, dynamic=False)
    dtype = PRECISIONS[precision]
    kind = torch.device(device).type

    def autocast() -> Any:
        if precision in AUTOCAST_PRECISIONS:
            return torch.autocast(kind, dtype=dtype)
        return contextlib.nullcontext()

    def step() -> object:
        if not training:
            with torch.no_grad(), autocast():
                return wrapper(args, kwargs)
        with autocast():
            outs = [t for t in wrapper(args, kwargs) if t.requires_grad and t.is_floating_point()]
        if not outs:
            raise ShapelintError("the model's output does not require grad: no backward pass to time")
        torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])
        if opt is not None:
            opt.step()
            opt.zero_grad(set_to_none=True)
        for t in grads_in:
            t.grad = None
        return outs

    return Trainer(label, built, inputs, step, optimizer, fused)


def _dynamo_graphs() -> int:
    """Graphs dynamo has compiled in this process (a variant's share: more than one
    means its forward broke into pieces)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return 0
    return int(counters["stats"]["unique_graphs"])


def warm(t: Trainer, device: str, warmup: int, compiled: bool) -> None:
    """The first step (compiling, under torch.compile) and ``warmup`` more, untimed
    (``shapelint.measure.timer`` states the method)."""
    if compiled:
        forget_warnings_once()
    graphs = _dynamo_graphs()
    t.first_step_s = first_call_s(t.step, device)
    if compiled:
        t.compile_s = t.first_step_s
        t.graphs = _dynamo_graphs() - graphs
    warm_up(t.step, device, warmup + (COMPILE_EXTRA_WARMUP if compiled else 0))


@contextlib.contextmanager
def dynamo_limits(variants: int) -> Iterator[None]:
    """Room in dynamo's caches for every variant: they share code objects (the loss
    wrapper's forward, the model classes'), and past the recompile limit dynamo
    would run a variant eagerly without saying so."""
    try:
        import torch._dynamo.config as dc
    except ImportError:
        yield
        return
    keys = [k for k in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                        "accumulated_recompile_limit") if hasattr(dc, k)]
    saved = {k: getattr(dc, k) for k in keys}
    for k in keys:
        setattr(dc, k, max(saved[k], 8 * (variants + 1)))
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(dc, k, v)


def release(device: str, compiled: bool) -> None:
    """Give back what the variants held: memory, and dynamo's compiled code."""
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
    if compiled:
        with contextlib.suppress(Exception):
            torch._dynamo.reset()


__all__ = ["LEARNING_RATE", "Trainer", "dynamo_limits", "make_trainer", "release", "warm"]
