"""Run one rule the way the pipeline does: its proposals, priced by the reporting policy."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

from shapelint.check.rule_api import RuleContext
from shapelint.hardware import Hardware
from shapelint.model.records import Finding, Gemm
from shapelint.price import Policy, price


def run_rule(rule: ModuleType, gemms: Sequence[Gemm], hw: Hardware, ctx: RuleContext | None = None,
             policy: Policy = Policy()) -> list[Finding]:
    return price(rule.check(gemms, hw, ctx or RuleContext()), gemms, hw, policy)
