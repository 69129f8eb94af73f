"""SL201 memory-bound-gemm: arithmetic intensity against the GPU's ops:byte ratio,
and the token count that reaches it."""

from __future__ import annotations

import torch
from _rules import run_rule
from shapelint.rules import sl201_memory_bound_gemm as sl201
from torch import nn

from shapelint.check.rule_api import RuleContext
from shapelint.hardware import resolve
from shapelint.physics.reshape import resize
from shapelint.pipeline.run import trace
from shapelint.price.gemm import total_ms


def run(build, gpu: str = "h100", dtype: str = "bf16", training: bool = True):
    cap, _ = trace(build, precision=dtype, training=training)
    ctx = RuleContext(precision=dtype, training=training, tokens=cap.tokens)
    return cap, list(run_rule(sl201, cap.gemms, resolve(gpu), ctx))


def test_guide_example_batch_512_is_compute_bound_on_v100() -> None:
    # NVIDIA "Matrix Multiplication Background": Linear 1024 -> 4096, batch 512, fp16
    cap, fs = run(lambda: (nn.Linear(1024, 4096), torch.randn(512, 1024)), "v100", "fp16")
    fwd = next(g for g in cap.gemms if g.phase == "forward")
    assert (fwd.m, fwd.n, fwd.k) == (512, 4096, 1024)
    assert round(fwd.intensity) == 315
    assert round(resolve("v100").ops_per_byte("fp16")) == 139
    assert fs == []


def test_guide_example_batch_1_is_memory_bound() -> None:
    cap, fs = run(lambda: (nn.Linear(1024, 4096), torch.randn(1, 1024)), "v100", "fp16", training=False)
    assert len(fs) == 1
    f = fs[0]
    assert (f.code, f.module) == ("SL201", "<root>")
    assert f.suggestion.to_json() == {"parameter": "batch", "from": 1, "to": 168}
    assert round(f.fact("intensity")) == 1
    assert round(f.fact("ops_per_byte")) == 139
    assert f.gain == "throughput" and f.to_json()["details"]["est_speedup_kind"] == "throughput"
    # 168 is the smallest token count reaching the ridge
    fwd = cap.gemms[0]
    ridge = resolve("v100").ops_per_byte("fp16")
    assert sl201.intensity_at(fwd, 1, 167) < ridge <= sl201.intensity_at(fwd, 1, 168)
    # the closed form for a Linear: 2·T·in·out / (bytes·(T·in + in·out + T·out))
    t, i, o = 168, 1024, 4096
    assert abs(sl201.intensity_at(fwd, 1, t) - 2 * t * i * o / (2 * (t * i + i * o + t * o))) < 1e-9
    # throughput: the batch-168 time per token, times the current tokens
    after_batch = total_ms([resize(g, 1, 168) for g in cap.gemms], resolve("v100"))
    assert abs(f.est_ms_after - after_batch / 168) < 1e-12
    assert f.est_speedup > 100  # reading the 8 MB of weights dominates at batch 1


def test_training_covers_every_phase_of_the_token_dimension() -> None:
    cap, fs = run(lambda: (nn.Linear(1024, 4096), torch.randn(1, 1024)), "v100", "fp16")
    (f,) = fs
    assert sorted(f.gemms) == sorted(g.index for g in cap.gemms)
    assert {cap.gemms[i].phase for i in f.gemms} == {"forward", "grad_weight"}
    assert f.suggestion.to == 168


def test_decode_mlp_on_h100() -> None:
    model = lambda: (nn.Sequential(nn.Linear(4096, 16384), nn.GELU(), nn.Linear(16384, 4096)),
                     torch.randn(8, 1, 4096))
    _, fs = run(model, training=False)
    # the two layers get the same advice, grouped as repeated layers are
    assert [(f.modules, f.suggestion.from_, f.suggestion.to) for f in fs] == [(("0", "2"), 8, 325)]
    hw = resolve("h100")
    assert abs(fs[0].fact("ops_per_byte") - 989.4e12 / 3350e9) < 1e-6
    assert fs[0].fact("intensity_after") >= hw.ops_per_byte("bf16") > fs[0].fact("intensity")


def test_narrow_layer_never_compute_bound_is_not_reported() -> None:
    # intensity tends to 2·4096·8 / (2·4104) ≈ 8 FLOP/B whatever the batch
    _, fs = run(lambda: (nn.Linear(4096, 8), torch.randn(16384, 4096)))
    assert fs == []


def test_negligible_module_is_not_reported() -> None:
    model = lambda: (nn.Sequential(nn.Linear(1024, 8192), nn.GELU(), nn.Linear(8192, 1024),
                                   nn.AdaptiveAvgPool2d((1, None)), nn.Linear(1024, 1024)),
                     torch.randn(1, 16384, 1024))
    cap, fs = run(model, training=False)
    head = [g for g in cap.gemms if g.module == "4"]
    assert head and head[0].m == 1 and head[0].intensity < 2  # memory-bound...
    assert fs == []  # ...but under MIN_STEP_SHARE of the step


def test_compute_bound_training_passes() -> None:
    _, fs = run(lambda: (nn.Linear(4096, 4096), torch.randn(8, 1024, 4096)))
    assert fs == []


def test_matches_the_measured_h200_batch_sweep() -> None:
    """gemm_truth.json batch_sweep (bf16, 4096 x 4096 weight on an H200): 0.0184 ms at
    1 token, 0.0228 ms at 256 tokens: 207x the tokens/s."""
    _, fs = run(lambda: (nn.Linear(4096, 4096, bias=False), torch.randn(1, 4096)), "h200", training=False)
    (f,) = fs
    assert f.suggestion.to_json() == {"parameter": "batch", "from": 1, "to": 230}
    assert round(f.fact("ops_per_byte")) == 206
    assert abs(f.est_ms - 0.0184) < 0.002  # reading 32 MB of weights
    assert abs(f.est_speedup - 0.0184 * 256 / 0.0228) / f.est_speedup < 0.05


class LastTokenHead(nn.Module):
    """nanoGPT's ``GPT.forward`` without targets: the output layer on the last position only."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(1024, 1024)
        self.lm_head = nn.Linear(1024, 50304, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.body(x)[:, [-1], :])


def test_a_head_on_the_last_position_says_why_it_sees_few_tokens() -> None:
    _, fs = run(lambda: (LastTokenHead(), torch.randn(12, 1024, 1024)))
    (f,) = fs
    assert f.module == "lm_head" and f.suggestion.from_ == 12
    assert "sees 12 of the step's 12288 tokens (1 in 1024" in f.message
    assert "pass the targets (labels)" in f.message


def test_every_token_through_a_narrow_batch_says_nothing_more() -> None:
    _, fs = run(lambda: (nn.Linear(1024, 4096), torch.randn(1, 1024)), "v100", "fp16", training=False)
    (f,) = fs
    assert "sees" not in f.message


class ChunkedScan(nn.Module):
    """Mamba2's torch path: (chunk × chunk) products of two activations over the chunks."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8192, 8192)

    def forward(self, blocks: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.bmm(blocks, self.proj(x))


def test_a_product_of_two_activations_has_no_token_count() -> None:
    """``5 × 5`` blocks times ``5 × 8192`` activations: no weight, so 5 is no token count
    (Mamba2 got "memory-bound at 5 tokens per step")."""
    cap, fs = run(lambda: (ChunkedScan(), (torch.randn(192, 5, 5), torch.randn(192, 5, 8192))))
    assert any(g.op == "bmm" and (g.m, g.n, g.k) == (5, 8192, 5) and g.phase == "forward" for g in cap.gemms)
    assert [f for f in fs if f.suggestion.from_ == 5] == []
