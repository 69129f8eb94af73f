"""SL302 materialized-attention: softmax(q @ kᵀ) @ v written by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from _rules import run_rule
from shapelint.rules import sl302_materialized_attention as sl302
from torch import nn

from shapelint.check.rule_api import RuleContext
from shapelint.hardware import resolve
from shapelint.measure.kernels import gpu_block_runner
from shapelint.measure.score_chain import chain_of, replay
from shapelint.model.records import Work
from shapelint.physics.attention import softmax_traffic_bytes
from shapelint.pipeline.run import trace
from shapelint.price import StepModel
from shapelint.price.gemm import total_ms
from shapelint.price.kernels import eager_launches, op_ms, work_ms
from shapelint.price.step import Step, step_time

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
    # the recompute: QKᵀ again, in the backward kernel (whose grid is not the forward's)
    assert abs(f.est_ms_after - total_ms([*f.after, replace(f.after[0], phase="grad_input")], H100)) < 1e-9
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
    traced as CUDA runs it, one ``native_dropout`` (``shapelint.capture.dropout``)."""

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


# -- the score chain: the ops the step runs over the scores, as recorded ------------------


def chained(build, training: bool = True):
    cap, _ = trace(build, precision="bf16", training=training)
    ctx = RuleContext(precision="bf16", training=training, ops=tuple(cap.ops))
    return cap, list(run_rule(sl302, cap.gemms, H100, ctx))


def test_the_score_chain_is_priced_op_by_op_as_recorded() -> None:
    """Autocast runs the softmax in fp32: the scaled, masked bf16 scores are cast up,
    softmaxed and cast down (and back again in backward); each of those kernels is priced
    as the step prices it, where the softmax's own 5 passes were counted before."""
    cap, (f,) = chained(manual())
    names = [(op.name, op.backward) for op in f.fuses]
    assert names == [("mul", False), ("masked_fill", False), ("_to_copy", False), ("_softmax", False),
                     ("_to_copy", False), ("_to_copy", True), ("_softmax_backward_data", True), ("_to_copy", True),
                     ("masked_fill", True), ("mul", True)]
    scores = 64 * 1024 * 1024
    assert all(op.numel == scores for op in f.fuses)
    by = {g.index: g for g in cap.gemms}
    covered = [by[i] for i in f.gemms]
    assert abs(f.est_ms - (total_ms(covered, H100) + sum(op_ms(op, H100) for op in f.fuses))) < 1e-9
    # the facts count what pricing counts: each masked_fill is a clone and a fill in place
    assert f.fact("score_kernels") == 12
    clones = sum(2 * sum(n for _, n in op.writes) for op in f.fuses if op.name == "masked_fill")
    assert clones == 2 * 2 * 2 * scores  # two masked_fills, each writing the bf16 scores
    assert f.fact("chain_bytes") == sum(op.bytes for op in f.fuses) + clones
    assert f.fact("softmax_bytes") == softmax_traffic_bytes(scores, 2, True)  # its meaning kept
    assert "mul, masked_fill, _to_copy, _softmax kernels (and their backward)" in f.message
    # after: cuDNN (a constant mask) with the mask as an additive bias, at bias_attention_efficiency
    assert f.after[0].extra == (("is_causal", False), ("kernel", "cudnn"), ("with_bias", True))
    assert 7 < f.est_speedup < 11  # measured 9.43x at (768, 12), H100, 2026-11-26


def test_the_step_runs_the_fused_chain_no_more() -> None:
    cap, (f,) = chained(manual())
    step = Step(cap.gemms, cap.ops, cap.params)
    before = step_time(step, H100)
    after = step_time(step, H100, fused=frozenset(op.index for op in f.fuses))
    # an out-of-place masked_fill is two kernels, a clone and the fill in place
    launched = sum(eager_launches(op) for op in f.fuses)
    assert launched == len(f.fuses) + 2  # the forward's masked_fill and its backward's
    chain_ms = sum(op_ms(op, H100) for op in f.fuses) + launched * H100.step.kernel_gap_us * 1e-3
    assert after.kernels == before.kernels - launched
    assert abs((before.gpu_ms - after.gpu_ms) - chain_ms) < 1e-9
    model = StepModel(step, H100)
    assert model.after([f]).gpu_ms < after.gpu_ms  # and the GEMMs run fused


class BiasedAttention(nn.Module):
    """T5-style: a learned position bias added to the scores (it needs a gradient);
    ``project``: q, k, v from a Linear (they need gradients too), else the input itself
    (only dP is a backward GEMM)."""

    def __init__(self, heads: int = 8, seq: int = 256, dim: int = 512, project: bool = True) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1, heads, seq, seq))
        self.qkv = nn.Linear(dim, dim) if project else nn.Identity()
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q = k = v = self.qkv(x).view(b, t, self.heads, c // self.heads).transpose(1, 2)
        return ((q @ k.transpose(-2, -1) + self.bias * 0.5).softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)


def _bias_gradient_sums(cap, elems: int) -> set[int]:
    return {op.index for op in cap.ops if op.backward and op.kind == "reduction" and op.numel == elems
            and op.out_numel < op.numel}


def test_a_bias_gradient_leaves_the_chain() -> None:
    """The sum of dS into the bias's gradient is not fused away (a fused kernel with a
    bias that needs a gradient writes it too); the softmax backward is."""
    cap, (f,) = chained(lambda: (BiasedAttention(), torch.randn(4, 256, 512)))
    names = [(op.name, op.backward) for op in f.fuses]
    assert ("add", False) in names and ("_softmax_backward_data", True) in names
    leaving = _bias_gradient_sums(cap, 4 * 8 * 256 * 256)
    assert leaving and not leaving & {op.index for op in f.fuses}


def test_the_backward_chain_is_found_where_dp_is_the_only_backward_gemm() -> None:
    """q, k and v need no gradient: dP is the attention's one backward GEMM, and the
    softmax backward after it is still the chain's."""
    cap, (f,) = chained(lambda: (BiasedAttention(project=False), torch.randn(4, 256, 512)))
    assert ("_softmax_backward_data", True) in [(op.name, op.backward) for op in f.fuses]
    assert not _bias_gradient_sums(cap, 4 * 8 * 256 * 256) & {op.index for op in f.fuses}


def test_a_bias_computed_beside_the_chain_stays_at_batch_one() -> None:
    """At batch 1 a [1, H, T, T] bias has as many elements as the scores: its own
    computation (``bias * 0.5``) still runs after the fix, as SDPA's mask."""
    for batch in (1, 4):
        _, (f,) = chained(lambda: (BiasedAttention(), torch.randn(batch, 256, 512)))  # noqa: B023
        assert [op.name for op in f.fuses if not op.backward] == ["add", "_softmax", "_to_copy"], batch


def test_dropout_is_priced_once_in_each_direction_of_the_fused_kernel() -> None:
    """After: the fused kernel draws the dropout mask forward and again backward, on the
    two records that stand for whole kernels, at attention_dropout_ps per score element."""
    _, (f,) = chained(lambda: (nn.Sequential(sl302.ManualAttention(512, 8, dropout=0.1)), torch.randn(8, 1024, 512)))
    _, (plain,) = chained(manual())
    dropping = [a.op for a in f.after if dict(a.extra).get("with_dropout")]
    assert dropping == ["sdpa.qk", "sdpa.qk_recompute"]
    per_pass = 64 * 1024 * 1024 * H100.step.attention_dropout_ps * 1e-9
    assert abs((f.est_ms_after - plain.est_ms_after) - 2 * per_pass) < 1e-9
    assert ("native_dropout", False) in [(op.name, op.backward) for op in f.fuses]


def test_verify_replays_the_recorded_chain() -> None:
    cap, (f,) = chained(manual(dim=128, heads=2, batch=1, seq=512))
    chain = chain_of(f.fuses)
    assert chain.steps == (("mul", 2), ("masked_fill", 2), ("_to_copy", 4), ("_softmax", 4), ("_to_copy", 2))
    assert chain.masked and not chain.dropout
    scores = torch.randn(2, 512, 512, dtype=torch.bfloat16)
    out = replay(chain, scores, {4: torch.float32, 2: torch.bfloat16}, 512, 512)
    assert out.dtype == torch.bfloat16 and out.shape == scores.shape
    assert torch.allclose(out.float().sum(-1), torch.ones(2, 512), atol=1e-2)  # rows of probabilities
    block = gpu_block_runner("cpu")(f, {g.index: g for g in cap.gemms})
    assert block is not None
    unfused, fused = block
    dq, dk, dv = unfused()
    assert dq.shape == (1, 2, 512, 64) and fused()[0].shape == dq.shape


class InlineSoftmaxAttention(nn.Module):
    """CodeGen's attention (transformers 5.17): fp32 scores, a causal ``where``, and an
    ``nn.Softmax`` built inside ``forward``, which the capture names ``Softmax``, not a
    child of this module."""

    def __init__(self, heads: int = 4, dim: int = 256, scale_first: bool = False) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.heads, self.scale_first = heads, scale_first
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in self.qkv(x).split(c, -1))
        if self.scale_first:  # the softmax's ops come first in the chain, the module's own dropout after
            scores = (q * (c // self.heads) ** -0.5) @ k.transpose(-2, -1)
        else:
            scores = q.float() @ k.float().transpose(-2, -1)
            causal = torch.ones(t, t, dtype=torch.bool).tril()
            scores = torch.where(causal, scores, torch.finfo(scores.dtype).min) / (c // self.heads) ** 0.5
        probs = self.drop(nn.Softmax(dim=-1)(scores.float()).to(v.dtype))
        return (probs @ v).transpose(1, 2).reshape(b, t, c)


def test_verify_replays_a_softmax_the_module_builds_inside_forward() -> None:
    """The replay follows the scores' data from the module's first op: the inline
    ``nn.Softmax`` (owner ``Softmax``) and the cast after it stay in the chain (it had
    been cut to ``where, div``, so --verify timed CodeGen's chain without its softmax)."""
    _, (f,) = chained(lambda: (nn.Sequential(InlineSoftmaxAttention()), torch.randn(2, 512, 256)))
    owners = {op.name: op.owner for op in f.fuses if not op.backward}
    assert owners["_softmax"] != f.module and not owners["_softmax"].startswith(f.module.replace("*", "0"))
    names = [name for name, _ in chain_of(f.fuses).steps]
    assert "_softmax" in names and names.index("_softmax") < len(names) - 1, names
    _, (g,) = chained(lambda: (nn.Sequential(InlineSoftmaxAttention(scale_first=True)), torch.randn(2, 512, 256)))
    names = [name for name, _ in chain_of(g.fuses).steps]
    assert names[:2] == ["_to_copy", "_softmax"] and "native_dropout" in names, names
