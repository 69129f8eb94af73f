"""SL202 tile-quantization: partial output tiles of aligned, compute-bound GEMMs."""

from __future__ import annotations

from dataclasses import replace

import torch
from _rules import run_rule
from shapelint.rules import sl202_tile_quantization as sl202
from torch import nn

from shapelint.check.rule_api import RuleContext
from shapelint.hardware import resolve
from shapelint.physics.quantization import quantization
from shapelint.pipeline.run import trace, vocab_sizes
from shapelint.price import Policy
from shapelint.price.gemm import gemm_time, total_ms


def run(build, gpu: str = "h100", dtype: str = "bf16", policy: Policy = Policy(), **ctx):
    cap, model = trace(build, precision=dtype)
    context = RuleContext(precision=dtype, tokens=cap.tokens, vocab_sizes=vocab_sizes(model), **ctx)
    return cap, list(run_rule(sl202, cap.gemms, resolve(gpu), context, policy))


def linear(n_in: int, n_out: int, tokens: int = 16384):
    return lambda: (nn.Linear(n_in, n_out), torch.randn(tokens, n_in))


def test_776_outputs_waste_a_partial_column_of_tiles() -> None:
    cap, fs = run(linear(8192, 776))
    hw = resolve("h100")
    fwd = cap.gemms[0]
    assert quantization(fwd.m, fwd.n, 1, hw).tile == 776 / 832  # 13 tiles of 64 for 776 columns
    (f,) = fs
    assert (f.code, f.name, f.module) == ("SL202", "tile-quantization", "<root>")
    assert f.suggestion.to_json() == {"parameter": "out_features", "from": 776, "to": 824}
    assert abs(f.fact("waste") - (1 - 776 / 832)) < 1e-9  # compute-bound: all of it is lost
    (smaller,) = f.alternatives
    assert smaller.suggestion.to == 768
    assert abs(smaller.est_speedup - 832 / 768) < 1e-9
    # padding costs no wall-clock time, so the gain is per unit of work
    assert f.gain == "throughput"
    assert abs(total_ms(f.after, hw) / f.est_ms - 1) < 0.01
    assert 1.05 < f.est_speedup < 1.08
    assert sorted(f.gemms) == [g.index for g in cap.gemms]  # forward + grad_weight


def test_a100_fp16() -> None:
    _, fs = run(linear(4096, 520), "a100", "fp16")
    (f,) = fs
    assert (f.suggestion.parameter, f.suggestion.from_) == ("out_features", 520)
    assert f.suggestion.to % 8 == 0 and f.suggestion.to > 520
    assert f.alternatives[0].suggestion.to == 512
    assert f.est_speedup > 1.1


def test_aligned_sizes_and_misaligned_ones_pass() -> None:
    assert run(linear(8192, 768))[1] == []
    assert run(linear(8192, 777))[1] == []  # SL101's: not 16-byte aligned


def test_memory_bound_partial_tiles_cost_nothing() -> None:
    cap, fs = run(linear(4096, 72))
    hw = resolve("h100")
    assert quantization(72, 16384, 1, hw).tile < 0.6
    assert gemm_time(cap.gemms[0], hw).bound == "memory"
    assert fs == []


def test_threshold_is_the_policy_min_loss() -> None:
    assert run(linear(8192, 776), policy=Policy(min_loss=0.05))[1]
    assert run(linear(8192, 776), policy=Policy(min_loss=0.08))[1] == []  # waste is 6.7%


def test_vocab_sizes_are_left_to_sl501() -> None:
    def build():
        return (nn.Sequential(nn.Embedding(776, 8192).requires_grad_(False), nn.Linear(8192, 776)),
                torch.randint(0, 776, (16384,)))

    cap, fs = run(build)
    assert fs == []
    # the same GEMMs without the embedding's size would be flagged
    assert list(run_rule(sl202, cap.gemms, resolve("h100"), RuleContext(tokens=cap.tokens)))


def test_size_equal_to_token_count_is_ambiguous_and_skipped() -> None:
    cap, _ = trace(linear(8192, 776))
    ctx = RuleContext(tokens=776)
    assert list(run_rule(sl202, cap.gemms, resolve("h100"), ctx)) == []


def test_conv_output_channels_are_covered() -> None:
    cap, _ = trace(linear(8192, 776))
    # the same GEMMs as if a convolution with out_channels=776 had made them
    conv = [replace(g, role="conv", module_params=(("in_channels", 8192), ("out_channels", 776)))
            for g in cap.gemms]
    (f,) = run_rule(sl202, conv, resolve("h100"), RuleContext(tokens=cap.tokens))
    assert f.suggestion.to_json() == {"parameter": "out_channels", "from": 776, "to": 824}
