"""SL302 materialized-attention: softmax(q @ kᵀ) @ v written by hand."""

from __future__ import annotations

import pytest
import torch
from _rules import run_rule
from shapelint.rules import sl302_materialized_attention as sl302
from torch import nn

from shapelint.check.rule_api import RuleContext
from shapelint.hardware import resolve
from shapelint.model.records import Work
from shapelint.physics.attention import softmax_traffic_bytes
from shapelint.pipeline.run import trace
from shapelint.price.gemm import total_ms, work_ms

H100 = resolve("h100")


def run(build, dtype: str = "bf16", training: bool = True):
    cap, _ = trace(build, precision=dtype, training=training)
    return cap, list(run_rule(sl302, cap.gemms, H100, RuleContext(precision=dtype, training=training)))


def manual(dim: int = 512, heads: int = 8, batch: int = 8, seq: int = 1024, fused: bool = False):
    return lambda: (nn.Sequential(sl302.ManualAttention(dim, heads, fused=fused)), torch.randn(batch, seq, dim))


def test_hand_written_attention_is_replaced_by_the_fused_kernel() -> None:
    cap, fs = run(manual())
    (f,) = fs
    assert (f.code, f.name, f.module) == ("SL302", "materialized-attention", "0")
    assert f.suggestion.to_json() == {"parameter": "attention", "from": "matmul-softmax-matmul",
                                      "to": "F.scaled_dot_product_attention"}
    by = {g.index: g for g in cap.gemms}
    covered = [by[i] for i in f.gemms]
    assert [g.op for g in covered[:2]] == ["bmm", "bmm"] and covered[1].role == "after_softmax"
    assert (covered[0].m, covered[0].n, covered[0].k, covered[0].batch) == (1024, 1024, 64, 64)  # QKᵀ
    assert (covered[1].m, covered[1].n, covered[1].k) == (1024, 64, 1024)  # PV
    assert len(covered) == 6 and all(g.phase == "grad_input" for g in covered[2:])
    assert (f.fact("seq_q"), f.fact("seq_k"), f.fact("head_dim")) == (1024, 1024, 64)
    assert f.fact("score_bytes") == 64 * 1024 * 1024 * 2
    assert f.fact("score_passes") == 2 + 2 + 3 + 4
    # after: SDPA's GEMMs with the scores on chip, one of them standing for the fused backward
    assert [a.op for a in f.after[:2]] == ["sdpa.qk", "sdpa.pv"]
    assert [a.op for a in f.after].count("sdpa.qk_recompute") == 1
    assert not f.after[0].out.in_memory and not f.after[1].a.in_memory
    assert {a.role for a in f.after} == {"attn_scores", "attn_values"}
    assert all(any(not op.in_memory for op in (a.a, a.b, a.out)) for a in f.after)
    # before: the recorded GEMMs plus the softmax passes; after: fused GEMMs plus the recompute
    softmax = 1e3 * softmax_traffic_bytes(64 * 1024 * 1024, 2, True) / H100.bandwidth
    assert f.fact("softmax_bytes") == softmax_traffic_bytes(64 * 1024 * 1024, 2, True)
    assert abs(f.est_ms - (total_ms(covered, H100) + softmax)) < 1e-9
    assert abs(f.est_ms_after - sum(f.gemm_ms_after)) < 1e-12
    assert len(f.gemm_ms_after) == 6
    assert abs(f.est_ms_after - total_ms([*f.after, f.after[0]], H100)) < 1e-9
    assert 3.0 < f.est_speedup < 8.0  # measured 3.2x (no mask) to 8.5x (masked) on an H200


def test_softmax_traffic_is_five_passes_at_copy_bandwidth() -> None:
    assert softmax_traffic_bytes(1 << 20, 2, True) == (1 << 20) * 2 * 5
    assert softmax_traffic_bytes(1 << 20, 2, False) == (1 << 20) * 2 * 2
    assert work_ms(Work((), 1 << 20), H100) == 1e3 * (1 << 20) / H100.bandwidth


def test_inference_covers_the_two_forward_gemms() -> None:
    _, fs = run(manual(seq=2048), dtype="fp16", training=False)
    (f,) = fs
    assert len(f.gemms) == 2 and f.fact("score_passes") == 4
    assert [a.op for a in f.after] == ["sdpa.qk", "sdpa.pv"]


def test_multihead_attention_with_weights_is_materialised() -> None:
    def build():
        x = torch.randn(8, 1024, 512)
        return nn.MultiheadAttention(512, 8, batch_first=True), (x, x, x)  # self-attention: one packed projection

    _, fs = run(build)
    (f,) = fs
    assert f.fact("seq_k") == 1024 and len(f.gemms) == 6
    assert "need_weights=False" in f.message


def test_not_flagged() -> None:
    assert run(manual(fused=True))[1] == []

    def unweighted():
        x = torch.randn(8, 1024, 512)
        return nn.MultiheadAttention(512, 8, batch_first=True), dict(query=x, key=x, value=x, need_weights=False)

    assert run(unweighted)[1] == []
    # a softmax feeding a Linear (mm, with a weight) is no attention
    assert run(lambda: (nn.Sequential(nn.Linear(512, 512), nn.Softmax(-1), nn.Linear(512, 512)),
                        torch.randn(8192, 512)))[1] == []


class DroppedAttention(nn.Module):
    """Hand-written attention with dropout on the probabilities (vit-pytorch, SpeechT5):
    off CUDA, ``F.dropout`` is decomposed into ``bernoulli_``, ``div_`` and ``mul``."""

    def __init__(self, dim: int = 512, heads: int = 8, p: float = 0.1) -> None:
        super().__init__()
        self.inner = sl302.ManualAttention(dim, heads)
        self.drop = nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        h = self.inner.heads
        q, k, v = (z.view(b, t, h, c // h).transpose(1, 2) for z in self.inner.qkv(x).split(c, dim=2))
        y = self.drop(((q @ k.transpose(-2, -1)) * (c // h) ** -0.5).softmax(dim=-1)) @ v
        return self.inner.proj(y.transpose(1, 2).reshape(b, t, c))


@pytest.mark.parametrize("p", [0.1, 0.0])
def test_attention_dropout_keeps_the_probabilities(p: float) -> None:
    _, fs = run(lambda: (DroppedAttention(p=p), torch.randn(8, 1024, 512)))
    (f,) = fs
    assert (f.fact("seq_q"), f.fact("seq_k"), f.fact("head_dim")) == (1024, 1024, 64)
    assert len(f.gemms) == 6  # QKᵀ, PV and their four grad_input GEMMs, as without dropout


def test_a_mask_times_anything_else_is_no_attention() -> None:
    """Dropout on a Linear's output (no softmax before it) marks nothing."""
    def build():
        return nn.Sequential(nn.Linear(512, 512), nn.Dropout(0.1), nn.Linear(512, 512)), torch.randn(4096, 512)

    _, fs = run(build)
    assert fs == []
