"""Python targets whose construction reads values (trunc_normal_ samples with
.item(); drop-path rates come from linspace(...).item()) build on fake tensors,
with nothing of the model's size allocated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

from shapelint.app.cli import main
from shapelint.load.fake import REAL_VECTOR_NUMEL
from shapelint.load.run import load

#: whole models, subprocesses or dynamo: the full suite's tier (pytest -m 'not slow' skips them)
pytestmark = pytest.mark.slow

MODELS = Path(__file__).resolve().parent / "models"


def lint(capsys: pytest.CaptureFixture[str], target: Path, *argv: str) -> tuple[int, dict]:
    code = main([str(target), *argv, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_vit_with_trunc_normal_and_linspace_drop_path(capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = lint(capsys, MODELS / "vit_timm_style.py", "--batch", "4")
    assert code in (0, 1)
    gemms = doc["gemms"]
    # per block: MHA in_proj, out_proj, 2 MLP Linear (3 GEMMs each) + 7 attention GEMMs;
    # the head (3); the patch embedding convolution (forward, weight gradient)
    assert len(gemms) == 2 * (4 * 3 + 7) + 3 + 2
    qk = next(g for g in gemms if g["op"] == "sdpa.qk")
    assert (qk["m"], qk["n"], qk["k"], qk["batch"]) == (197, 197, 64, 4 * 3)
    conv = next(g for g in gemms if g["op"] == "convolution")
    assert (conv["m"], conv["n"], conv["k"]) == (4 * 14 * 14, 192, 3 * 16 * 16)


def test_convnext_block_with_depthwise_conv_and_layer_scale(capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = lint(capsys, MODELS / "convnext_style.py", "--batch", "8")
    assert code in (0, 1)
    convs = [g for g in doc["gemms"] if g["op"].startswith("convolution")]
    # the stem (forward, weight gradient) and 3 depthwise convs (forward, input and weight gradients)
    assert len(convs) == 2 + 3 * 3
    dw = next(g for g in convs if g["op"] == "convolution" and g["module"] == "blocks.0.dwconv")
    assert (dw["m"], dw["n"], dw["k"], dw["batch"]) == (8 * 56 * 56, 1, 49, 96)  # one channel per group
    assert len([g for g in doc["gemms"] if g["op"] in ("mm", "addmm")]) == 3 * 2 * 3


def test_nothing_of_the_models_size_is_real() -> None:
    loaded = load(MODELS / "vit_timm_style.py", batch=4)
    assert all(isinstance(p, FakeTensor) for p in loaded.model.parameters())
    assert isinstance(loaded.inputs, FakeTensor)
    real = [t for t in loaded.model.buffers() if not isinstance(t, FakeTensor)]
    assert all(t.numel() <= REAL_VECTOR_NUMEL for t in real)


def test_initialisers_are_restored_after_construction() -> None:
    load(MODELS / "convnext_style.py", batch=1)
    t = torch.empty(256)
    torch.nn.init.trunc_normal_(t, std=1.0, a=-2.0, b=2.0)
    assert t.abs().max() <= 2.0 and t.std() > 0.5
