"""The JSON summary of several targets carries the parallel keys one target's has:
``world_size``, ``comm_ms`` and ``step_ms_per_gpu`` (summed as the steps are) and every
target's ``host_reads``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapelint.app.cli import main

MODEL = """import torch
from torch import nn


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear({width}, 4096), nn.Linear(4096, {width})

    def forward(self, x):
        if not torch.isfinite(x).all():  # a host read the trace answers
            x = x.clamp(-1, 1)
        return self.down(torch.nn.functional.gelu(self.up(x)))


def shapelint_model():
    return M(), torch.randn(4096, {width})
"""


def test_several_targets_sum_their_communication(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.py").write_text(MODEL.format(width=1024))
    (tmp_path / "b.py").write_text(MODEL.format(width=2048))
    main([str(tmp_path / "a.py"), str(tmp_path / "b.py"), "--no-config", "--no-cache", "--format", "json",
          "--no-gemms", "--dp", "4"])
    doc = json.loads(capsys.readouterr().out)
    per, total = doc["targets"], doc["summary"]
    assert [t["world_size"] for t in per] == [4, 4] and total["world_size"] == 4
    assert all(t["comm_ms"] > 0 for t in per)
    assert total["comm_ms"] == pytest.approx(sum(t["comm_ms"] for t in per), abs=1e-4)
    assert total["step_ms_per_gpu"] == pytest.approx(sum(t["step_ms_per_gpu"] for t in per), abs=1e-4)
    assert [len(t["host_reads"]) for t in per] == [1, 1]
    assert total["host_reads"] == [{**read, "target": t["target"]} for t in per for read in t["host_reads"]]
    assert [(r["target"], r["line"], r["answer"]) for r in total["host_reads"]] == [
        (str(tmp_path / "a.py"), 11, "True"), (str(tmp_path / "b.py"), 11, "True")]
