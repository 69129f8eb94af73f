"""One generated test per rule example: BAD examples must be flagged with the
suggestion they expect and at least their minimum estimated speedup; GOOD
examples must pass."""

from __future__ import annotations

import re

import pytest

from shapelint.check.run import builtin_rules
from shapelint.pipeline.examples import run_example

CASES = [(rule, kind, i) for rule in builtin_rules() for kind in ("bad", "good")
         for i in range(len(getattr(rule, kind)))]


@pytest.mark.parametrize("rule,kind,i", CASES, ids=[f"{r.code}-{k.upper()}{i}" for r, k, i in CASES])
def test_rule_example(rule, kind: str, i: int) -> None:
    example = getattr(rule, kind)[i]
    findings = run_example(rule, example)
    if kind == "good":
        assert findings == [], [f.message for f in findings]
        return
    assert findings, f"{rule.code} did not flag {example.model}"
    if example.expect:
        got = [f.suggestion.to_json() for f in findings if f.suggestion]
        assert any(all(s.get(k) == v for k, v in example.expect.items()) for s in got), got
    best = max(f.est_speedup or 0 for f in findings)
    assert best >= example.min_speedup


@pytest.mark.parametrize("rule", builtin_rules(), ids=lambda r: r.code)
def test_rule_module_shape(rule) -> None:
    assert re.fullmatch(r"SL\d{3}", rule.code)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.name)
    assert rule.severity in ("info", "warning", "error")
    for heading in ("## What it does", "## Why is this bad?", "## Example", "## Use instead"):
        assert heading in rule.doc, f"{rule.code} docstring lacks {heading}"
    assert rule.bad and rule.good
