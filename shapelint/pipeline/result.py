"""What linting one target produces: its ``Options`` (as the command line and
configuration resolved them), the ``Result`` every reporter, ``--fix`` and ``--verify``
read, a target that failed (``TargetError``), and the Result as inert JSON data (the
result cache and the ``--fix`` re-lint carry it between processes)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from shapelint.capture.run import Capture
from shapelint.hardware import Hardware
from shapelint.model.parallel import ParallelPlan
from shapelint.model.records import Finding, Gemm, GraphBreaks, MemoryFormat, Op
from shapelint.model.step_verification import StepVerification
from shapelint.price import Policy, StepEstimate, StepModel
from shapelint.price.gemm import GemmTime
from shapelint.price.relaid import Relaid
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
    #: the parallel layout's other degrees (None: the target's setting, else one GPU)
    dp: int | None = None
    fsdp: int | None = None
    sp: bool | None = None
    gpus_per_node: int | None = None
    #: FSDP2's MixedPrecisionPolicy (None: the target's setting, else fp32 / the param dtype)
    fsdp_param_dtype: str | None = None
    fsdp_reduce_dtype: str | None = None
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
    step_verification: StepVerification | None = None
    #: each GEMM of ``capture.gemms``' estimate, in the same order (``shapelint.price.gemm``):
    #: the reporters show these and never price a GEMM themselves
    gemm_times: tuple[GemmTime, ...] = ()
    #: the user's files the lint read, each with the SHA-256 of the bytes it read (the
    #: application fills it in: no output may replace one, and ``--fix`` edits a file only
    #: while it still holds those bytes)
    inputs: tuple[tuple[str, str], ...] = ()
    #: what the parallel layout does to the step (None: one GPU; shapelint.model.parallel)
    parallel: ParallelPlan | None = None


@dataclass(frozen=True)
class TargetError:
    """A target that could not be linted (the run goes on with the others): its
    one-line reason, as printed on stderr and listed in the JSON/SARIF ``errors``."""

    target: str
    message: str


#: what rebuilds a relaid step (``shapelint.price.relaid``) beside the capture's
_RELAID_TYPES: dict[str, Any] = {"memory_format": MemoryFormat, "gemms": list[Gemm], "ops": list[Op],
                                 "syncs": tuple[int, ...], "breaks": tuple[int, ...]}


def result_to_data(result: Result) -> dict[str, Any]:
    """``result`` as inert JSON data (:mod:`shapelint.model.serial`); the step model is kept
    as what rebuilds it from the capture (its mode, optimizer and torch.compile graphs, and
    the step traced in another memory format where there is one)."""
    from shapelint.model import serial

    data: dict[str, Any] = serial.encode(replace(result, step_model=None))
    sm = result.step_model
    data["step_model"] = None if sm is None else {
        "mode": sm.mode, "optimizer": sm.optimizer, "graphs": serial.encode(sm.step.graphs, GraphBreaks | None),
        "relaid": _relaid_to_data(sm.relaid_traced)}
    return data


def _relaid_to_data(relaid: Relaid | None) -> dict[str, Any] | None:
    from shapelint.model import serial

    if relaid is None:
        return None
    return {"memory_format": relaid.memory_format, "gemms": serial.encode(list(relaid.step.gemms), list[Gemm]),
            "ops": serial.encode(list(relaid.step.ops), list[Op]), "syncs": list(relaid.step.syncs),
            "breaks": list(relaid.step.breaks)}


def _relaid_from_data(data: Any, step: Step) -> Relaid | None:
    from shapelint.model import serial

    if data is None:
        return None
    if not isinstance(data, dict) or set(data) != set(_RELAID_TYPES):
        raise serial.DecodeError("$.step_model.relaid: expected its memory format, GEMMs, ops, syncs and breaks")
    v = {k: serial.decode(tp, data[k]) for k, tp in _RELAID_TYPES.items()}
    return Relaid(v["memory_format"], replace(step, gemms=v["gemms"], ops=v["ops"], syncs=v["syncs"],
                                              breaks=v["breaks"]), step)


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
    if not isinstance(model, dict) or set(model) != {"mode", "optimizer", "graphs", "relaid"} \
            or model["mode"] not in MODES or not isinstance(model["optimizer"], str):
        raise serial.DecodeError("$.step_model: expected its mode, optimizer, graphs and relaid step")
    cap = result.capture
    step = Step(cap.gemms, cap.ops, cap.params, result.training, cap.syncs, cap.breaks,
                serial.decode(GraphBreaks | None, model["graphs"]))
    try:
        sm = StepModel(step, result.hardware, model["mode"], model["optimizer"], result.parallel,
                       _relaid_from_data(model["relaid"], step))
    except (KeyError, ValueError, TypeError, IndexError) as exc:
        raise serial.DecodeError(f"$.step_model: {exc}") from None
    return replace(result, step_model=sm)


__all__ = ["Options", "Result", "TargetError", "result_from_data", "result_to_data"]
