"""The three target conventions: model.py, config.json, shapelint YAML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapelint.app.cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run(capsys, *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_python_target_with_batch_argument(capsys) -> None:
    code, doc = run(capsys, str(EXAMPLES / "mlp.py"), "--batch", "128")
    s = doc["summary"]
    assert (s["gemm_count"], s["forward"], s["backward"], s["tokens"]) == (11, 4, 7, 128)
    first = next(g for g in doc["gemms"] if g["module"] == "0" and g["phase"] == "forward")
    assert (first["m"], first["n"], first["k"], first["dtype"]) == (128, 4096, 1023, "bf16")
    assert first["source"]["file"].endswith("examples/mlp.py")
    assert s["total_flops"] == sum(g["flops"] for g in doc["gemms"])
    assert code == 1  # in_features 1023


def test_python_target_plain_convention(tmp_path: Path, capsys) -> None:
    model = tmp_path / "model.py"
    model.write_text(
        "import torch, torch.nn as nn\n"
        "def shapelint_model():\n"
        "    return nn.Linear(64, 32), {'input': torch.randn(16, 64)}\n"
    )
    code, doc = run(capsys, str(model))
    assert code == 0
    assert [(g["phase"], g["m"], g["n"], g["k"]) for g in doc["gemms"]] == [
        ("forward", 16, 32, 64), ("grad_weight", 32, 64, 16)]


def test_yaml_target(capsys) -> None:
    code, doc = run(capsys, str(EXAMPLES / "mlp.yaml"))
    s = doc["summary"]
    assert (s["gpu"], s["dtype"], s["gemm_count"], s["tokens"]) == ("h100-sxm", "bf16", 8, 8192)
    sl101 = sorted((x["module"], x["suggestion"]["parameter"], x["suggestion"]["from"], x["suggestion"]["to"])
                   for x in doc["findings"] if x["code"] == "SL101")
    # the 5461-wide hidden layer is the output of Linear 2 and the input of Linear 4 (ReLUs between)
    assert sl101 == [("2", "out_features", 5461, 5464), ("4", "in_features", 5461, 5464)]
    assert code == 1


def test_yaml_flags_override_file_settings(capsys) -> None:
    _, doc = run(capsys, str(EXAMPLES / "mlp.yaml"), "--gpu", "a100", "--dtype", "fp16", "--inference")
    s = doc["summary"]
    assert (s["gpu"], s["dtype"], s["training"], s["gemm_count"]) == ("a100-80gb", "fp16", False, 3)


def test_hf_config_target_defaults(capsys) -> None:
    pytest.importorskip("transformers")
    code, doc = run(capsys, str(EXAMPLES / "gpt2"), "--batch", "2", "--seq", "128")
    s = doc["summary"]
    assert s["tokens"] == 256
    lm = [g for g in doc["gemms"] if g["module"] == "lm_head"]
    assert {(g["m"], g["n"], g["k"]) for g in lm if g["phase"] == "forward"} == {(256, 50257, 768)}


def test_directory_of_configs_lints_each(tmp_path: Path, capsys) -> None:
    pytest.importorskip("transformers")
    for name, vocab in (("a", 32000), ("b", 32001)):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps({
            "model_type": "gpt2", "n_layer": 1, "n_embd": 256, "n_head": 4, "vocab_size": vocab,
            "n_positions": 1024, "bos_token_id": 0, "eos_token_id": 0}, indent=2))
    # 8 x 1024 tokens: a GPU-bound step, on which padding b's vocabulary saves time
    code, doc = run(capsys, str(tmp_path), "--batch", "8", "--seq", "1024")
    assert [t["target"].rsplit("/", 2)[-2] for t in doc["targets"]] == ["a", "b"]
    flagged = {f["target"].rsplit("/", 2)[-2]: f["suggestion"] for f in doc["findings"]}
    assert flagged == {"b": {"parameter": "vocab_size", "from": 32001, "to": 32008}}
    assert code == 1
