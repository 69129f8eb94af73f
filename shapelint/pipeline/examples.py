"""Run a rule's BAD/GOOD examples (for the generated test and the rule docs)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from shapelint.capture.parallel_plan import parallel_plan
from shapelint.capture.run import Capture
from shapelint.capture.tensor_parallel import sharding
from shapelint.check.rule_api import Example, Rule, RuleContext
from shapelint.hardware import resolve
from shapelint.model.parallel import Layout, ParallelPlan
from shapelint.model.records import Finding
from shapelint.pipeline.run import trace, vocab_sizes
from shapelint.price import StepModel, price
from shapelint.price.step import Step


def trace_example(rule: Rule, example: Example) -> tuple[Capture, RuleContext]:
    """``example``'s GEMMs (model built on fake tensors) and the context rules get."""
    cap, ctx, _ = _traced(rule, example)
    return cap, ctx


def _traced(rule: Rule, example: Example) -> tuple[Capture, RuleContext, ParallelPlan | None]:
    """:func:`trace_example`, with the plan of the example's parallel layout (None on one GPU)."""
    scope = {"torch": torch, "nn": nn, "F": F, "_rule": rule.module}

    def build() -> tuple[nn.Module, object]:
        return eval(example.model, scope), eval(example.inputs, scope)

    cap, model = trace(build, precision=example.dtype, training=example.training)
    sharded = sharding(cap.gemms, example.tp)
    cap.gemms = sharded.gemms
    layout = Layout(tp=example.tp, fsdp=example.fsdp)
    plan = parallel_plan(model, cap.gemms, layout, sharded, example.dtype) if example.fsdp > 1 else None
    ctx = RuleContext(precision=example.dtype, training=example.training, tokens=cap.tokens,
                      vocab_sizes=vocab_sizes(model), tp=example.tp, sharded=frozenset(sharded.styles),
                      whole_attention=sharded.whole_attention, fsdp=example.fsdp,
                      fsdp_groups=plan.groups if plan is not None else (), ops=tuple(cap.ops))
    return cap, ctx, plan


def run_example(rule: Rule, example: Example) -> list[Finding]:
    """The findings ``rule`` reports on ``example`` on the example's GPU, priced by the
    default reporting policy (on the step, with its communication, where the example
    sets a data-parallel layout)."""
    cap, ctx, plan = _traced(rule, example)
    hw = resolve(example.gpu)
    on = StepModel(Step(cap.gemms, cap.ops, cap.params, example.training, cap.syncs, cap.breaks), hw,
                   parallel=plan) if plan is not None else None
    return [f for f in price(rule.check(cap.gemms, hw, ctx), cap.gemms, hw, on=on) if f.code == rule.code]
