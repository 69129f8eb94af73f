"""The reporting policy (``shapelint.price.Policy``): no finding that saves nothing is
reported, and severity follows the saving: an ``error`` needs 1.25x on the covered work
and a step the change does not make slower (issue 24: Whisper-small's vocabulary
padding was an error with a step estimate 0.68 ms slower)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _cli_helpers import run

import shapelint
from shapelint.price import Policy

ROOT = Path(__file__).resolve().parent.parent


def test_covered_work_must_get_faster_whatever_the_thresholds() -> None:
    loose = Policy(min_loss=0.0, min_speedup=1.0)
    assert not loose.worth(1.0, 1.0)  # equal: nothing saved
    assert not loose.worth(1.0, 1.2) and not loose.worth(0.0, 0.0)
    assert loose.worth(1.0, 0.99)
    assert Policy().worth(1.0, 0.95) and not Policy().worth(1.0, 0.96)  # the 5% default


def test_the_step_saving_must_be_positive_even_at_a_zero_share() -> None:
    assert not Policy(min_step_share=0.0).worth_on_step(0.0, 40.0)
    assert not Policy(min_step_share=0.0).worth_on_step(-0.5, 40.0)
    assert Policy(min_step_share=0.0).worth_on_step(0.001, 40.0)
    assert Policy().worth_on_step(0.4, 40.0) and not Policy().worth_on_step(0.39, 40.0)  # 1% of the step


def test_severity_follows_the_saving() -> None:
    p = Policy()
    assert [p.severity("error", s) for s in (1.25, 1.2499, 6.0)] == ["error", "warning", "error"]
    assert p.severity("warning", 6.0) == "warning" and p.severity("info", 6.0) == "info"
    # on the step: slower is a warning; unchanged (a host-bound step, judged on its GPU
    # time) or not priced on a step (a gain in throughput) stays an error
    assert [p.severity_on_step("error", s) for s in (-0.6836, -1e-6, -1e-12, 0.0, 0.76, None)] == [
        "warning", "warning", "error", "error", "error", "error"]
    assert p.severity_on_step("warning", 5.0) == "warning"


def _lint(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code, out, err = run([*argv, "--format", "json", "--no-config", "--no-cache"], capsys)
    assert code == 1, err
    return json.loads(out)


def test_whisper_vocabulary_padding_slows_the_host_bound_step_so_it_is_a_warning(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The case the issue reported: padding Whisper-small's 51865-token head to 51872
    makes its GEMMs 6.07x faster and saves 5.21 ms of GPU time, but the step (host-bound,
    with a host sync) gains nothing there and pays the slice-back of the padded logits."""
    doc = _lint(capsys, str(ROOT / "tests" / "corpus" / "whisper-small" / "config.json"))
    (f,) = doc["findings"]
    assert (f["code"], f["module"], f["suggestion"]) == (
        "SL501", "proj_out", {"parameter": "vocab_size", "from": 51865, "to": 51872})
    assert f["est_speedup"] == pytest.approx(6.0749, abs=1e-3)
    assert (f["est_ms"], f["est_ms_after"]) == pytest.approx((7.0582, 1.1619), abs=1e-3)
    s = doc["summary"]
    assert (s["step"]["bound"], s["step"]["host_syncs"]) == ("host", 1)
    assert (s["step_ms"], s["step_ms_after"]) == pytest.approx((108.7286, 109.4123), abs=1e-3)
    assert f["step_ms_saved"] == pytest.approx(-0.6836, abs=1e-3)
    assert f["severity"] == "warning"  # was "error"
    assert "this saves 5.21 ms of GPU time" in f["step_note"]
    assert f["step_note"].endswith("; until then slicing the padded tensor back costs the step more than it saves "
                                   "(est. 0.68 ms slower)")


def test_a_small_gpt2_head_is_a_warning_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same on a one-layer GPT-2 (vocabulary 32001, 2 x 512 tokens): 2.42x on the
    head's GEMMs, 0.14 ms of GPU time, the step 0.06 ms slower."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_layer": 1, "n_embd": 256, "n_head": 4,
                                  "vocab_size": 32001, "n_positions": 512, "bos_token_id": 0, "eos_token_id": 0}))
    (f,) = _lint(capsys, str(config), "--batch", "2", "--seq", "512")["findings"]
    assert (f["code"], f["suggestion"]["to"], f["severity"]) == ("SL501", 32008, "warning")
    assert f["est_speedup"] == pytest.approx(2.4155, abs=1e-3)
    assert f["step_ms_saved"] == pytest.approx(-0.0622, abs=1e-3)
    assert "this saves 0.14 ms of GPU time" in f["step_note"] and f["step_note"].endswith("(est. 0.06 ms slower)")


def test_a_finding_that_speeds_up_the_step_stays_an_error() -> None:
    (f,) = shapelint.lint(torch.nn.Linear(1023, 4096), torch.randn(8192, 1023), select=["SL101"]).findings
    assert (f.severity, str(f.suggestion)) == ("error", "in_features: 1023 → 1024")
    assert f.step_ms_saved == pytest.approx(0.757, abs=1e-3) and f.est_speedup == pytest.approx(5.553, abs=1e-3)
    assert "slower" not in f.step_note
