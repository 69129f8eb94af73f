"""SSMs traced as a GPU runs them (issue 26): shapelint's stand-ins for mamba_ssm and
causal_conv1d make transformers take its fused path, one op per kernel and no
per-token GEMM records."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections import Counter
from typing import Any

import pytest
import torch

from shapelint import hardware
from shapelint.capture.precision import to_precision
from shapelint.capture.run import capture
from shapelint.load import ssm_kernels
from shapelint.load.hf_target import load_hf_document
from shapelint.physics.kernels import SCAN_NOTE, kernel_class, scan_note
from shapelint.price.step import Step, step_time

H100 = hardware.resolve("h100")
MAMBA = {"model_type": "mamba", "architectures": ["MambaForCausalLM"], "hidden_size": 64, "state_size": 16,
         "num_hidden_layers": 2, "vocab_size": 256, "expand": 2, "conv_kernel": 4, "time_step_rank": 8}


@pytest.fixture(autouse=True)
def fused_path() -> None:
    """The stand-ins in place before the modeling module is imported (another test of
    this process may have imported it first, with transformers' reference path)."""
    ssm_kernels.install()
    for name in ("transformers.models.mamba.modeling_mamba", "transformers.models.falcon_mamba.modeling_falcon_mamba"):
        module = sys.modules.get(name)
        if module is not None and getattr(module.mamba_inner_fn, "__module__", "") != "shapelint.load.ssm_kernels":
            importlib.reload(module)


def _capture(doc: dict[str, Any], seq: int) -> Any:
    loaded = load_hf_document(doc, "mamba", batch=2, seq=seq)
    with loaded.fake_mode:
        inputs = to_precision(loaded.model, loaded.inputs, "bf16")
        return capture(loaded.model, inputs, precision="bf16", defined_at=loaded.defined_at)


def test_a_mamba_step_records_no_gemm_per_token() -> None:
    short, long = _capture(MAMBA, 32), _capture(MAMBA, 128)
    assert len(short.gemms) == len(long.gemms)
    ops = Counter(op.name for op in long.ops)
    layers = MAMBA["num_hidden_layers"]
    for name in ("selective_scan", "selective_scan_backward", "causal_conv1d", "causal_conv1d_backward"):
        assert ops[name] == layers, name
    # the x projection over every token: (B·L, D) x (D, R + 2N); dt_proj: (D, R) x (R, B·L)
    inner = 2 * 64
    x_proj = [g for g in long.gemms if g.module.endswith("x_proj") or (g.n == 8 + 2 * 16 and g.k == inner)]
    assert any((g.m, g.n, g.k) == (2 * 128, 8 + 2 * 16, inner) for g in x_proj)
    assert any((g.m, g.n, g.k) == (inner, 2 * 128, 8) for g in long.gemms)
    assert scan_note(op.name for op in long.ops) == SCAN_NOTE


def test_the_scan_moves_the_bytes_of_the_cuda_kernel() -> None:
    cap = _capture(MAMBA, 128)
    scan = next(op for op in cap.ops if op.name == "selective_scan")
    batch, inner, length, state = 2, 128, 128, 16
    # reads u, delta, z (bf16), A, D (fp32), B, C (bf16); writes out (bf16), chunk states (fp32)
    reads = 3 * batch * inner * length * 2 + inner * state * 4 + inner * 4 + 2 * batch * state * length * 2
    writes = batch * inner * length * 2 + batch * inner * 1 * 2 * state * 4
    assert scan.bytes == reads + writes
    assert kernel_class("selective_scan") == "reduction" == kernel_class("selective_scan_backward")
    t = step_time(Step(cap.gemms, cap.ops, cap.params), H100)
    assert t.ms < 50  # the reference path's per-token loop was seconds at this size


def test_on_real_tensors_the_stand_ins_run_the_recurrence() -> None:
    """Where a real step runs in the same process (``--verify --step``), the stand-ins
    compute: the reference scan equals the recurrence written out."""
    torch.manual_seed(0)
    b, d, n, length = 2, 3, 4, 5
    u, delta = torch.randn(b, d, length), torch.rand(b, d, length)
    A, B, C, D = -torch.rand(d, n), torch.randn(b, n, length), torch.randn(b, n, length), torch.randn(d)
    y, last = ssm_kernels.selective_scan_fn(u, delta, A, B, C, D, return_last_state=True)
    state = torch.zeros(b, d, n)
    for i in range(length):
        state = torch.exp(delta[:, :, i, None] * A) * state + delta[:, :, i, None] * B[:, None, :, i] * u[:, :, i, None]
    expected = (state * C[:, None, :, -1]).sum(-1) + u[:, :, -1] * D
    assert torch.allclose(y[:, :, -1], expected, atol=1e-5) and torch.allclose(last, state, atol=1e-5)
    x, w = torch.randn(b, d, length), torch.randn(d, 3)
    out = ssm_kernels.causal_conv1d_fn(x, w, None, activation="silu")
    first = torch.nn.functional.silu(x[:, :, 0] * w[:, -1])
    assert torch.allclose(out[:, :, 0], first, atol=1e-6)
    # transformers' availability checks can ask importlib about them
    assert importlib.util.find_spec("mamba_ssm") is not None and importlib.util.find_spec("causal_conv1d") is not None
