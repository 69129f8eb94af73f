"""A host read inside a replayed layer (``shapelint.capture.replay``): an eager step
waits for the GPU at it in every layer, so a layer traced once and copied for the rest
carries its reads with it, and the step is priced with one host sync per layer."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import shapelint
from shapelint.capture.replay.stats import STATS
from shapelint.capture.run import Capture
from shapelint.pipeline.run import trace

LAYERS = 6


class Block(nn.Module):
    """A residual layer that checks its input first, as library code does."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.isnan(x).any():  # a healthy step: no NaN (a host read: the step waits here)
            raise ValueError("NaN in the input")
        return x + self.fc(x)


class Stack(nn.Module):
    def __init__(self, layers: int = LAYERS) -> None:
        super().__init__()
        self.inp = nn.Linear(64, 64)
        self.blocks = nn.ModuleList(Block() for _ in range(layers))
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def build() -> tuple[nn.Module, Any]:
    return Stack(), torch.randn(32, 64)


def captured(replay: bool, monkeypatch: Any) -> Capture:
    import shapelint.capture.run as run

    original = run.capture

    def with_replay(*args: Any, **kwargs: Any) -> Capture:
        return original(*args, **{**kwargs, "replay": replay})

    monkeypatch.setattr("shapelint.pipeline.run.capture", with_replay)
    cap, _ = trace(build, precision="fp32")
    return cap


def test_each_replayed_layer_carries_its_host_read(monkeypatch: Any) -> None:
    full = captured(False, monkeypatch)
    assert len(full.syncs) == LAYERS  # traced layer by layer: one wait per layer
    replayed = captured(True, monkeypatch)
    assert STATS.replayed == LAYERS - 2 and STATS.fell_back == ""  # layers 3..6 copied
    assert len(replayed.ops) == len(full.ops)
    assert replayed.syncs == full.syncs  # at the same places of the op stream
    assert len(replayed.host_reads) == 1  # the report lists the line once


def test_the_step_is_priced_with_one_host_sync_per_layer() -> None:
    report = shapelint.lint(*build(), dtype="fp32")
    summary = report.to_json(gemms=False)["summary"]
    assert summary["step"]["host_syncs"] == LAYERS
    assert [r["source"] for r in summary["host_reads"]] == [
        "if torch.isnan(x).any():  # a healthy step: no NaN (a host read: the step waits here)"]
