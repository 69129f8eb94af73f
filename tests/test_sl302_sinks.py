"""SL302 on attention with sinks (gpt-oss's eager attention, transformers 5.17): the
scores are concatenated with one logit per head, the row max is subtracted, the softmax
runs over Tk + 1 columns and PV reads a slice back to Tk. Every op over the widened
scores is the chain's, forward and backward, as the capture recorded it; --verify replays
the same ops."""

from __future__ import annotations

import pytest
import torch
from _rules import run_rule
from shapelint.rules import sl302_materialized_attention as sl302
from torch import nn

from shapelint.check.rule_api import RuleContext
from shapelint.hardware import resolve
from shapelint.measure.kernels import gpu_block_runner
from shapelint.measure.score_chain import chain_of, replay
from shapelint.model.records import Gemm
from shapelint.pipeline.run import trace
from shapelint.price.gemm import total_ms
from shapelint.price.kernels import op_ms

H100 = resolve("h100")
B, H, T, D = 2, 4, 128, 32


class SinkAttention(nn.Module):
    """gpt-oss's ``eager_attention_forward``: scaled bf16 scores plus an fp32 causal mask,
    a learned sink logit per head concatenated, the max subtracted, an fp32 softmax, the
    sink column sliced off."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(H * D, 3 * H * D)
        self.sinks = nn.Parameter(torch.zeros(H))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (y.view(b, t, H, D).transpose(1, 2) for y in self.qkv(x).split(c, -1))
        mask = torch.full((t, t), float("-inf")).triu(1)[None, None].expand(b, 1, t, t)
        scores = q @ k.transpose(2, 3) * D ** -0.5 + mask
        sinks = self.sinks.reshape(1, -1, 1, 1).expand(b, -1, t, -1)
        logits = torch.cat([scores, sinks], dim=-1)
        logits = logits - logits.max(dim=-1, keepdim=True).values
        probs = torch.softmax(logits, dim=-1, dtype=logits.dtype)[..., :-1]
        return (probs @ v).transpose(1, 2).reshape(b, t, c)


def chained():
    cap, _ = trace(lambda: (nn.Sequential(SinkAttention()), torch.randn(B, T, H * D)), precision="bf16")
    ctx = RuleContext(precision="bf16", training=True, ops=tuple(cap.ops))
    (f,) = run_rule(sl302, cap.gemms, H100, ctx)
    return cap, f


def test_the_ops_over_the_widened_scores_are_the_chain() -> None:
    cap, f = chained()
    forward = [op.name for op in f.fuses if not op.backward]
    assert forward == ["mul", "add", "cat", "max", "sub", "_softmax", "_to_copy"]
    backward = [op.name for op in f.fuses if op.backward]
    assert backward[:3] == ["_to_copy", "slice_backward", "_softmax_backward_data"]
    assert {"new_zeros", "scatter"} <= set(backward)  # max's backward: zeros, scattered into
    scores, wide = B * H * T * T, B * H * T * (T + 1)
    by_name = {op.name: op for op in f.fuses if not op.backward}
    assert by_name["mul"].numel == scores and by_name["cat"].numel == by_name["_softmax"].numel == wide
    # cat reads what it concatenates (the fp32 scores, and the sinks: one fp32 logit per head,
    # expanded) and writes the widened scores; it had read nothing (its inputs are a list)
    assert by_name["cat"].bytes == scores * 4 + H * 4 + wide * 4
    by = {g.index: g for g in cap.gemms}
    covered: list[Gemm] = [by[i] for i in f.gemms]
    assert abs(f.est_ms - (total_ms(covered, H100) + sum(op_ms(op, H100) for op in f.fuses))) < 1e-9
    assert f.fact("score_kernels") == len(f.fuses) == 7 + len(backward)


def test_verify_replays_the_sinks_and_the_max() -> None:
    cap, f = chained()
    chain = chain_of(f.fuses)
    assert [name for name, _ in chain.steps] == ["mul", "add", "cat", "max", "sub", "_softmax", "_to_copy"]
    scores = torch.randn(B * H, T, T, dtype=torch.bfloat16)
    out = replay(chain, scores, {4: torch.float32, 2: torch.bfloat16}, T, T)
    assert out.shape == scores.shape and out.dtype == torch.bfloat16
    rows = out.float().sum(-1)  # probabilities over the keys, the sink's share sliced off
    assert bool((rows < 1.0 + 1e-2).all()) and bool((rows > 0.3).all())
    block = gpu_block_runner("cpu")(f, {g.index: g for g in cap.gemms})
    assert block is not None
    unfused, fused = block
    grads = unfused()
    assert grads[0].shape == (1, B * H, T, D) and fused()[0].shape == grads[0].shape


def test_a_graphed_block_runs_as_issued_off_the_gpu() -> None:
    """``gpu_block_runner(graph=True)`` captures each side as a CUDA graph on a GPU (its
    GPU time, without the host's); on the CPU there is no graph: the same callables run."""
    from shapelint.measure.kernels import graphed

    def fn() -> int:
        return 3

    assert graphed(fn, "cpu") is fn
    cap, f = chained()
    block = gpu_block_runner("cpu", graph=True)(f, {g.index: g for g in cap.gemms})
    assert block is not None
    grads = block[0]()  # q, k, v and the bias standing for the sinks (their gradient is read)
    assert len(grads) == 4 and grads[0].shape == grads[2].shape == (1, B * H, T, D)
    assert grads[3].shape == (1, B * H, T, T)


def test_a_block_that_cannot_be_captured_on_the_gpu_is_refused_not_mixed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a side cannot be captured, ``graphed`` hands back the callable as issued; one
    side graphed beside one timed at the host's pace would be a ratio of two clocks, so
    ``both_graphed`` refuses the block on the GPU (the corpus run records the error)."""
    from shapelint.measure import kernels

    def before() -> int:
        return 1

    def after() -> int:
        return 2

    monkeypatch.setattr(kernels, "graphed", lambda fn, device: (lambda: 0) if fn is before else fn)
    with pytest.raises(RuntimeError, match="cannot be captured as a CUDA graph"):
        kernels.both_graphed((before, after), "cuda")
    assert kernels.both_graphed((before, after), "cpu")[1] is after  # off the GPU: as issued, by design
