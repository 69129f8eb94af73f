"""The Python API: lint a model you already hold, or a target file, and get a typed
``Report`` (GEMM records, findings, step estimate) that prints as a table in a
terminal (rich) and in a Jupyter cell (HTML).

>>> import torch, shapelint
>>> report = shapelint.lint(torch.nn.Linear(1023, 4096), torch.randn(8192, 1023))
>>> [(f.code, str(f.suggestion)) for f in report.findings]
[('SL101', 'in_features: 1023 → 1024')]

``lint`` never touches the user's model: it traces a copy whose parameters and
buffers are fake tensors of the same shapes, dtypes and strides (built from meta
tensors, so a model on a GPU, on the CPU or on the meta device costs no memory), and
the copy is what ``capture`` puts in training mode and casts to the compute dtype.

``lint`` and ``lint_target`` may be called from several threads; they run one at a
time, under the process-wide lock of the user-code boundary
(:data:`shapelint.load.usercode.LOCK`): torch's fake-tensor tracing is not thread-safe, and
the boundary swaps process-wide state (``sys.stdout``/``sys.stderr``, fd 1,
``sys.path``) that two lints restoring in turn left captured. A call waits for the
one before it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Group

from shapelint import hardware
from shapelint.app.lint_plan import LintPlan, select_rules
from shapelint.errors import ShapelintError, describe
from shapelint.hardware import Hardware
from shapelint.load.targets import target_kind
from shapelint.load.usercode import LOCK
from shapelint.model.records import Finding, Gemm
from shapelint.pipeline import run as pipeline
from shapelint.pipeline import settings
from shapelint.pipeline.result import Result
from shapelint.pipeline.settings import Settings
from shapelint.price import StepEstimate
from shapelint.price.step import StepTime


@dataclass(frozen=True)
class Report:
    """What shapelint found in one model: its GEMMs, the findings (suppressed ones
    left out), the estimated training step before and after every suggestion
    (``step_time``, ``step_time_after``) and the GEMMs' share of it (``step``).
    ``result`` is the whole pipeline result the command-line reporters render."""

    result: Result

    @property
    def target(self) -> str:
        return self.result.target

    @property
    def gemms(self) -> tuple[Gemm, ...]:
        return tuple(self.result.capture.gemms)

    @property
    def findings(self) -> list[Finding]:
        return [f for f in self.result.findings if not f.suppressed]

    @property
    def step(self) -> StepEstimate:
        """The GEMMs alone, before and after every suggestion (not the step)."""
        return self.result.step

    @property
    def step_time(self) -> StepTime | None:
        """The whole training step (est.): GEMMs, memory-bound kernels, optimizer, launches."""
        return self.result.step_time

    @property
    def step_time_after(self) -> StepTime | None:
        return self.result.step_time_after

    @property
    def hardware(self) -> Hardware:
        return self.result.hardware

    def to_json(self, *, gemms: bool = True) -> dict[str, Any]:
        """The ``--format json`` document (``gemms``, ``findings``, ``summary``, ``targets``;
        ``gemms=False``: without the GEMM records, as ``--no-gemms``)."""
        from shapelint.report import json_report

        return json_report.document([self.result], gemms=gemms)

    def __rich__(self) -> Group:
        from shapelint.report import table

        return table.rich_table(self.result)

    def _repr_html_(self) -> str:
        from shapelint.report import table

        return table.html(self.result)

    def __repr__(self) -> str:
        n = len(self.findings)
        from shapelint.report.text import step_line

        return f"<shapelint.Report {self.target}: {n} finding{'s' if n != 1 else ''}, {len(self.gemms)} GEMMs, " \
               f"{step_line(self.result)}>"


#: what ``select=``/``ignore=`` take: one code (``"SL501"``), a comma-separated string, or a list
Codes = str | Sequence[str]


def lint(model: torch.nn.Module, example_inputs: Any, *, gpu: str | None = None, dtype: str | None = None,
         training: bool = True, compile: bool | None = None, optimizer: str | None = None, tp: int | None = None,
         select: Codes = (), ignore: Codes = (), dp: int | None = None, fsdp: int | None = None,
         sp: bool | None = None, gpus_per_node: int | None = None, fsdp_param_dtype: str | None = None,
         fsdp_reduce_dtype: str | None = None) -> Report:
    """Lint ``model`` on ``example_inputs`` (a tensor, a tuple of tensors or a dict of
    keyword arguments), on any device or on meta: nothing is allocated and nothing of
    ``model`` or the inputs is changed. ``gpu`` a profile name (default: the local
    CUDA GPU, else h100); ``dtype`` bf16 (default), fp16, fp32 or tf32; ``select`` and
    ``ignore`` a code (``"SL501"``), a comma-separated string or a list; the other
    settings as the command line's (``shapelint --help``). Every error is a
    :class:`~shapelint.errors.ShapelintError` with a one-line message."""
    with api_errors():
        if not isinstance(model, torch.nn.Module):
            raise ShapelintError(f"lint(): model must be a torch.nn.Module, got {type(model).__name__}")
        given = _settings(dtype=dtype, training=training, compile=compile, optimizer=optimizer, tp=tp, select=select,
                          ignore=ignore, **parallel_keywords(dp=dp, fsdp=fsdp, sp=sp, gpus_per_node=gpus_per_node,
                                                             fsdp_param_dtype=fsdp_param_dtype,
                                                             fsdp_reduce_dtype=fsdp_reduce_dtype))
        with LOCK:  # one lint at a time (see the module docstring)
            hw = hardware.resolve(_gpu(gpu)) if gpu is not None else hardware.default_gpu()
            plan = LintPlan(given, select_rules(given), gpu=hw)
            return Report(pipeline.lint_module(model, example_inputs, plan.options(), hw, plan.rules.selected))


def lint_target(path: str | Path, *, gpu: str | None = None, dtype: str | None = None, training: bool | None = None,
                compile: bool | None = None, optimizer: str | None = None, batch: int | None = None,
                seq: int | None = None, tp: int | None = None, select: Codes = (), ignore: Codes = (),
                dp: int | None = None, fsdp: int | None = None, sp: bool | None = None,
                gpus_per_node: int | None = None, fsdp_param_dtype: str | None = None,
                fsdp_reduce_dtype: str | None = None) -> Report:
    """Lint one target as the command line does (a model.py defining
    ``shapelint_model()``, a Hugging Face config.json or a directory holding one, a
    shapelint YAML), with its ``# shapelint: ignore`` comments; configuration files are
    not read (pass the settings). Every error is a :class:`~shapelint.errors.ShapelintError`."""
    with api_errors():
        if not isinstance(path, (str, Path)):
            raise ShapelintError(f"lint_target(): path must be a str or a Path, got {type(path).__name__}")
        path = Path(path)
        target_kind(path)  # a clear error for what is not a target
        given = _settings(dtype=dtype, training=training, compile=compile, optimizer=optimizer, tp=tp, batch=batch,
                          seq=seq, select=select, ignore=ignore,
                          **parallel_keywords(dp=dp, fsdp=fsdp, sp=sp, gpus_per_node=gpus_per_node,
                                              fsdp_param_dtype=fsdp_param_dtype, fsdp_reduce_dtype=fsdp_reduce_dtype))
        with LOCK:  # one lint at a time (see the module docstring)
            plan = LintPlan(given, select_rules(given), gpu=hardware.resolve(_gpu(gpu)) if gpu is not None else None)
            # no configuration file: the target's own settings shadow nothing, so none are read here
            r = pipeline.lint_target(path, plan.options(), plan.gpu, plan.rules.selected)
        return Report(plan.suppression().apply(r))


#: the loggers that print a traceback of their own for an error shapelint reports in one line
NOISY_LOGGERS = ("torch._subclasses.fake_tensor",)


@contextlib.contextmanager
def api_errors() -> Iterator[None]:
    """Every error of a call as a :class:`ShapelintError` with the command's one-line
    message (the original chained as its cause), and none of torch's fake-tensor log
    records: a shape error logged some 20 lines of traceback into the notebook cell
    before shapelint's own message."""
    loggers = [logging.getLogger(name) for name in NOISY_LOGGERS]
    before = [lg.disabled for lg in loggers]
    for lg in loggers:
        lg.disabled = True
    try:
        yield
    except ShapelintError:
        raise
    except Exception as exc:
        raise ShapelintError(describe(exc)) from exc
    finally:
        for lg, was in zip(loggers, before):
            lg.disabled = was


def _gpu(gpu: Any) -> str:
    """``gpu=`` checked as the ``gpu`` setting is in a configuration file."""
    return str(settings.validate(settings.BY_KEY["gpu"], gpu, "gpu="))


#: the keywords checked as their settings are in a configuration file, in this order
_CHECKED = ("dtype", "compile", "optimizer", "tp", "batch", "seq")


def parallel_keywords(**given: Any) -> dict[str, Any]:
    """The parallel layout's keywords (``dp``, ``fsdp``, ``sp``, ``gpus_per_node``,
    ``fsdp_param_dtype``, ``fsdp_reduce_dtype``),
    each validated as its setting is in a configuration file."""
    for name, value in given.items():
        if value is not None:
            settings.validate(settings.BY_KEY[settings.canonical(name)], value, f"{name}=")
    return given


def _settings(*, training: bool | None, select: Codes, ignore: Codes, **given: Any) -> Settings:
    """The keywords as the settings a command line gives, each validated as its setting
    is in a configuration file (the error names the keyword: ``dtype=: ...``); ``select``
    and ``ignore`` as the configuration reads them (``"SL501"`` is one code, not five
    characters)."""
    for name in _CHECKED:
        if given.get(name) is not None:
            settings.validate(settings.BY_KEY[name], given[name], f"{name}=")
    if training is not None and not isinstance(training, bool):
        raise ShapelintError(f"training=: expected True or False, got {settings.describe(training)}")
    codes = {key: settings.validate(settings.BY_KEY[key], list(value) if isinstance(value, tuple) else value, f"{key}=")
             for key, value in (("select", select), ("ignore", ignore))}
    return Settings(**given, inference=None if training is None else not training, **codes)


__all__ = ["Report", "api_errors", "lint", "lint_target"]
