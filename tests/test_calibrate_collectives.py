"""``shapelint calibrate``'s collectives (issue 27): nccl-tests' bus bandwidth, the
measured section written in the format the profile loader reads and used by the
pricer, the flags, and the sweep itself on two gloo ranks of this CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from shapelint import hardware
from shapelint.app.cli import main
from shapelint.errors import ShapelintError
from shapelint.hardware.collectives import OPS, bus_bandwidth_gbps, collectives_doc, parse_collectives
from shapelint.hardware.registry import PROFILE_DIR
from shapelint.measure import calibrate
from shapelint.measure import collectives as coll
from shapelint.measure.collectives import Sample, Sweep, base_collectives, section

H100 = hardware.resolve("h100")
#: the measured table scaled per collective: what a machine twice as slow at all-reduce,
#: three times at all-gather and twice as fast at reduce-scatter would measure
SCALE = {"all_reduce": 2.0, "all_gather": 3.0, "reduce_scatter": 0.5}

MLP = """
from torch import nn

def build():
    return nn.Sequential(nn.Linear(4096, 16384), nn.GELU(), nn.Linear(16384, 4096))
"""


def _scaled_sweep(world: int = 2) -> Sweep:
    assert H100.collectives is not None
    samples = tuple(Sample(op, b, us * SCALE[op], 0.01, world) for op in OPS for b, us in H100.collectives.table(op))
    return Sweep(samples, world, "NVIDIA H100 80GB HBM3", "2.11.0", "2.28.9", "2026-11-26", 50)


def test_bus_bandwidth_is_nccl_tests_definition() -> None:
    gib = 1 << 30
    # the shipped 1 GiB fp32 all-reduce on 2 H100s: 3298.2 µs, algbw = busbw at n = 2 (2(n-1)/n = 1)
    assert bus_bandwidth_gbps("all_reduce", gib, 3298.2, 2) == pytest.approx(gib / 3298.2e-6 / 1e9)
    assert bus_bandwidth_gbps("all_reduce", gib, 3298.2, 2) == pytest.approx(325.55, abs=0.01)
    assert bus_bandwidth_gbps("all_reduce", gib, 3298.2, 8) == pytest.approx(325.55 * 1.75, abs=0.01)
    # all-gather and reduce-scatter: (n-1)/n of the whole array's algbw
    assert bus_bandwidth_gbps("all_gather", gib, 2011.3, 2) == pytest.approx(gib / 2011.3e-6 / 1e9 / 2)
    assert bus_bandwidth_gbps("reduce_scatter", gib, 1000.0, 4) == pytest.approx(gib / 1e-3 / 1e9 * 0.75)
    assert Sample("all_reduce", gib, 3298.2, 0.0, 2).busbw_gbps == pytest.approx(325.55, abs=0.01)
    with pytest.raises(ValueError, match="broadcast"):
        bus_bandwidth_gbps("broadcast", gib, 1.0, 2)


def test_the_shipped_section_round_trips_through_its_yaml_form() -> None:
    assert H100.collectives is not None
    assert parse_collectives(collectives_doc(H100.collectives), "x") == H100.collectives


def test_a_measured_section_keeps_the_samples_and_the_base_unmeasured_values() -> None:
    base = base_collectives(None)  # no base section: the shipped h100-sxm's
    assert base == H100.collectives
    doc = section(_scaled_sweep(world=4), base, "h100-sxm")
    c = parse_collectives(doc, "calibrated.yaml")
    assert c is not None and c.world == 4
    assert c.table("all_reduce")[-1] == (1 << 30, pytest.approx(2 * 3298.2))
    assert c.table("reduce_scatter")[0] == (65536, pytest.approx(0.5 * 59.4))
    assert len(c.table("all_gather")) == 15  # 64 KiB ... 1 GiB
    assert (c.host, c.overlap_slowdown, c.network_busbw_gbps) == (base.host, base.overlap_slowdown, 45.0)
    assert "shapelint calibrate on 4x NVIDIA H100 80GB HBM3, 2026-11-26" in c.source
    assert "host_us: not measured by calibrate, kept from h100-sxm" in c.source


def test_a_section_with_one_collective_keeps_the_base_table_of_the_others() -> None:
    only_ar = Sweep(tuple(s for s in _scaled_sweep().samples if s.op == "all_reduce"), 2, "GPU", "t", "n", "d", 5)
    base = base_collectives(H100.collectives)
    c = parse_collectives(section(only_ar, base, "h100-sxm"), "x")
    assert c is not None
    assert c.table("all_gather") == base.table("all_gather")
    assert c.table("all_reduce")[0][1] == pytest.approx(2 * base.table("all_reduce")[0][1])
    assert "the all_gather, reduce_scatter tables at 2 GPUs: not measured by calibrate" in c.source


def _collectives_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], gpu: list[str], layout: str) -> dict:
    (tmp_path / "mlp.py").write_text(MLP)
    target = tmp_path / "mlp.yaml"
    target.write_text("model: mlp.py:build\ninputs:\n  - shape: [8192, 4096]\n    dtype: float\n")
    main([str(target), "--format", "json", "--no-cache", "--no-config", "--no-isolate", f"--{layout}", "2", *gpu])
    summary = json.loads(capsys.readouterr().out)["targets"][0]
    return {c["op"]: c for c in summary["parallel"]["collectives"]}


@pytest.mark.parametrize("layout,ops", [("dp", ["all_reduce"]), ("fsdp", ["all_gather", "reduce_scatter"])])
def test_a_written_profile_loads_and_the_pricer_uses_its_table(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               layout: str, ops: list[str]) -> None:
    doc = yaml.safe_load((PROFILE_DIR / "h100-sxm.yaml").read_text())
    doc["collectives"] = section(_scaled_sweep(), base_collectives(H100.collectives), "h100-sxm")
    profile = tmp_path / "calibrated.yaml"
    profile.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))  # as calibrate writes it
    assert hardware.load_profile_file(str(profile)).collectives == parse_collectives(doc["collectives"], "x")
    shipped = _collectives_json(tmp_path, capsys, ["--gpu", "h100"], layout)
    calibrated = _collectives_json(tmp_path, capsys, ["--gpu-profile", str(profile)], layout)
    assert sorted(shipped) == sorted(calibrated) == ops
    for op in ops:  # log-log interpolation: a table scaled by s prices every call s times as long
        assert calibrated[op]["count"] == shipped[op]["count"] and calibrated[op]["bytes"] == shipped[op]["bytes"]
        assert calibrated[op]["ms"] == pytest.approx(SCALE[op] * shipped[op]["ms"], rel=1e-3)


def test_one_visible_gpu_skips_the_collectives_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    lines: list[str] = []
    assert coll.collectives_on_this_machine(None, False, lines.append) is None
    assert lines == ["calibrate: 1 GPU visible: skipped collectives (they need 2 or more); the profile keeps its "
                     "base's collectives table"]
    with pytest.raises(ShapelintError, match="collectives need 2 GPUs or more, 1 given"):
        coll.collectives_on_this_machine(None, True, lines.append)
    with pytest.raises(ShapelintError, match="--world-size 4, but 1 GPU"):
        coll.collectives_on_this_machine(4, False, lines.append)


def _fake_gpus(monkeypatch: pytest.MonkeyPatch, count: int, runs: list[int]) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(coll, "measure", lambda world: runs.append(world) or _scaled_sweep(world))
    # the parallel host probe (tests/test_calibrate_parallel_host.py) measures nothing here
    monkeypatch.setattr(calibrate, "probe_engines", lambda world, hw, log: {})


def test_collectives_only_updates_an_existing_profile_and_keeps_the_rest(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[int] = []
    _fake_gpus(monkeypatch, 4, runs)
    doc = yaml.safe_load((PROFILE_DIR / "h200.yaml").read_text())  # collectives: h100-sxm (shared by name)
    doc["measured"]["bf16_tflops"] = 777.7
    out = tmp_path / "mine.yaml"
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    lines: list[str] = []
    done = calibrate.run(str(out), collectives="only", world_size=2, log=lines.append)
    assert runs == [2] and done.collectives is not None and done.collectives.world == 2
    written = yaml.safe_load(out.read_text())
    assert written["measured"]["bf16_tflops"] == 777.7 and written["name"] == "NVIDIA H200 SXM"
    assert written["collectives"]["world"] == 2
    assert written["collectives"]["all_reduce"][-1] == [1 << 30, pytest.approx(2 * 3298.2)]
    assert f"kept from {out}" in written["collectives"]["source"]
    assert done.hardware.collectives == parse_collectives(written["collectives"], "x")
    assert lines[0] == "calibrate: collectives on 2 GPUs (NCCL, torchrun)"
    assert lines[1].startswith("calibrate: collectives: all_reduce 1024 MiB 163 GB/s bus bandwidth, 64 KiB 176 µs")


def test_collectives_only_without_a_profile_starts_from_the_closest_shipped_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[int] = []
    _fake_gpus(monkeypatch, 2, runs)
    out = tmp_path / "new.yaml"
    done = calibrate.run(str(out), collectives="only", log=lambda _m: None)
    assert runs == [2] and done.hardware.name == "NVIDIA H100 SXM5 80GB"
    assert "kept from h100-sxm" in yaml.safe_load(out.read_text())["collectives"]["source"]


def test_collectives_only_refuses_a_profile_that_does_not_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_gpus(monkeypatch, 2, [])
    out = tmp_path / "bad.yaml"
    out.write_text("name: x\n")
    with pytest.raises(ShapelintError, match="bad.yaml"):
        calibrate.run(str(out), collectives="only", log=lambda _m: None)
    assert out.read_text() == "name: x\n"  # untouched


@pytest.mark.parametrize("argv,expected", [
    (["--no-collectives", "--collectives-only"], "not allowed with argument"),
    (["--world-size", "0"], "expected a positive integer"),
    (["--no-collectives"], "calibrate needs a CUDA GPU"),
])
def test_calibrate_flags_are_checked_in_one_line(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["calibrate", *argv, "-o", "/nonexistent/p.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and "\n" not in err


@pytest.mark.slow
def test_the_sweep_runs_on_two_gloo_ranks() -> None:
    """The measurement loop itself, under torchrun: two ranks on this CPU (gloo), 1-4 KiB."""
    sweep = coll.measure(2, device="cpu", min_log2=10, max_log2=12, reps=3, timeout_s=300)
    assert (sweep.world, sweep.gpu, sweep.reps) == (2, "CPU (gloo)", 3)
    assert [(s.op, s.nbytes) for s in sweep.samples] == [(op, b) for op in OPS for b in (1024, 2048, 4096)]
    assert all(s.us > 0 and s.world == 2 for s in sweep.samples)
    c = parse_collectives(section(sweep, base_collectives(None), "h100-sxm"), "x")
    # a size reads the fastest measured time at or above it (hardware.collectives.interpolate)
    reduce_at_or_above = [s.us for s in sweep.samples if s.op == "all_reduce" and s.nbytes >= 2048]
    assert c is not None and c.us("all_reduce", 2048, 2) == pytest.approx(min(reduce_at_or_above))


@pytest.mark.parametrize("gpus,which,measured", [(2, "measure", True), (1, "measure", False), (2, "skip", False)])
def test_a_full_calibration_adds_the_collectives_where_it_measured_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpus: int, which: str, measured: bool) -> None:
    from shapelint.measure.timer import wall_timer

    runs: list[int] = []
    _fake_gpus(monkeypatch, gpus, runs)
    monkeypatch.setattr(calibrate, "_calibrated", lambda name, timer: calibrate.closest_base(name))  # no GPU here
    out = tmp_path / "p.yaml"
    lines: list[str] = []
    done = calibrate.run(str(out), timer=wall_timer(), collectives=which, log=lines.append)
    source = yaml.safe_load(out.read_text())["collectives"]["source"]
    assert (runs == [gpus]) is measured and (done.collectives is not None) is measured
    assert ("shapelint calibrate on 2x NVIDIA H100 80GB HBM3" in source) is measured
    assert done.hardware.collectives == (parse_collectives(section(_scaled_sweep(), H100.collectives, "h100-sxm"), "x")
                                         if measured else H100.collectives)
    assert any("skipped collectives" in line for line in lines) is (gpus == 1)


@pytest.mark.parametrize("gpus", [2, 1])
def test_a_measured_host_speed_scales_the_engines_host_costs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             gpus: int) -> None:
    """calibrate scales the step's host costs by this host's measured speed; the parallel
    engines' host costs scale with them, measured collectives or not."""
    from shapelint.measure.timer import wall_timer

    def slow_host(name: str, timer: object) -> dict:
        doc = calibrate.closest_base(name)
        doc["step"] = {"host_us_per_kernel": round(H100.step.host_us_per_kernel * 1.5, 2)}
        return doc

    runs: list[int] = []
    _fake_gpus(monkeypatch, gpus, runs)
    monkeypatch.setattr(calibrate, "_calibrated", slow_host)
    out = tmp_path / "p.yaml"
    done = calibrate.run(str(out), timer=wall_timer(), log=lambda _m: None)
    c, shipped = done.hardware.collectives, H100.collectives
    assert c is not None and shipped is not None
    assert c.host.fsdp_group == pytest.approx(1.5 * shipped.host.fsdp_group, rel=1e-3)  # 4400 µs -> 6600
    assert c.host.tp_collective == pytest.approx(1.5 * shipped.host.tp_collective, rel=1e-3)
    assert "host_us: h100-sxm's scaled by 1.500" in c.source
    measured = gpus > 1
    assert (c.table("all_reduce") == shipped.table("all_reduce")) is not measured
    assert "host_us: not measured" not in c.source


def _alive(pid: int) -> bool:
    """A process that runs (a zombie, killed but not yet reaped by its new parent, does not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_ranks_past_the_timeout_are_killed_with_their_launcher(tmp_path: Path) -> None:
    """What calibrate's collectives and --verify --step rely on: a rank stuck in a
    collective dies with the launcher, and the caller gets one error line."""
    import sys
    import time

    from shapelint.measure.torchrun import run_ranks

    pid_file = tmp_path / "rank.pid"
    rank = "import time; time.sleep(120)"
    launcher = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', {rank!r}]); "
                f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(120)")
    start = time.monotonic()
    with pytest.raises(ShapelintError, match=r"^calibrate: collectives on 2 ranks under torchrun ran past 2 s; stopped it$"):
        run_ranks([sys.executable, "-c", launcher], 2, "calibrate: collectives on 2 ranks")
    assert time.monotonic() - start < 30
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)
