"""SL301 attention-head-dim: fused attention with a head dimension PyTorch's fast
kernels refuse (not a multiple of 8 in bf16/fp16, or above 256)."""

from __future__ import annotations

import torch
from _rules import run_rule
from shapelint.rules import sl301_attention_head_dim as sl301
from torch import nn

from shapelint.check.rule_api import RuleContext
from shapelint.hardware import resolve
from shapelint.physics.attention import head_dim, keep_width, per_head
from shapelint.pipeline.run import trace
from shapelint.price.gemm import total_ms

H100 = resolve("h100")


def run(dim: int, heads: int, dtype: str = "bf16", batch: int = 8, seq: int = 1024, need_weights: bool = False,
        **ctx):
    def build():
        x = dict(query=torch.randn(batch, seq, dim), key=torch.randn(batch, seq, dim),
                 value=torch.randn(batch, seq, dim), need_weights=need_weights)
        return nn.MultiheadAttention(dim, heads, batch_first=True), x

    cap, _ = trace(build, precision=dtype)
    return cap, list(run_rule(sl301, cap.gemms, H100, RuleContext(precision=dtype, **ctx)))


def test_head_dim_100_pads_to_104_or_keeps_width_with_10_heads() -> None:
    cap, fs = run(800, 8)
    (f,) = fs
    assert (f.code, f.name, f.module, f.severity) == ("SL301", "attention-head-dim", "<root>", "error")
    assert f.suggestion.to_json() == {"parameter": "head_dim", "from": 100, "to": 104}
    attn = [g for g in cap.gemms if g.op.startswith("sdpa.")]
    assert sorted(f.gemms) == [g.index for g in attn] and len(attn) == 7  # qk, pv + 5 backward
    assert (f.fact("alt_num_heads"), f.fact("alt_head_dim")) == (10, 80)
    assert "num_heads = 10 (head_dim 80)" in f.message
    # after: every GEMM at head_dim 104, the batch (2 x 8 heads) and sequence unchanged
    for before, after in zip(attn, f.after):
        assert head_dim(after) == 104 and (after.batch, after.m) == (64, before.m)
    assert abs(f.est_ms_after - sum(f.gemm_ms_after)) < 1e-12
    assert len(f.gemm_ms_after) == len(f.gemms)
    # before: the head-dim rows as the kernel reads them (ld 100: 8-byte aligned)
    assert abs(f.est_ms - total_ms([per_head(g, 100) for g in attn], H100)) < 1e-12
    assert f.fact("recorded_ms") < f.est_ms
    # measured on an H200 without a mask: 2.27x and 2.45x (the profile's attention_misaligned_efficiency
    # 0.44 comes from them); with a float attn_mask 7.6x, which math_kernel_ms stands for
    assert 2.0 < f.est_speedup < 2.6
    assert f.fact("math_kernel_ms") > f.est_ms  # the attn_mask case is worse still
    assert 6.0 < f.fact("math_kernel_ms") / f.est_ms_after < 9.5  # measured 7.6x with a float attn_mask


def test_keep_width_prefers_the_nearest_aligned_head_dim() -> None:
    assert keep_width(100, 8, 8) == (10, 80)
    assert keep_width(100, 12, 8) == (10, 120)  # 80 and 120 tie: the larger one
    assert keep_width(300, 4, 8) == (5, 240)
    assert keep_width(300, 3, 8) is None  # 900 wide: no multiple of 8 divides it


def test_head_dim_320_splits_each_head_in_two() -> None:
    cap, fs = run(1280, 4)
    (f,) = fs
    assert f.suggestion.to_json() == {"parameter": "num_heads", "from": 4, "to": 8}
    assert (f.fact("head_dim_after"), f.fact("head_split")) == (160, 2)
    for after in f.after:
        assert head_dim(after) == 160 and after.batch == 8 * 8
    # before: PyTorch's math kernel (fp32, scores in memory), slower than the memory-efficient
    # kernel the records are tagged with (itself 1 / efficient_attention_efficiency the fitted rate)
    assert {dict(g.extra)["kernel"] for g in cap.gemms if g.op.startswith("sdpa.")} == {"efficient"}
    assert f.est_ms == f.fact("math_kernel_ms") > 1.5 * f.fact("recorded_ms")
    # after: 160-wide heads in training, which torch 2.11 runs on cuDNN, at the fitted rate
    assert {dict(g.extra)["kernel"] for g in f.after} == {"cudnn"}
    assert 4.0 < f.est_speedup < 8.0  # measured 6.1x on an H200 (B8 H4 T1024: 3.97 ms vs 0.65 ms)


def test_tf32_needs_four_elements_only() -> None:
    _, fs = run(800, 8, dtype="tf32")
    assert fs == []  # 100 is a multiple of 4
    _, fs = run(816, 8, dtype="tf32")  # head_dim 102
    (f,) = fs
    assert f.suggestion.to_json() == {"parameter": "head_dim", "from": 102, "to": 104}
    assert f.fact("align_elems") == 4


def test_not_flagged() -> None:
    assert run(1024, 16)[1] == []  # head_dim 64
    assert run(800, 8, dtype="fp32")[1] == []  # CUDA cores: no tensor-core kernel to miss
    assert run(800, 8, need_weights=True)[1] == []  # unfused attention is SL302's
