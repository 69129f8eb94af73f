"""GPU profiles changed one key at a time: each gives a profile the estimator can use,
or one ShapelintError line naming the key; never another exception."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from _cli_helpers import assert_one_error_line, run, write_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shapelint.check.rule_api import RuleContext
from shapelint.check.run import builtin_rules, run_rules
from shapelint.errors import ShapelintError
from shapelint.hardware import PROFILE_DIR, Hardware, profile_from_dict
from shapelint.pipeline.run import trace
from shapelint.price import price, step_estimate

SHIPPED = yaml.safe_load((PROFILE_DIR / "h200.yaml").read_text())

#: what a careless edit or a hostile file puts in a profile
HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
    st.lists(st.integers(min_value=-3, max_value=300), max_size=3),
    st.lists(st.lists(st.integers(min_value=-2, max_value=300), max_size=3), max_size=3),
    st.dictionaries(st.one_of(st.text(max_size=4), st.integers(-2, 16)),
                    st.one_of(st.floats(-2, 2), st.integers(-2, 16), st.none(), st.text(max_size=3)), max_size=3),
)
DELETE = object()


def _gemms() -> Any:
    def build() -> tuple[torch.nn.Module, torch.Tensor]:
        return torch.nn.Sequential(torch.nn.Linear(1023, 4000), torch.nn.Linear(4000, 64)), torch.randn(4096, 1023)

    cap, _ = trace(build)
    return cap


CAPTURE = _gemms()


def _use(hw: Hardware) -> None:
    """What a lint does with a profile: every built-in rule and the step estimate."""
    ctx = RuleContext(precision="bf16", training=True, tokens=4096, vocab_sizes=frozenset(), tp=1)
    findings = price(run_rules(builtin_rules(), CAPTURE.gemms, hw, ctx), CAPTURE.gemms, hw)
    est = step_estimate(CAPTURE.gemms, findings, hw)
    assert math.isfinite(est.ms) and est.ms > 0


def _mutations() -> st.SearchStrategy[tuple[list[str], Any]]:
    top = st.sampled_from(sorted(SHIPPED))
    nested = st.sampled_from([["tensor_tflops", "bf16"], ["measured", "bf16_tflops"], ["measured", "copy_tbps"],
                              ["tiles", 0], ["misaligned_efficiency"], ["conv_misaligned_efficiency"],
                              ["gemm_efficiency"], ["memory_efficiency"], ["min_gemm_us"]])
    path = st.one_of(top.map(lambda k: [k]), nested)
    return st.tuples(path, st.one_of(st.just(DELETE), HOSTILE))


def _mutated(path: list[Any], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(SHIPPED)
    parent: Any = doc
    for key in path[:-1]:
        parent = parent[key]
    if value is DELETE:
        if isinstance(parent, dict):
            parent.pop(path[-1], None)
        else:
            del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


@settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(_mutations())
def test_one_key_mutations_give_a_profile_or_one_error_line(mutation: tuple[list[str], Any]) -> None:
    path, value = mutation
    try:
        hw = profile_from_dict(_mutated(path, value), "mutated", "mutated.yaml")
    except ShapelintError as exc:
        message = str(exc)
        assert "\n" not in message and message.startswith("mutated.yaml: ")
        return
    _use(hw)


@pytest.mark.parametrize("key,value,expected", [
    ("sms", 0, "sms must be a positive integer, got 0"),
    ("tiles", [], "tiles must be a non-empty list"),
    ("tiles", [[128, 0]], "tiles[0] must be a positive integer, got 0"),
    ("fp32_tflops", -66.9, "fp32_tflops must be positive, got -66.9"),
    ("tensor_tflops", {"bf16": -989.4}, "tensor_tflops.bf16 must be positive"),
    ("memory_bandwidth_gbps", float("nan"), "memory_bandwidth_gbps must be a number"),
    ("achievable", 1.5, "achievable must be in (0, 1]"),
    ("memory_efficiency", 0, "memory_efficiency must be in (0, 1]"),
    ("alignment_bytes", 12, "alignment_bytes must be a power of two"),
    ("sms", True, "sms must be a positive integer, got True"),
])
def test_bad_profile_values_name_their_key(key: str, value: Any, expected: str) -> None:
    with pytest.raises(ShapelintError, match=None) as info:
        profile_from_dict({**SHIPPED, key: value}, "h200", "p.yaml")
    assert expected in str(info.value)


def test_every_shipped_profile_is_valid() -> None:
    for path in sorted(PROFILE_DIR.glob("[!_]*.yaml")):
        _use(profile_from_dict(yaml.safe_load(path.read_text()), path.stem, str(path)))


@pytest.mark.parametrize("edit", [{"sms": 0}, {"tiles": []}, {"fp32_tflops": -1}, {"tensor_tflops": {"bf16": -5}}])
def test_bad_gpu_profile_through_the_cli(edit: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 13: ``--gpu-profile`` with ``sms: 0`` or empty ``tiles`` was an internal error."""
    monkeypatch.chdir(tmp_path)
    write_model(tmp_path)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({**SHIPPED, **edit}))
    rc, out, err = run(["model.py", "--no-config", "--gpu-profile", "p.yaml"], capsys)
    assert rc == 2 and out == ""
    assert_one_error_line(err)
    assert f"p.yaml: {next(iter(edit))}" in err


def test_the_local_gpu_is_asked_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading the device's name starts CUDA; a worker forked after that cannot start it
    again, so the answer is kept for the process (and its workers) to reuse."""
    import torch

    from shapelint.hardware import registry

    calls: list[int] = []

    def name(*_: object) -> str:
        calls.append(1)
        return "NVIDIA H100 80GB HBM3"

    registry.local_gpu.cache_clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", name)
    try:
        assert registry.local_gpu() is registry.local_gpu() is not None
        assert registry.default_gpu().key == "h100-sxm" and calls == [1]
    finally:
        registry.local_gpu.cache_clear()


@pytest.mark.parametrize("value", [0, 0.5, -1])
def test_a_gain_below_one_is_refused_with_its_key(value: float) -> None:
    """``fused_forward_solo_speedup`` divides a wave's time: 0 would divide by zero in the
    pricer, and below 1 a partial wave would cost more than a full one."""
    doc = {**SHIPPED, "step": {**SHIPPED.get("step", {}), "fused_forward_solo_speedup": value}}
    with pytest.raises(ShapelintError) as info:
        profile_from_dict(doc, "h200", "p.yaml")
    assert f"step.fused_forward_solo_speedup must be at least 1, got {value}" in str(info.value)
    ok = profile_from_dict({**SHIPPED, "step": {**SHIPPED.get("step", {}), "fused_forward_solo_speedup": 1.3}},
                           "h200", "p.yaml")
    assert ok.step.fused_forward_solo_speedup == 1.3
