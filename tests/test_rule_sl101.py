"""SL101 on a leading dimension that is no size of the GEMM: the row stride of a view
(SpeechT5's relative-position operand, rows 1023² apart; Longformer's overlapping
chunks, 3w+1) has no size to change, and the rule once crashed on it (IndexError)."""

from __future__ import annotations

import dataclasses

import torch
from _rules import run_rule
from shapelint.rules import sl101_misaligned_leading_dim as sl101
from torch import nn

from shapelint.check.rule_api import RuleContext
from shapelint.hardware import resolve
from shapelint.physics.alignment import misaligned_leading_dims
from shapelint.pipeline.run import trace


def test_a_leading_dimension_that_is_a_stride_is_not_a_finding() -> None:
    cap, _ = trace(lambda: (nn.Linear(1023, 3072), torch.randn(4096, 1023)))
    hw, ctx = resolve("h100-sxm"), RuleContext(precision="bf16")
    assert [f.suggestion.to_json() for f in run_rule(sl101, cap.gemms, hw, ctx)] == [
        {"parameter": "in_features", "from": 1023, "to": 1024}]
    # the same layouts on a GEMM whose sizes are all aligned: 1023 is then only a row stride
    strided = [dataclasses.replace(g, m=1024 if g.m == 1023 else g.m, n=1024 if g.n == 1023 else g.n,
                                   k=1024 if g.k == 1023 else g.k) for g in cap.gemms]
    assert all(1023 not in (g.m, g.n, g.k) for g in strided)
    assert any(1023 in misaligned_leading_dims(g, hw) for g in strided)
    assert list(run_rule(sl101, strided, hw, ctx)) == []
