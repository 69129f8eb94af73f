"""Run one rule the way the pipeline does: its proposals, priced by the reporting policy."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

from shapelint.hardware import Hardware
from shapelint.price import Policy, price
from shapelint.records import Finding, Gemm
from shapelint.rule_api import RuleContext


def run_rule(rule: ModuleType, gemms: Sequence[Gemm], hw: Hardware, ctx: RuleContext | None = None,
             policy: Policy = Policy()) -> list[Finding]:
    return price(rule.check(gemms, hw, ctx or RuleContext()), gemms, hw, policy)
