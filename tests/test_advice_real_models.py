"""Issue 26's "Advice" list on the real models it was found on (benchmarks/real_corpus/,
full published configs): no window or sequence size offered as a knob (SAM-ViT-H's 14-wide
windows: "size: 14 → 16"), no SSD chunk count read as tokens (Mamba2: "memory-bound at 5
tokens per step", 109.7x). Unit tests pin each mechanism (tests/test_knobs.py,
tests/test_rule_sl201.py); these pin the models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _cli_helpers import run

from shapelint.locate.knobs import SEQUENCE_LIKE

pytestmark = pytest.mark.slow
REAL = Path(__file__).resolve().parent.parent / "benchmarks" / "real_corpus"


def _findings(name: str, capsys: pytest.CaptureFixture[str]) -> list[dict]:  # type: ignore[type-arg]
    pytest.importorskip("transformers")
    rc, out, err = run([str(REAL / name / "config.json"), "--format", "json", "--no-cache", "--no-config"], capsys)
    assert rc in (0, 1), err
    return json.loads(out)["findings"]


def test_sam_windows_are_not_offered_as_a_knob(capsys: pytest.CaptureFixture[str]) -> None:
    fs = _findings("sam-vit-huge", capsys)
    assert [f["code"] for f in fs] == ["SL402"]  # its NCHW convolutions, nothing about windows
    for f in fs:
        s = f["suggestion"]
        assert not SEQUENCE_LIKE.search(s["parameter"]) and s["from"] != 14


def test_mamba2_chunks_are_not_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    fs = _findings("mamba2-130m", capsys)
    assert [f for f in fs if f["code"] == "SL201"] == []
    assert all("tokens per step" not in f["message"] for f in fs)
