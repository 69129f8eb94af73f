"""Run a rule's BAD/GOOD examples (for the generated test and the rule docs)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from shapelint.capture.run import Capture
from shapelint.capture.tensor_parallel import sharding
from shapelint.check.rule_api import Example, Rule, RuleContext
from shapelint.hardware import resolve
from shapelint.model.records import Finding
from shapelint.pipeline.run import trace, vocab_sizes
from shapelint.price import price


def trace_example(rule: Rule, example: Example) -> tuple[Capture, RuleContext]:
    """``example``'s GEMMs (model built on fake tensors) and the context rules get."""
    scope = {"torch": torch, "nn": nn, "F": F, "_rule": rule.module}

    def build() -> tuple[nn.Module, object]:
        return eval(example.model, scope), eval(example.inputs, scope)

    cap, model = trace(build, precision=example.dtype, training=example.training)
    sharded = sharding(cap.gemms, example.tp)
    cap.gemms = sharded.gemms
    ctx = RuleContext(precision=example.dtype, training=example.training, tokens=cap.tokens,
                      vocab_sizes=vocab_sizes(model), tp=example.tp, sharded=frozenset(sharded.styles),
                      whole_attention=sharded.whole_attention)
    return cap, ctx


def run_example(rule: Rule, example: Example) -> list[Finding]:
    """The findings ``rule`` reports on ``example`` on the example's GPU, priced by the
    default reporting policy."""
    cap, ctx = trace_example(rule, example)
    hw = resolve(example.gpu)
    return [f for f in price(rule.check(cap.gemms, hw, ctx), cap.gemms, hw) if f.code == rule.code]
