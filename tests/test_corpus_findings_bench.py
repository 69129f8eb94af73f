"""benchmarks/corpus_findings_gpu.py on the CPU: padding to the alignment rule, which
findings cover a misalignment, and the --tiny smoke run with its --table (timings on
the CPU mean nothing; the GPU run is someone else's, on an H100)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from _benchmarks import load_benchmark
from torch import nn

from shapelint.hardware import resolve
from shapelint.physics.alignment import is_aligned
from shapelint.pipeline.run import trace

#: whole models, subprocesses or dynamo: the full suite's tier (pytest -m 'not slow' skips them)
pytestmark = pytest.mark.slow



def bench_module():
    return load_benchmark("corpus_findings_gpu")


def test_aligned_pads_every_misaligned_leading_dim_and_fixes_tells_who_covers() -> None:
    bench = bench_module()
    hw = resolve("h100")
    cap, _ = trace(lambda: (nn.Linear(64, 1023), torch.randn(4096, 64, requires_grad=True)))
    for g in cap.gemms:
        assert not is_aligned(g, hw)  # 1023 is a leading dimension of the forward and both gradients
        padded = bench.aligned(g, hw)
        assert is_aligned(padded, hw) and 1024 in (padded.m, padded.n, padded.k)
        assert bench.fixes(padded, g, hw) and not bench.fixes(g, g, hw)


def test_tiny_smoke_run_and_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    bench = bench_module()
    out = tmp_path / "r.json"
    # 4 x 512 tokens: the two-layer GPT-2's step is GPU-bound, so padding its vocabulary saves
    # step time and is reported
    monkeypatch.setattr(sys, "argv", ["x", "--device", "cpu", "--tiny", "--batch", "4", "--seq", "512", "--out", str(out),
                                      "gpt2"])
    assert bench.main() == 0
    doc = json.loads(out.read_text())
    (m,) = doc["models"]
    assert m["status"] == "done" and m["step_ms"] > 0
    (vocab,) = [f for f in m["findings"] if f["code"] == "SL501"]
    assert vocab["suggestion"] == {"parameter": "vocab_size", "from": 50257, "to": 50264}
    assert vocab["status"] in ("confirmed", "false alarm") and vocab["measured_speedup"] > 0
    (lm,) = [g for g in m["misalignments"] if g["leading_dims"] == "50257"]
    assert lm["gemms"] == 3 and lm["uncovered_ms"] == 0.0  # SL501's padded shapes align all three
    assert doc["totals"]["findings"] == len(m["findings"])
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["x", "--table", str(out)])
    assert bench.main() == 0
    text = capsys.readouterr().out
    assert "SL501 lm_head" in text and "vocab_size 50257→50264" in text and "precision" in text


def test_real_corpus_targets_are_each_folders_model_py_else_its_config() -> None:
    bench = bench_module()
    found = bench.corpus_targets(bench.CORPORA["real"])
    assert found["timm-efficientnet-b3"].name == "model.py"  # a folder with a model.py lints its model.py
    assert found["mpnet-base"].name == "config.json"
    assert len(found) == 65 and all(p.is_file() for p in found.values())
    tests = bench.corpus_targets(bench.CORPORA["tests"])
    assert len(tests) == 51 and {p.name for p in tests.values()} == {"config.json"}
