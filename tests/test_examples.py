"""Every shipped example: a snapshot of its text report and an assertion of its
findings in JSON. A report that differs from its snapshot fails the test, shows the
difference and is written beside the snapshot as ``NAME.txt.new``: review it, then
``mv`` it over the snapshot if the change is intended."""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path

import pytest

from shapelint.app.cli import main

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = Path(__file__).parent / "snapshots"

#: example -> (exit code, sorted (code, module, parameter, from, to) of its findings)
EXPECTED = {
    "examples/nanogpt.py": (1, [("SL501", "lm_head", "out_features", 50257, 50264)]),
    "examples/mlp.py": (1, [("SL101", "0", "in_features", 1023, 1024)]),
    "examples/mlp.yaml": (1, [("SL101", "2", "out_features", 5461, 5464), ("SL101", "4", "in_features", 5461, 5464)]),
    "examples/convnet.py": (1, [("SL401", "conv1", "out_channels", 60, 64), ("SL401", "conv2", "out_channels", 100, 104)]),
    "examples/gpt2/config.json": (1, [("SL501", "lm_head", "vocab_size", 50257, 50264)]),
    "examples/clean.py": (0, []),
}


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # reports name files relative to the working directory


@pytest.mark.parametrize("target", EXPECTED)
def test_example_findings(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    if target.endswith(".json"):
        pytest.importorskip("transformers")
    code = main([target, "--gpu", "h100", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    found = sorted((f["code"], f["module"], f["suggestion"]["parameter"], f["suggestion"]["from"],
                    f["suggestion"]["to"]) for f in doc["findings"])
    assert (code, found) == EXPECTED[target]
    for f in doc["findings"]:
        assert f["source"]["file"].startswith("examples/") and f["source"]["line"] > 0
        assert f["est_speedup"] > 1.05
    s = doc["summary"]
    assert s["gemm_count"] == s["forward"] + s["backward"] == len(doc["gemms"])
    assert s["est_ms_after"] <= s["est_ms"]


@pytest.mark.parametrize("target", EXPECTED)
def test_example_text_snapshot(target: str, capsys: pytest.CaptureFixture[str]) -> None:
    if target.endswith(".json"):
        pytest.importorskip("transformers")
    main([target, "--gpu", "h100"])
    # a library's line numbers change with its version: the snapshot holds "modeling_gpt2.py:N"
    text = re.sub(r"(library line: \S+?\.py):\d+", r"\1:N", capsys.readouterr().out)
    snap = SNAPSHOTS / (target.replace("examples/", "").replace("/", "_") + ".txt")
    expected = snap.read_text()
    new = snap.with_name(snap.name + ".new")
    if text != expected:
        new.write_text(text)
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), str(snap), str(new)))
        pytest.fail(f"report differs from its snapshot; review {new}:\n{diff}")
    new.unlink(missing_ok=True)
