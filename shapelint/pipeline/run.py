"""The pipeline, one direction: load → capture → check → price → report (→ verify).

``lint_target`` runs it for one target: ``load`` builds the model on fake tensors,
``capture`` records every GEMM of the step, ``check`` runs the rules (proposals),
``price`` turns the proposals into findings by one reporting policy, and the
reporters (``shapelint.report``) render the ``Result``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from shapelint import hardware
from shapelint.capture.precision import PRECISIONS, to_precision
from shapelint.capture.run import Capture, capture
from shapelint.capture.tensor_parallel import shard
from shapelint.capture.traceable import check_not_compiled, explain, refusing_compile
from shapelint.check.rule_api import Rule, RuleContext
from shapelint.check.run import run_rules
from shapelint.errors import ShapelintError
from shapelint.files import write_file
from shapelint.hardware import Hardware
from shapelint.load.loaders import Loaded, load, token_count
from shapelint.load.usercode import user_code
from shapelint.locate.config_keys import locate_all
from shapelint.model.records import Finding, GraphBreaks
from shapelint.pipeline.settings import default
from shapelint.price import Policy, StepEstimate, StepModel, price, step_estimate
from shapelint.price.step import Step, StepTime


@dataclass
class Options:
    """One target's settings, as the command line and configuration resolved them;
    None means "not given": the target's own setting, else the built-in default."""

    dtype: str | None = None
    training: bool | None = None
    batch: int | None = None
    seq: int | None = None
    tp: int | None = None
    #: price the step as torch.compile runs it (None: the target's setting, else eager)
    compile: bool | None = None
    #: the optimizer step priced (shapelint.pipeline.settings.OPTIMIZERS; None: the default, adamw)
    optimizer: str | None = None
    dump_graph: str | None = None
    #: packages outside a YAML target's project whose builders it may name (``allow-builders``)
    allow_builders: tuple[str, ...] = ()
    policy: Policy = field(default_factory=Policy)


@dataclass
class Result:
    """Everything one target produced, for the reporters."""

    target: str
    kind: str
    precision: str
    training: bool
    capture: Capture
    tokens: int | None
    findings: list[Finding]
    step: StepEstimate
    hardware: Hardware
    config_file: str | None = None
    #: tensor-parallel degree: the GEMMs are one GPU's shard
    tp: int = 1
    #: the reporting policy this result was produced with (--verify confirms against it)
    policy: Policy = field(default_factory=Policy)
    #: the whole training step (shapelint.price.step): before and after every finding
    step_model: StepModel | None = field(default=None, repr=False)
    step_time: StepTime | None = None
    step_time_after: StepTime | None = None
    #: the options the target was linted with (``--verify --step`` builds it at the same size)
    options: Options | None = field(default=None, repr=False)
    #: what ``--verify --step`` measured (``shapelint.measure.step``), for the reporters
    step_verification: dict[str, Any] | None = None


@dataclass(frozen=True)
class TargetError:
    """A target that could not be linted (the run goes on with the others): its
    one-line reason, as printed on stderr and listed in the JSON/SARIF ``errors``."""

    target: str
    message: str


def resolve_precision(opts: Options, loaded: Loaded) -> str:
    dtype = opts.dtype or loaded.settings.get("dtype") or str(default("dtype"))
    if dtype not in PRECISIONS:
        raise ShapelintError(f"unknown dtype {dtype!r} (one of {', '.join(PRECISIONS)})")
    return str(dtype)


def vocab_sizes(model: torch.nn.Module) -> frozenset[int]:
    return frozenset(m.num_embeddings for m in model.modules() if isinstance(m, torch.nn.Embedding))


def lint_target(path: Path, opts: Options, hw: Hardware | None, rules: Sequence[Rule]) -> Result:
    """Lint one target; ``hw`` None means the target's own ``gpu`` setting, else the default GPU.
    A model that cannot run on fake CPU tensors (torch.compile, device moves) is one
    line saying so (:mod:`shapelint.capture.traceable`)."""
    try:
        loaded = load(path, batch=opts.batch, seq=opts.seq, allow_builders=opts.allow_builders)
        return lint_loaded(loaded, opts, hw, rules)
    except ShapelintError as exc:
        why = explain(exc)
        if why is None:
            raise
        raise ShapelintError(f"{path}: {why}") from None


def lint_loaded(loaded: Loaded, opts: Options, hw: Hardware | None, rules: Sequence[Rule]) -> Result:
    """Capture, check and price a loaded model (a target file's, or a model the Python API was given)."""
    path = loaded.target
    precision = resolve_precision(opts, loaded)
    if hw is None:
        hw = hardware.resolve(str(loaded.settings["gpu"])) if "gpu" in loaded.settings else hardware.default_gpu()
    tp = opts.tp if opts.tp is not None else int(loaded.settings.get("tp", 1))
    training = opts.training if opts.training is not None else bool(loaded.settings.get("training", True))
    try:
        check_not_compiled(loaded.model)
    except ShapelintError as exc:
        raise ShapelintError(f"{path}: {exc}") from None
    # the model's forward (and backward hooks) are the user's code too: behind the boundary
    with loaded.fake_mode, user_code(path, "forward and backward"), refusing_compile():
        inputs = to_precision(loaded.model, loaded.inputs, precision)
        try:
            cap = capture(loaded.model, inputs, precision=precision, training=training, defined_at=loaded.defined_at)
        except ShapelintError as exc:
            raise ShapelintError(f"{path}: {exc}") from exc
        if opts.dump_graph:
            from shapelint.capture.graph import joint_graph

            graph = joint_graph(loaded.model, inputs, training).print_readable(print_output=False)
            write_file(opts.dump_graph, graph, "--dump-graph")
    if tp > 1:
        cap.gemms = shard(cap.gemms, tp)
    tokens = token_count(loaded.inputs)
    ctx = RuleContext(
        precision=precision,
        training=training,
        tokens=tokens,
        vocab_sizes=vocab_sizes(loaded.model),
        tp=tp,
    )
    compiled = opts.compile if opts.compile is not None else bool(loaded.settings.get("compile", False))
    graphs = loaded.compile_probe() if compiled and loaded.compile_probe is not None else None
    step_of_capture = Step(cap.gemms, cap.ops, cap.params, training, cap.syncs, cap.breaks, graphs)
    model = StepModel(step_of_capture, hw, "compile" if compiled else "eager", opts.optimizer or str(default("optimizer")))
    findings = price(run_rules(rules, cap.gemms, hw, ctx), cap.gemms, hw, opts.policy, on=model)
    if loaded.config_file:
        findings = locate_all(findings, loaded.config_keys, loaded.config_file, tp=tp)
    step = step_estimate(cap.gemms, findings, hw)
    return Result(str(path), loaded.kind, precision, training, cap, tokens, findings, step, hw, loaded.config_file,
                  tp=tp, policy=opts.policy, step_model=model, step_time=model.before,
                  step_time_after=model.after(findings), options=opts)


def lint_module(model: torch.nn.Module, example_inputs: Any, opts: Options, hw: Hardware | None,
                rules: Sequence[Rule]) -> Result:
    """Lint a model the caller holds, on a fake copy (:mod:`shapelint.load.in_memory`)."""
    from shapelint.load.in_memory import loaded_from_module

    return lint_loaded(loaded_from_module(model, example_inputs), opts, hw, rules)


def with_findings(result: Result, findings: list[Finding]) -> Result:
    after = result.step_model.after(findings) if result.step_model else None
    return replace(result, findings=findings, step=step_estimate(result.capture.gemms, findings, result.hardware),
                   step_time_after=after)


def result_to_data(result: Result) -> dict[str, Any]:
    """``result`` as inert JSON data (:mod:`shapelint.model.serial`); the step model is kept
    as what rebuilds it from the capture (its mode, optimizer and torch.compile graphs)."""
    from shapelint.model import serial

    data: dict[str, Any] = serial.encode(replace(result, step_model=None))
    sm = result.step_model
    data["step_model"] = None if sm is None else {
        "mode": sm.mode, "optimizer": sm.optimizer, "graphs": serial.encode(sm.step.graphs, GraphBreaks | None)}
    return data


def result_from_data(data: Any) -> Result:
    """The ``Result`` that :func:`result_to_data` wrote, or :class:`shapelint.model.serial.DecodeError`."""
    from shapelint.model import serial
    from shapelint.price.step import MODES

    if not isinstance(data, dict):
        raise serial.DecodeError("$: expected an object for Result")
    model = data.get("step_model")
    result: Result = serial.decode(Result, {**data, "step_model": None})
    if model is None:
        return result
    if not isinstance(model, dict) or set(model) != {"mode", "optimizer", "graphs"} or model["mode"] not in MODES \
            or not isinstance(model["optimizer"], str):
        raise serial.DecodeError("$.step_model: expected its mode, optimizer and graphs")
    cap = result.capture
    step = Step(cap.gemms, cap.ops, cap.params, result.training, cap.syncs, cap.breaks,
                serial.decode(GraphBreaks | None, model["graphs"]))
    try:
        sm = StepModel(step, result.hardware, model["mode"], model["optimizer"])
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        raise serial.DecodeError(f"$.step_model: {exc}") from None
    return replace(result, step_model=sm)


__all__ = ["Options", "Result", "TargetError", "lint_loaded", "lint_module", "lint_target", "result_from_data",
           "result_to_data", "with_findings"]


def trace(build: Callable[[], tuple[torch.nn.Module, Any]], *, precision: str = "bf16",
          training: bool = True) -> tuple[Capture, torch.nn.Module]:
    """Load + capture for an in-memory builder (tests, rule examples, the Python API):
    ``build`` runs on fake tensors and returns ``(model, example_inputs)``."""
    from shapelint.load.loaders import fake_construction

    defined: dict[Any, Any] = {}
    with fake_construction(defined) as mode:
        model, inputs = build()
    with mode:
        inputs = to_precision(model, inputs, precision)
        cap = capture(model, inputs, precision=precision, training=training, defined_at=defined)
    cap.tokens = token_count(inputs)
    return cap, model
