"""FSDP2's mixed precision (``--fsdp-param-dtype`` / ``--fsdp-reduce-dtype``, issue 27):
``MixedPrecisionPolicy(param_dtype=bf16)`` casts each parameter shard before its
all-gather, so the bytes gathered halve; ``reduce_dtype`` (default: the param dtype, as
FSDP2's) sets the reduce-scatter's. Priced on the probe model of calibrate's parallel
host probe (24 blocks of 132,864 bytes of fp32 parameters, a 512-byte root)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapelint.app.api import lint, lint_target
from shapelint.app.cli import main
from shapelint.errors import ShapelintError
from shapelint.measure.parallel_host_worker import probe_model
from shapelint.price.communication import fsdp_bytes

BLOCK, ROOT, BLOCKS = 132_864, 512, 24


def _fsdp(**policy: str) -> dict[str, tuple[int, int, float]]:
    model, x = probe_model(True)
    t = lint(model, (x,), gpu="h200", fsdp=2, **policy).result.step_time  # type: ignore[arg-type]
    assert t is not None and t.communication is not None
    return {c.op: (c.count, c.nbytes, c.ms) for c in t.communication.collectives}


def test_bf16_parameters_halve_the_all_gathers_and_by_default_the_reduce_scatters() -> None:
    fp32, mixed, bf16 = _fsdp(), _fsdp(fsdp_param_dtype="bf16", fsdp_reduce_dtype="fp32"), \
        _fsdp(fsdp_param_dtype="bf16")
    # the forward gathers every group, the backward every block again; one reduce-scatter a group
    assert fp32["all_gather"][:2] == (2 * BLOCKS + 1, ROOT + 2 * BLOCKS * BLOCK)
    assert fp32["reduce_scatter"][:2] == (BLOCKS + 1, ROOT + BLOCKS * BLOCK)
    assert mixed["all_gather"][:2] == (2 * BLOCKS + 1, (ROOT + 2 * BLOCKS * BLOCK) // 2)
    assert mixed["reduce_scatter"] == fp32["reduce_scatter"]
    assert bf16["reduce_scatter"][:2] == (BLOCKS + 1, (ROOT + BLOCKS * BLOCK) // 2)
    assert mixed["all_gather"][2] <= fp32["all_gather"][2]  # halved bytes, never a slower time


def test_halving_the_bytes_never_prices_a_collective_slower() -> None:
    """The shipped H100 all-gather table is not monotone (16 MiB 102.0 µs, 32 MiB 95.7):
    each size takes the fastest time at or above it, so one slow small size does not price
    the larger ones (review of 2026-11-26)."""
    from shapelint import hardware
    from shapelint.hardware.collectives import interpolate

    table = ((1 << 20, 30.0), (128 << 10 << 4, 124.7), (16 << 20, 102.0), (32 << 20, 95.7), (64 << 20, 180.0))
    table = tuple(sorted(table))
    assert interpolate(table, 16 << 20) == pytest.approx(95.7) and interpolate(table, 24 << 20) == pytest.approx(95.7)
    assert interpolate(table, 32 << 20) == pytest.approx(95.7) and interpolate(table, 48 << 20) > 95.7
    assert interpolate(table, 2 << 20) < 95.7  # the slow 2 MiB point prices nothing above it
    h100 = hardware.resolve("h100").collectives
    assert h100 is not None
    sizes = [1 << k for k in range(16, 32)]
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        times = [h100.us(op, n, 2) for n in sizes]
        assert all(b >= a - 1e-9 for a, b in zip(times, times[1:])), op


def test_fsdp_bytes_follow_the_dtype_table() -> None:
    assert (fsdp_bytes(BLOCK, "fp32"), fsdp_bytes(BLOCK, "bf16"), fsdp_bytes(BLOCK, "fp16")) == (BLOCK, BLOCK // 2,
                                                                                                    BLOCK // 2)


def test_the_policy_is_ignored_without_fsdp_and_needs_a_known_dtype(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, x = probe_model(True)
    # the policy is FSDP's: without FSDP (a project-wide setting at --fsdp 1) it changes nothing
    plain, ignored = (lint(model, (x,), gpu="h200", dp=2, **kw).result.step_time for kw in ({}, {"fsdp_param_dtype": "bf16"}))
    assert plain is not None and ignored is not None and ignored.ms == plain.ms
    with pytest.raises(ShapelintError, match="fsdp_param_dtype=: expected one of fp32, bf16, fp16"):
        lint(model, (x,), gpu="h200", fsdp=2, fsdp_param_dtype="fp8")
    (tmp_path / "m.py").write_text("from torch import nn\n\ndef build():\n    return nn.Linear(64, 64)\n")
    target = tmp_path / "t.yaml"
    target.write_text("model: m.py:build\ninputs:\n  - shape: [8, 64]\n    dtype: float\nfsdp: 2\n"
                      "fsdp_param_dtype: int8\n")
    with pytest.raises(ShapelintError, match="fsdp_param_dtype must be one of fp32, bf16, fp16"):
        lint_target(target, gpu="h200")
    assert main([str(target), "--no-cache", "--fsdp-param-dtype", "bf16x"]) == 2
    assert "invalid choice: 'bf16x'" in capsys.readouterr().err


def test_the_json_layout_and_the_text_summary_name_the_policy(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "m.py").write_text("from torch import nn\n\ndef build():\n"
                                   "    return nn.Sequential(*[nn.Linear(64, 64) for _ in range(4)])\n")
    target = tmp_path / "t.yaml"
    target.write_text("model: m.py:build\ninputs:\n  - shape: [8, 64]\n    dtype: float\nfsdp: 2\n"
                      "fsdp_param_dtype: bf16\n")
    main([str(target), "--no-cache", "--gpu", "h200", "--format", "json", "--fsdp-reduce-dtype", "fp32"])
    layout = json.loads(capsys.readouterr().out)["summary"]["parallel"]
    assert (layout["fsdp_param_dtype"], layout["fsdp_reduce_dtype"]) == ("bf16", "fp32")
    main([str(target), "--no-cache", "--gpu", "h200"])
    assert "FSDP 2 (FSDP bf16 parameters, bf16 gradients): 2 GPUs" in capsys.readouterr().out


@pytest.mark.slow
def test_verify_step_runs_fsdp2_with_the_policy_under_torchrun(tmp_path: Path) -> None:
    """``--verify --step --fsdp 2 --fsdp-param-dtype bf16``: the ranks wrap the blocks with
    ``MixedPrecisionPolicy`` and measure (two gloo ranks on this CPU)."""
    from shapelint import hardware
    from shapelint.check.run import load_rules
    from shapelint.measure.parallel_step import verify_parallel
    from shapelint.measure.step_blocks import Schedule
    from shapelint.pipeline import run as pipeline
    from shapelint.pipeline.result import Options
    from shapelint.price import Policy

    (tmp_path / "blocks.py").write_text(BLOCKS_MODEL)
    (tmp_path / "blocks.yaml").write_text("model: blocks.py:build\ninputs:\n  - shape: [4096, 512]\n    dtype: float\n")
    opts = Options(policy=Policy(min_speedup=1.0, min_loss=0.0, min_step_share=0.0), fsdp=2,
                   fsdp_param_dtype="bf16", fsdp_reduce_dtype="fp32")
    r = pipeline.lint_target(tmp_path / "blocks.yaml", opts, hardware.resolve("h200"), load_rules(()))
    assert r.parallel is not None and r.parallel.layout.fsdp_param_dtype == "bf16" and r.findings
    from shapelint.pipeline.result import result_from_data, result_to_data

    sent = result_from_data(result_to_data(r)).parallel  # what each rank wraps the model by
    assert sent is not None and (sent.layout.fsdp_param_dtype, sent.layout.fsdp_reduce_dtype) == ("bf16", "fp32")
    data = verify_parallel(r, Schedule(2, 2, 1), device="cpu").to_json()
    assert data["status"] == "measured" and data["device"] == "cpu"
    assert data["est_ms"] == pytest.approx(r.step_time.ms, abs=1e-3)  # type: ignore[union-attr]


#: two blocks with a misaligned width (SL101 has something to verify)
BLOCKS_MODEL = """
from torch import nn

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.act, self.down = nn.Linear(512, 2052), nn.GELU(), nn.Linear(2052, 512)

    def forward(self, x):
        return x + self.down(self.act(self.up(x)))

def build():
    return nn.Sequential(*[Block() for _ in range(2)])
"""
