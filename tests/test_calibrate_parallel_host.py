"""``shapelint calibrate``'s parallel host probe (issue 27): each engine's host speed read
off what it adds to the probe's one-GPU step, against the pricer's own terms for the
same model and layout, and written into the profile's ``host_us`` per engine."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from shapelint import hardware
from shapelint.hardware.collectives import ENGINE_HOST_KEYS, HOST_KEYS, host_costs_by_engine
from shapelint.measure import calibrate
from shapelint.measure import collectives as coll
from shapelint.measure.parallel_host import EngineSpeed, engine_speeds, measure, modelled

H200 = hardware.resolve("h200")
#: the probe's counts (24 blocks: norm, up_proj, down_proj; a final norm): 146 trained
#: tensors with the biases, 25 FSDP2 groups (24 blocks and the root), 48 sharded layers,
#: 96 DTensor parameters and 48 activation all-reduces (one per block each way)
TENSORS, GROUPS, LAYERS, PARAMETERS, COLLECTIVES = 146, 25, 48, 96, 48


def _shipped() -> dict[str, float]:
    assert H200.collectives is not None
    return {k: getattr(H200.collectives.host, k) for k in HOST_KEYS}


def test_the_pricer_counts_the_probes_engine_work_term_by_term() -> None:
    h = _shipped()
    assert modelled("bias", "ddp", 2, H200)[1] == pytest.approx(TENSORS * h["ddp_tensor"] * 1e-3)
    assert modelled("bias", "fsdp", 2, H200)[1] == pytest.approx(
        (GROUPS * h["fsdp_group"] + TENSORS * h["fsdp_tensor"]) * 1e-3)
    assert modelled("bias", "tp", 2, H200)[1] == pytest.approx(
        (LAYERS * h["tp_layer"] + PARAMETERS * h["tp_parameter"] + COLLECTIVES * h["tp_collective"]) * 1e-3)
    # without the linear layers' biases: 48 fewer tensors and DTensor parameters, the same groups
    assert modelled("nobias", "fsdp", 2, H200)[1] == pytest.approx(
        (GROUPS * h["fsdp_group"] + (TENSORS - 48) * h["fsdp_tensor"]) * 1e-3)
    assert modelled("nobias", "tp", 2, H200)[1] == pytest.approx(
        (LAYERS * h["tp_layer"] + (PARAMETERS - 48) * h["tp_parameter"] + COLLECTIVES * h["tp_collective"]) * 1e-3)


def _steps(speeds: dict[str, float], one_gpu: dict[str, float]) -> dict:
    """What a host whose engines run ``speeds`` times the typical host's would measure,
    its one-GPU steps ``one_gpu`` ms (its own speed, which cancels)."""
    steps = []
    for variant, none in one_gpu.items():
        steps.append({"variant": variant, "layout": "none", "ms": none})
        for engine, speed in speeds.items():
            host, engine_ms = modelled(variant, engine, 2, H200)
            other = host - engine_ms - modelled(variant, "none", 2, H200)[0]
            steps.append({"variant": variant, "layout": engine, "ms": none + other + speed * engine_ms})
    return {"world": 2, "steps": steps}


def test_each_engines_speed_is_read_off_what_it_adds_to_the_one_gpu_step() -> None:
    found = engine_speeds(_steps({"ddp": 0.6, "fsdp": 0.8, "tp": 1.3}, {"bias": 41.0, "nobias": 37.5}), H200)
    assert {e: s.speed for e, s in found.items()} == {"ddp": 0.6, "fsdp": 0.8, "tp": 1.3}
    h = _shipped()
    fsdp_ms = (2 * GROUPS * h["fsdp_group"] + (2 * TENSORS - 48) * h["fsdp_tensor"]) * 1e-3  # both variants
    assert found["fsdp"].modelled_ms == pytest.approx(fsdp_ms, abs=0.01)
    assert found["fsdp"].measured_ms == pytest.approx(0.8 * fsdp_ms, abs=0.01)


def test_a_speed_outside_the_bounds_is_left_out_in_one_line() -> None:
    lines: list[str] = []
    found = engine_speeds(_steps({"ddp": 9.0, "tp": 1.1}, {"bias": 40.0}), H200, lines.append)
    assert set(found) == {"tp"} and found["tp"].speed == 1.1
    assert len(lines) == 2 and "ddp added" in lines[0] and "outside (0.2, 5.0)" in lines[0]


def test_host_costs_scale_per_engine_and_unmeasured_engines_at_the_default() -> None:
    h = _shipped()
    got = host_costs_by_engine(h, {"fsdp": 0.5, "tp": 2.0}, default=1.25)
    assert list(got) == list(HOST_KEYS)
    assert got["ddp_tensor"] == round(h["ddp_tensor"] * 1.25, 1)
    assert (got["fsdp_group"], got["fsdp_tensor"]) == (round(h["fsdp_group"] * 0.5, 1), round(h["fsdp_tensor"] * 0.5, 1))
    assert all(got[k] == round(h[k] * 2.0, 1) for k in ENGINE_HOST_KEYS["tp"])
    with pytest.raises(ValueError, match="unknown engine"):
        host_costs_by_engine(h, {"pp": 1.0})


def test_calibrate_writes_the_probes_engine_speeds_into_host_us(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On two GPUs the engines the probe measured take its speeds; DDP, not measured
    here, the one-GPU probe's (1.5); the profile loads back with those costs."""
    import torch

    from shapelint.measure.timer import wall_timer

    def slow_host(name: str, timer: object) -> dict:
        doc = calibrate.closest_base(name)
        doc["step"] = {"host_us_per_kernel": round(H200.step.host_us_per_kernel * 1.5, 2)}
        return doc

    probed: list[int] = []

    def probe(world: int, hw: hardware.Hardware, log: object) -> dict[str, EngineSpeed]:
        probed.append(world)
        assert hw.collectives is not None and hw.collectives.host == H200.collectives.host  # type: ignore[union-attr]
        return {"fsdp": EngineSpeed("fsdp", 0.7, 70.0, 100.0), "tp": EngineSpeed("tp", 1.2, 120.0, 100.0)}

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    sample = coll.Sample("all_reduce", 1 << 20, 50.0, 0.01, 2)
    monkeypatch.setattr(coll, "measure", lambda world: coll.Sweep((sample,), world, "NVIDIA H200", "2.11", "2.28", "d", 1))
    monkeypatch.setattr(calibrate, "_calibrated", slow_host)
    monkeypatch.setattr(calibrate, "probe_engines", probe)
    out = tmp_path / "p.yaml"
    done = calibrate.run(str(out), timer=wall_timer(), log=lambda _m: None)
    h, c = _shipped(), done.hardware.collectives
    assert probed == [2] and c is not None and set(done.engines) == {"fsdp", "tp"}
    assert c.host.ddp_tensor == pytest.approx(1.5 * h["ddp_tensor"], abs=0.1)
    assert c.host.fsdp_group == pytest.approx(0.7 * h["fsdp_group"], abs=0.1)
    assert c.host.tp_collective == pytest.approx(1.2 * h["tp_collective"], abs=0.1)
    source = yaml.safe_load(out.read_text())["collectives"]["source"]
    assert "parallel host probe (fsdp 0.700, tp 1.200)" in source and "host_us of ddp: h200's scaled by 1.500" in source


@pytest.mark.slow
def test_the_probe_runs_on_two_gloo_ranks() -> None:
    """The probe itself, under torchrun: two ranks on this CPU (gloo), one round of one step."""
    found = measure(2, device="cpu", rounds=1, steps=1)
    assert found["world"] == 2 and found["gpu"] == "CPU (gloo)"
    assert [(s["variant"], s["layout"]) for s in found["steps"]] == [
        (v, layout) for v in ("bias", "nobias") for layout in ("none", "ddp", "fsdp", "tp")]
    assert all(s["ms"] > 0 for s in found["steps"])


def test_the_round_by_round_difference_wins_over_the_medians_difference() -> None:
    """The worker's ``added_ms`` (each round's layout minus the one-GPU step timed just
    before it) is what the speed is read from: the one-GPU step's own drift cancels."""
    found = _steps({"tp": 1.0}, {"bias": 40.0})
    engine_ms = modelled("bias", "tp", 2, H200)[1]
    for s in found["steps"]:
        if s["layout"] == "tp":
            s["ms"] += 30.0  # the medians say 30 ms more ...
            s["added_ms"] = 0.5 * engine_ms  # ... the rounds say half the modelled engine work
    assert engine_speeds(found, H200)["tp"].speed == pytest.approx(0.5, abs=1e-3)
