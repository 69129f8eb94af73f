"""Capture: run a forward (and backward) pass on fake tensors and record every GEMM
(:mod:`.recorder`), attention as the GPU runs it (:mod:`.sdpa`), in the step's
precision (:mod:`.precision`); repeated layers are traced once and copied
(:mod:`.replay`)."""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch

from shapelint.capture.dropout import fused_dropout
from shapelint.capture.host_reads import HostReadError
from shapelint.capture.precision import autocast_context
from shapelint.capture.recorder import Recorder, RecordingFakeMode, module_hooks, recording
from shapelint.capture.replay.replayer import Replayer
from shapelint.capture.replay.stats import STATS
from shapelint.capture.rows import ModuleInfo, OpRow, ShapeRow
from shapelint.capture.sdpa import fused_attention
from shapelint.capture.sources import boundary
from shapelint.capture.traceable import every_layer_runs
from shapelint.errors import ShapelintError
from shapelint.model.records import Gemm, Op, Phase, Role, Source
from shapelint.model.trace_notes import HostRead


@dataclass
class Capture:
    """What capture hands to the rules: the GEMM records in execution order."""

    gemms: list[Gemm]
    training: bool
    precision: str
    tokens: int | None = None
    #: every kernel-launching op of forward and backward, GEMMs and attention as markers
    ops: list[Op] = field(default_factory=list)
    #: parameter tensors that require grad: (element count, bytes per element) each
    params: tuple[tuple[int, int], ...] = ()
    #: positions in ``ops`` where an eager step's host reads a value from the GPU
    syncs: tuple[int, ...] = ()
    #: positions in ``ops`` where torch.compile's dynamo would break the graph
    breaks: tuple[int, ...] = ()
    #: values the model's code read on the host, answered as a healthy step answers them
    host_reads: tuple[HostRead, ...] = ()
    #: what the trace changed to run the step (a loss that rejected the labels), for the report
    notes: tuple[str, ...] = ()

    @property
    def forward(self) -> int:
        return sum(1 for g in self.gemms if g.phase in ("forward", "recompute"))

    @property
    def backward(self) -> int:
        return sum(1 for g in self.gemms if g.phase in ("grad_input", "grad_weight"))


def output_tensors(out: Any) -> list[torch.Tensor]:
    """Every tensor in a model's output (tensors, tuples, lists, dicts, ModelOutput)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() for t in output_tensors(v)]
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in output_tensors(v)]
    return []


def loss_or_outputs(out: Any) -> list[torch.Tensor]:
    """What the step differentiates: the model's own loss where it returns one (a
    Hugging Face model given labels), else every tensor of its output."""
    loss = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.dim() == 0:
        return [loss]
    return output_tensors(out)


def split_inputs(inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Example inputs as (args, kwargs): a dict is keyword arguments, a tuple or
    list positional ones, anything else the single positional argument."""
    if isinstance(inputs, dict):
        return (), dict(inputs)
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    return (inputs,), {}


@boundary
def call_model(model: torch.nn.Module, inputs: Any) -> Any:
    args, kwargs = split_inputs(inputs)
    return model(*args, **kwargs)


def capture(
    model: torch.nn.Module,
    inputs: Any,
    *,
    precision: str = "bf16",
    training: bool = True,
    defined_at: dict[int, Source] | None = None,
    replay: bool = True,
) -> Capture:
    """Run ``model`` on ``inputs`` (fake or meta tensors, already in the compute
    dtype) forward and, when ``training``, backward with a dense gradient on every
    floating output (as a loss over the outputs gives), and record every GEMM.

    With ``replay`` (training only), repeated identical layers are traced once and
    their records copied (:mod:`shapelint.capture.replay`); where that cannot be shown to give
    the records a full trace gives, the model is traced again in full.

    Where the step fails with ``labels`` among the inputs and runs without them (a loss
    that wants labels of another shape than the input tokens), it is the step without
    labels, and the capture's notes say so."""
    grads = _grads(model, inputs)
    try:
        cap = _capture_replayed(model, inputs, precision, training, defined_at, replay)
    except HostReadError:
        raise
    except ShapelintError as exc:
        unlabelled = _without_labels(inputs)
        if unlabelled is None:
            raise
        for t, g in grads:  # as they were before the failed step
            t.grad = g
        try:
            cap = _capture_replayed(model, unlabelled, precision, training, defined_at, replay)
        except ShapelintError:
            raise exc from None
        cap.notes += (labels_note(exc),)
    mode = next((getattr(p, "fake_mode", None) for p in model.parameters()), None)
    if isinstance(mode, RecordingFakeMode):
        cap.host_reads = tuple(mode.host_reads.reads)
    return cap


def labels_note(exc: ShapelintError) -> str:
    """The note of a step traced without labels, worded from its first failure: a loss
    rejected the labels where a loss function raised it (a frame named ``*loss*`` in the
    traceback), else the step failed with them, whatever it was."""
    why = str(exc).removeprefix("cannot trace the model: ")
    cause = exc.__cause__
    frames = traceback.extract_tb(cause.__traceback__) if cause is not None else []
    loss = next((f for f in reversed(frames) if "loss" in f.name.lower()), None)
    what = (f"the model's loss ({loss.name}, {Path(loss.filename).name}:{loss.lineno}) rejected the labels "
            f"shapelint made" if loss is not None else "the step failed with the labels shapelint made")
    return f"traced without labels: {what} ({why}); without them it runs: the step differentiates the model's outputs"


def _without_labels(inputs: Any) -> dict[str, Any] | None:
    """Keyword inputs less their ``labels`` (None when there are none)."""
    if not isinstance(inputs, dict) or "labels" not in inputs:
        return None
    return {k: v for k, v in inputs.items() if k != "labels"}


def _capture_replayed(model: torch.nn.Module, inputs: Any, precision: str, training: bool,
                      defined_at: dict[int, Source] | None, replay: bool) -> Capture:
    if not (training and replay):
        if replay:
            STATS.reset()
        return _capture(model, inputs, precision, training, defined_at, replay=False)
    grads = _grads(model, inputs)
    try:
        return _capture(model, inputs, precision, training, defined_at, replay=True)
    except _ReplayFailed as failed:
        why = failed.why
    for t, g in grads:  # as they were: a second backward would accumulate into them
        t.grad = g
    cap = _capture(model, inputs, precision, training, defined_at, replay=False)
    STATS.replayed = 0
    STATS.fell_back = why
    return cap


class _ReplayFailed(Exception):
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _grads(model: torch.nn.Module, inputs: Any) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """The gradient of every parameter and leaf input tensor that requires grad."""
    leaves = [t for t in output_tensors(inputs) if t.is_leaf and t.requires_grad]
    return [(t, t.grad) for t in [*model.parameters(), *leaves]]


def _capture(model: torch.nn.Module, inputs: Any, precision: str, training: bool,
             defined_at: dict[int, Source] | None, replay: bool) -> Capture:
    rec = Recorder(model, precision, defined_at or {})
    model.train(training)
    replayer = Replayer(rec, model) if replay else None
    try:
        _run_step(rec, model, inputs, precision, training, replayer)
    except ShapelintError:
        if replayer is not None and replayer.used:
            raise _ReplayFailed("the traced model failed") from None
        raise
    except Exception as exc:  # noqa: BLE001 - any failure in user code is reported cleanly
        if replayer is not None and replayer.used:
            raise _ReplayFailed(f"the traced model failed: {_one_line(exc)}") from None
        raise ShapelintError(f"cannot trace the model: {_one_line(exc)}") from exc
    if replayer is not None:
        why = replayer.finish()
        if why:
            raise _ReplayFailed(why)
    params = tuple((p.numel(), p.element_size()) for p in model.parameters() if p.requires_grad)
    return Capture(_gemms(rec.shapes), training, precision, ops=_ops(rec.ops), params=params, syncs=rec.syncs,
                   breaks=rec.breaks)


def _run_step(rec: Recorder, model: torch.nn.Module, inputs: Any, precision: str, training: bool,
              replayer: Replayer | None) -> None:
    """The step, recorded: forward in the step's precision and, when ``training``,
    backward from a dense gradient on every floating output that requires grad."""
    grad_ctx = contextlib.nullcontext() if training else torch.no_grad()
    with (module_hooks(rec), fused_attention(), fused_dropout(), every_layer_runs(), recording(rec, model), grad_ctx,
          replayer.installed() if replayer else contextlib.nullcontext()):
        with autocast_context(precision):
            out = call_model(model, inputs)
        if training:
            outs = [t for t in loss_or_outputs(out) if t.requires_grad and t.is_floating_point()]
            if not outs:
                raise ShapelintError(
                    "the model's output does not require grad, so there is no backward pass "
                    "to lint; freeze nothing or pass --inference"
                )
            torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])


#: the owner of a GEMM record no module claims
_UNKNOWN = ModuleInfo("<unknown>", "", (), None)


def _gemms(rows: Sequence[ShapeRow]) -> list[Gemm]:
    gemms = []
    for i, (s, phase, owner, role, dtype) in enumerate(rows):
        module = owner.module if owner else _UNKNOWN
        gemms.append(
            Gemm(
                index=i,
                op=s.op if not s.part else f"{s.op}.{s.part}",
                phase=cast(Phase, phase),
                m=s.m,
                n=s.n,
                k=s.k,
                batch=s.batch,
                dtype=dtype,
                a=s.a,
                b=s.b,
                out=s.out,
                module=module.path,
                module_type=module.type,
                module_params=module.params,
                source=owner.source if owner else None,
                defined_at=module.defined_at,
                role=cast(Role, role),
                extra=s.extra,
            )
        )
    return gemms


def _ops(rows: Sequence[OpRow]) -> list[Op]:
    """The op stream, each GEMM or attention marker with the indices of its GEMM records."""
    ops, first = [], 0
    for i, row in enumerate(rows):
        indices = tuple(range(first, first + row.gemms)) if row.kclass in ("gemm", "attention") else ()
        first += len(indices)
        ops.append(Op(i, row.name, row.kclass, row.backward, row.nbytes, row.reads, row.writes, indices, row.owner,
                      row.widest, row.strided, row.numel, row.out_numel, row.channels_last, row.coalesced,
                      row.cast, row.shape, row.row))
    return ops


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
