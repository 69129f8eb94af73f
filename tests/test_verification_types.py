"""The typed verification results (``Finding.verification``, ``Result.step_verification``):
their JSON form is a public contract (keys, order, values as the report has always
written them), they cross processes as data (the result cache, the --fix re-lint), and
scripts read them by the report's keys."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from shapelint.check.run import builtin_rules
from shapelint.hardware import resolve
from shapelint.model import serial
from shapelint.model.records import GraphBreaks, Suggestion
from shapelint.model.step_verification import (
    AppliedFinding,
    FindingRef,
    StepComparison,
    StepVerification,
    UnappliedFinding,
    VariantRun,
)
from shapelint.model.verification import NOT_RUN, FindingVerification, GemmTiming
from shapelint.pipeline.result import Options, result_from_data, result_to_data
from shapelint.pipeline.run import lint_module
from shapelint.price import Policy

REF = FindingRef("SL501", "lm_head", Suggestion("vocab_size", 50257, 50264))
COMPARED = StepComparison(67.7, 56.6, 11.1, 1.1961, 0.01, 1.01, True)


def step(**changes: object) -> StepVerification:
    """A step verified with one applied finding, eager (``changes`` replace fields)."""
    v = StepVerification(
        device="NVIDIA H100 80GB HBM3", torch="2.11.0+cu130", mode="eager", profile="h100", precision="bf16",
        training=True, optimizer="adamw", fused_optimizer=True, est_ms=63.4, est_ms_after=51.9, est_speedup=1.2216,
        blocks=5, steps_per_block=10, warmup=3, probed_graphs=None, before=VariantRun((67.6, 67.8)), steps=50,
        order=("before", "after"), est_error=-0.0635,
        findings=(AppliedFinding(REF, 11.5, 1.2216, COMPARED, ("lm_head",)),),
        per_finding="the only finding: all at once",
        not_applied=(UnappliedFinding(FindingRef("SL101", "fc"), "computed, not a literal"),),
        after=VariantRun((56.5, 56.7), sliced=("lm_head",)), comparison=COMPARED, speedup_error=0.0213)
    return replace(v, **changes)


def alone() -> StepVerification:
    return step(after=None, comparison=None, alone_ms=67.7, findings=(), speedup_error=None,
                est_ms_after=63.4, est_speedup=1.0)


def test_the_step_verification_writes_the_report_keys_in_their_order() -> None:
    assert list(step().to_json()) == [
        "status", "device", "torch", "mode", "profile", "precision", "training", "optimizer", "fused_optimizer",
        "est_ms", "est_ms_after", "est_speedup", "blocks", "steps_per_block", "warmup", "compile_s", "graphs",
        "measured_ms", "measured_ms_after", "measured_speedup", "noise", "threshold", "confirmed", "block_ms",
        "steps", "order", "sliced", "own_inputs", "est_error", "speedup_error", "findings", "per_finding",
        "not_applied"]
    v = step().to_json()
    assert (v["measured_ms"], v["measured_ms_after"], v["confirmed"]) == (67.7, 56.6, True)
    assert v["compile_s"] == {"before": None, "after": None} and v["block_ms"] == {"before": [67.6, 67.8],
                                                                                   "after": [56.5, 56.7]}
    assert v["findings"] == [{"code": "SL501", "module": "lm_head",
                              "suggestion": {"parameter": "vocab_size", "from": 50257, "to": 50264},
                              "est_step_ms_saved": 11.5, "est_speedup": 1.2216, "measured": True,
                              "measured_ms": 67.7, "measured_ms_after": 56.6, "measured_step_ms_saved": 11.1,
                              "measured_speedup": 1.1961, "noise": 0.01, "threshold": 1.01, "confirmed": True,
                              "sliced": ["lm_head"]}]
    assert v["not_applied"] == [{"code": "SL101", "module": "fc", "suggestion": None,
                                 "reason": "computed, not a literal"}]


def test_before_timed_alone_has_no_after_keys() -> None:
    v = alone().to_json()
    assert "sliced" not in v and "own_inputs" not in v and "speedup_error" not in v
    assert (v["measured_ms"], v["measured_ms_after"], v["measured_speedup"], v["confirmed"]) == (67.7, None, None, None)
    assert v["compile_s"] == {"before": None} and v["block_ms"] == {"before": [67.6, 67.8]}


def test_probed_graphs_are_written_under_compile_only() -> None:
    probed = GraphBreaks(18, 13, 63, ("Data-dependent branching",), 20)
    assert "probed_graphs" not in step(probed_graphs=probed).to_json()
    assert step(mode="compile").to_json()["probed_graphs"] is None
    assert step(mode="compile", probed_graphs=probed).to_json()["probed_graphs"] == {
        "forward_graphs": 18, "backward_graphs": 13, "eager_ops": 63, "backward_eager_ops": 20,
        "reasons": ["Data-dependent branching"]}


def test_a_finding_not_measured_alone_says_why_only_when_there_is_a_reason() -> None:
    assert AppliedFinding(REF, 1.0, 1.1).to_json()["measured"] is False
    assert "error" not in AppliedFinding(REF, 1.0, 1.1).to_json()
    assert AppliedFinding(REF, 1.0, 1.1, error="no literal").to_json()["error"] == "no literal"


def test_a_step_verification_is_compared_or_alone_never_both() -> None:
    with pytest.raises(ValueError):
        step(alone_ms=67.7)
    with pytest.raises(ValueError):
        step(comparison=None)
    assert alone().measured_ms == step().measured_ms == 67.7


def test_the_records_write_their_json_form() -> None:
    """Readers of the report read the JSON keys; shapelint's own readers read the fields."""
    v = step()
    assert v.status == "measured" and v.to_json()["status"] == "measured"
    assert v.to_json()["findings"][0]["confirmed"] is True
    f = FindingVerification("confirmed", 0.278, 0.131, (GemmTiming(0, "mm", "forward", 0.1, 0.05, 0.07, 0.14),))
    assert f.to_json()["gemms"][0]["after_peak_fraction"] == 0.14 and "missing" not in f.to_json()
    assert NOT_RUN.to_json() == {"status": "not run"} and not NOT_RUN.ran


def test_the_verifications_round_trip_as_data() -> None:
    for v in (step(), alone(), step(mode="compile", probed_graphs=GraphBreaks(2, 1, 5))):
        assert serial.decode(StepVerification, serial.encode(v)) == v
    f = FindingVerification("not confirmed", 0.131, 0.131, (GemmTiming(2, "mm", "grad_weight", 0.05, None, 0.1, None),))
    assert serial.decode(FindingVerification, serial.encode(f)) == f
    with pytest.raises(serial.DecodeError):  # an after variant without its comparison
        serial.decode(StepVerification, {**serial.encode(step()), "comparison": None})


def test_a_result_carries_both_verifications_through_its_data_form() -> None:
    r = lint_module(nn.Linear(1023, 4096), torch.randn(8192, 1023), Options(policy=Policy(min_step_share=0.0)),
                    resolve("h100"), builtin_rules())
    assert r.findings
    f = FindingVerification("confirmed", 0.2, 0.1, (GemmTiming(0, "mm", "forward", 0.2, 0.1, 0.5, 0.9),))
    r = replace(r, findings=[replace(r.findings[0], verification=f)], step_verification=step())
    back = result_from_data(result_to_data(r))
    assert back.step_verification == step() and back.findings[0].verification == f
    assert back.findings[0].to_json()["details"]["verify"] == f.to_json()
