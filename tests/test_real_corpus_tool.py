"""benchmarks/real_corpus.py --flops: FlopCounterMode checks shapelint's FLOPs where it
is an independent count, and an SSM traced through shapelint's fused stand-ins
(``shapelint.load.ssm_kernels``) is skipped, with the reason, not counted as equal."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _benchmarks import load_benchmark

MAMBA = {"model_type": "mamba", "architectures": ["MambaForCausalLM"], "hidden_size": 64, "state_size": 16,
         "num_hidden_layers": 2, "vocab_size": 256, "expand": 2, "conv_kernel": 4, "time_step_rank": 8}
GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64, "n_head": 2, "n_layer": 2,
        "n_positions": 1024, "vocab_size": 512}


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    return load_benchmark("real_corpus", "real_corpus_tool")


def config(folder: Path, doc: dict[str, Any]) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(doc, indent=2) + "\n")
    return folder / "config.json"


def test_an_ssm_on_the_fused_stand_ins_is_not_compared(tool: ModuleType, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def no_oracle(_: Path) -> dict[str, Any]:
        raise AssertionError("FlopCounterMode asked about the stand-ins' own ops")

    monkeypatch.setattr(tool, "flop_check", no_oracle)
    row = tool.one(config(tmp_path / "mamba", MAMBA), flops=True)
    assert row["code"] == 0 and row["gemm_count"] > 0
    assert row["flops_equal"] is None and row["flops_skipped"] == tool.SSM_STAND_INS
    line = tool._line({**row, "model": "mamba", "lints": True})
    assert " skip " in line and "equal" not in line


def test_a_transformer_is_compared(tool: ModuleType, tmp_path: Path) -> None:
    row = tool.one(config(tmp_path / "gpt2", GPT2), flops=True)
    assert "flops_skipped" not in row
    assert row["flops_equal"] is True and row["flop_counter"] == row["shapelint_flops"] == row["total_flops"]
