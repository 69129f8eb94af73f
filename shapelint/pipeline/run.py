"""The pipeline, one direction: load → capture → check → price → report (→ verify).

``lint_target`` runs it for one target: ``load`` builds the model on fake tensors,
``capture`` records every GEMM of the step, ``check`` runs the rules (proposals),
``price`` turns the proposals into findings by one reporting policy, and the
reporters (``shapelint.report``) render the ``Result``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from shapelint import hardware
from shapelint.capture.memory_format import in_memory_format
from shapelint.capture.parallel_plan import parallel_plan
from shapelint.capture.precision import PRECISIONS, to_precision
from shapelint.capture.run import Capture, capture
from shapelint.capture.tensor_parallel import Sharding, sharding
from shapelint.capture.traceable import check_not_compiled, explain, refusing_compile
from shapelint.check.rule_api import Rule, RuleContext
from shapelint.check.run import run_rules
from shapelint.errors import ShapelintError
from shapelint.files import write_file
from shapelint.hardware import Hardware
from shapelint.load.hf_inputs import token_count
from shapelint.load.loaded import Loaded
from shapelint.load.run import load
from shapelint.load.usercode import user_code
from shapelint.locate.code_sites import locate_in_code
from shapelint.locate.config_keys import locate_all
from shapelint.locate.knobs import advise
from shapelint.model.parallel import Layout, ParallelPlan
from shapelint.model.records import Change, Finding, Op, Proposal
from shapelint.pipeline.result import Options, Result
from shapelint.pipeline.settings import default
from shapelint.price import StepModel, price, step_estimate
from shapelint.price.gemm import gemm_times
from shapelint.price.relaid import Relaid
from shapelint.price.step import Step


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


@dataclass(frozen=True)
class Resolved:
    """A target's settings as its lint uses them: each from ``Options`` (the command
    line, the configuration), else the target's own (``Loaded.settings``), else the
    default."""

    precision: str
    hardware: Hardware
    tp: int
    training: bool
    compiled: bool
    layout: Layout = Layout()


def resolve_target(opts: Options, loaded: Loaded, hw: Hardware | None) -> Resolved:
    """``loaded``'s settings under ``opts``; ``hw`` None: the target's own ``gpu``, else the default GPU."""
    precision = resolve_precision(opts, loaded)
    if hw is None:
        hw = hardware.resolve(str(loaded.settings["gpu"])) if "gpu" in loaded.settings else hardware.default_gpu()
    def pick(name: str) -> Any:
        given = getattr(opts, name)
        return given if given is not None else loaded.settings.get(name, default(name.replace("_", "-")))

    fsdp = int(pick("fsdp"))
    # FSDP2's mixed-precision policy is FSDP's: without it (a project-wide setting, a run at --fsdp 1) it does nothing
    param_dtype = str(pick("fsdp_param_dtype")) if fsdp > 1 else "fp32"
    layout = Layout(dp=int(pick("dp")), fsdp=fsdp, tp=int(pick("tp")), sp=bool(pick("sp")),
                    gpus_per_node=int(pick("gpus_per_node")), fsdp_param_dtype=param_dtype,
                    fsdp_reduce_dtype=str(pick("fsdp_reduce_dtype") or param_dtype) if fsdp > 1 else "fp32")
    if layout.sp and layout.tp == 1:
        raise ShapelintError("--sp (sequence parallelism) needs --tp above 1")
    return Resolved(
        precision=precision,
        hardware=hw,
        layout=layout,
        tp=layout.tp,
        training=opts.training if opts.training is not None else bool(loaded.settings.get("training", True)),
        compiled=opts.compile if opts.compile is not None else bool(loaded.settings.get("compile", False)),
    )


def rule_context(target: Resolved, tokens: int | None, vocabs: frozenset[int], sharded: Sharding | None,
                 plan: ParallelPlan | None, ops: tuple[Op, ...] = ()) -> RuleContext:
    """What the rules know of a target besides its GEMMs: its settings, its
    vocabularies, what its parallel layout did to it, and the step's op stream."""
    return RuleContext(
        precision=target.precision,
        training=target.training,
        tokens=tokens,
        vocab_sizes=vocabs,
        tp=target.tp,
        sharded=frozenset(sharded.styles) if sharded is not None else frozenset(),
        whole_attention=sharded.whole_attention if sharded is not None else (),
        fsdp=target.layout.fsdp,
        fsdp_groups=plan.groups if plan is not None else (),
        ops=ops,
    )


def lint_loaded(loaded: Loaded, opts: Options, hw: Hardware | None, rules: Sequence[Rule]) -> Result:
    """Capture, check and price a loaded model (a target file's, or a model the Python API was given)."""
    path = loaded.target
    target = resolve_target(opts, loaded, hw)
    precision, hw, tp, training = target.precision, target.hardware, target.tp, target.training
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
    sharded = sharding(cap.gemms, tp) if tp > 1 else None
    if sharded is not None:
        cap.gemms = sharded.gemms
    plan = parallel_plan(loaded.model, cap.gemms, target.layout, sharded, precision) \
        if target.layout.parallel else None
    tokens = token_count(loaded.inputs)
    ctx = rule_context(target, tokens, vocab_sizes(loaded.model), sharded, plan, tuple(cap.ops))
    graphs = loaded.compile_probe() if target.compiled and loaded.compile_probe is not None else None
    step_of_capture = Step(cap.gemms, cap.ops, cap.params, training, cap.syncs, cap.breaks, graphs)
    proposals = run_rules(rules, cap.gemms, hw, ctx)
    retrace = functools.partial(relaid_step, loaded, inputs, target, proposals, step_of_capture) \
        if sharded is None else None
    model = StepModel(step_of_capture, hw, "compile" if target.compiled else "eager",
                      opts.optimizer or str(default("optimizer")), plan, retrace=retrace)
    findings = price(proposals, cap.gemms, hw, opts.policy, on=model)
    if loaded.config_file:
        findings = locate_all(findings, loaded.config_keys, loaded.config_file, tp=tp)
    elif loaded.kind == "python":
        findings = locate_in_code(findings, str(path), tp=tp, gemms=cap.gemms)
    findings = advise(findings, loaded.model, cap.gemms)
    step = step_estimate(cap.gemms, findings, hw)
    after = model.after(findings)
    model.settle()
    return Result(str(path), loaded.kind, precision, training, cap, tokens, findings, step, hw, loaded.config_file,
                  tp=tp, policy=opts.policy, step_model=model, step_time=model.before,
                  step_time_after=after, options=opts, gemm_times=gemm_times(cap.gemms, hw),
                  parallel=plan)


def relaid_step(loaded: Loaded, inputs: Any, target: Resolved, proposals: Sequence[Proposal],
                step: Step) -> tuple[Relaid | None, str]:
    """Where a proposal converts the whole model's memory format (SL402), the step traced
    again with the model and its inputs in that format, as the user who follows it runs
    it (``shapelint.price.relaid``; the step model calls this when it prices the first
    finding that needs it). None where none does, and where the model does not
    run in that format (a ``view`` that needs the old strides), with why: its finding is
    then priced on its convolutions alone and says so."""
    formats = {p.change.memory_format for p in proposals
               if isinstance(p.change, Change) and p.change.memory_format is not None}
    if len(formats) != 1:
        return None, ""
    (fmt,) = formats
    try:
        with loaded.fake_mode, user_code(loaded.target, "forward and backward"), refusing_compile(), \
                in_memory_format(loaded.model, inputs, fmt) as relaid_inputs:
            cap = capture(loaded.model, relaid_inputs, precision=target.precision, training=target.training,
                          defined_at=loaded.defined_at)
    except ShapelintError as exc:
        return None, str(exc).rsplit("cannot trace the model: ", 1)[-1]
    relaid = Relaid(fmt, Step(cap.gemms, cap.ops, cap.params, target.training, cap.syncs, cap.breaks, step.graphs),
                    step)
    return relaid, ""


def lint_module(model: torch.nn.Module, example_inputs: Any, opts: Options, hw: Hardware | None,
                rules: Sequence[Rule]) -> Result:
    """Lint a model the caller holds, on a fake copy (:mod:`shapelint.load.in_memory`)."""
    from shapelint.load.in_memory import loaded_from_module

    return lint_loaded(loaded_from_module(model, example_inputs), opts, hw, rules)


def with_findings(result: Result, findings: list[Finding]) -> Result:
    after = result.step_model.after(findings) if result.step_model else None
    return replace(result, findings=findings, step=step_estimate(result.capture.gemms, findings, result.hardware),
                   step_time_after=after)


def trace(build: Callable[[], tuple[torch.nn.Module, Any]], *, precision: str = "bf16",
          training: bool = True) -> tuple[Capture, torch.nn.Module]:
    """Load + capture for an in-memory builder (tests, rule examples, the Python API):
    ``build`` runs on fake tensors and returns ``(model, example_inputs)``."""
    from shapelint.load.fake import fake_construction

    defined: dict[Any, Any] = {}
    with fake_construction(defined) as mode:
        model, inputs = build()
    with mode:
        inputs = to_precision(model, inputs, precision)
        cap = capture(model, inputs, precision=precision, training=training, defined_at=defined)
    cap.tokens = token_count(inputs)
    return cap, model


__all__ = ["Resolved", "lint_loaded", "lint_module", "lint_target", "resolve_precision", "resolve_target", "trace",
           "vocab_sizes", "with_findings"]
