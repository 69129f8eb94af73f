"""A change's side costs run where the step runs them (``shapelint.price.step.side_at``):
a padded vocabulary's slice-back next to the output layer, not after the host has issued
the whole step (issue 26: priced at the end, Whisper-small's padding was 0.68 ms slower
on its host-bound step and was dropped; on the GPU its head measured 5.5% of the step)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shapelint import hardware
from shapelint.check import run as check
from shapelint.pipeline.result import Options
from shapelint.pipeline.run import lint_target
from shapelint.price import Policy
from shapelint.price.step import side_at, side_ms, step_time

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def whisper():  # type: ignore[no-untyped-def]
    config = ROOT / "tests" / "corpus" / "whisper-small" / "config.json"
    rules = check.select_rules(check.load_rules(), ["SL501"], [])
    return lint_target(config, Options(policy=Policy()), hardware.resolve("h100"), rules)


def test_the_slice_back_is_placed_at_the_output_layer(whisper) -> None:  # type: ignore[no-untyped-def]
    (f,) = whisper.findings
    step, hw = whisper.step_model.step, whisper.hardware
    at = side_at(step, [(s, f.gemms) for s in f.slices], hw, "eager")
    (pos,) = at
    assert f.gemms[0] in step.ops[pos].gemms and step.ops[pos].owner == "proj_out"
    # 3584 x 51865 bf16 logits: a strided read, the padded gradient's fill and the copy-in
    assert at[pos] == pytest.approx(side_ms(f.slices, hw, "eager", True)) and at[pos] > 0.5


def test_at_the_output_layer_it_hides_where_the_host_bounds_the_step(whisper) -> None:  # type: ignore[no-untyped-def]
    (f,) = whisper.findings
    step, hw = whisper.step_model.step, whisper.hardware
    times = dict(zip(f.gemms, f.gemm_ms_after))
    before = step_time(step, hw)
    placed = step_time(step, hw, gemm_times=times, extra_at=side_at(step, [(s, f.gemms) for s in f.slices], hw, "eager"))
    at_end = step_time(step, hw, gemm_times=times, extra_ms=side_ms(f.slices, hw, "eager", True))
    assert before.bound == "host" and placed.gpu_ms == pytest.approx(at_end.gpu_ms)
    assert placed.ms == pytest.approx(before.ms, abs=1e-9)  # hidden, as the GEMM time saved
    assert at_end.ms - before.ms == pytest.approx(0.68, abs=0.01)  # what issue 24 priced
    assert before.gpu_ms - placed.gpu_ms == pytest.approx(5.21, abs=0.01)
