"""A cast where TensorIterator's iteration is not one contiguous run: the offset-calculator
kernel with a dynamic cast per element (``shapelint.capture.op_traffic.stream_access``'s
``cast_offset``), as hand-written attention adds an fp32 ALiBi bias or mask to bf16
scores under autocast, priced by its own rates (``step.cast_offset_element_ps`` and
``step.cast_offset_efficiency``)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from shapelint import hardware
from shapelint.capture.op_traffic import casts, stream_access
from shapelint.model.step_ops import Op
from shapelint.pipeline.run import trace
from shapelint.price.kernels import cast_offset_ms, memory_kernel_ms, op_ms

H100 = hardware.resolve("h100")
B, H, T, MAX_SEQ = 2, 4, 64, 128


def mpt_alibi(heads: int, max_seq: int, seq: int) -> torch.Tensor:
    """MPT's ALiBi as transformers slices it: built [H, 1, max_seq_len] in fp32, the last
    ``seq`` keys taken (``position_bias[:, :, max_seq_len - seq:]``): rows with a gap."""
    return torch.randn(heads, 1, max_seq)[..., max_seq - seq:]


def test_mpt_alibi_add_to_bf16_scores_takes_the_cast_offset_path() -> None:
    scores = torch.randn(B, H, T, T, dtype=torch.bfloat16)
    alibi = mpt_alibi(H, MAX_SEQ, T)
    out = scores + alibi
    assert out.dtype == torch.float32 and casts([scores, alibi], [out])
    assert stream_access("pointwise", [scores, alibi], [out]) == (4, "cast_offset")
    # the same cast with a dense broadcast bias (BLOOM's [1, H, 1, T], a padding mask) or
    # into a bf16 output: the same kernel, the same path
    for bias in (torch.randn(1, H, 1, T), torch.randn(B, 1, 1, T), torch.randn(1, 1, T, T)):
        assert stream_access("pointwise", [scores, bias], [scores + bias])[1] == "cast_offset"
        into = torch.empty_like(scores)
        assert stream_access("pointwise", [scores, bias], [torch.add(scores, bias, out=into)])[1] == "cast_offset"


def test_a_same_dtype_broadcast_add_stays_coalesced_and_a_contiguous_cast_unrolled() -> None:
    scores = torch.randn(B, H, T, T, dtype=torch.bfloat16)
    bias = torch.randn(1, H, 1, T, dtype=torch.bfloat16)
    assert stream_access("pointwise", [scores, bias], [scores + bias]) == (2, "coalesced")
    wide = scores.float()
    assert stream_access("pointwise", [wide, bias.float()], [wide + bias.float()]) == (4, "coalesced")
    # the contiguous upcast keeps its own (unrolled) path, priced by the ``cast`` flag
    assert stream_access("copy", [scores], [wide]) == (4, "coalesced")
    # an fp32 0-d fill does not cast: ``where`` converts it to the scores' dtype first
    mask = torch.ones(1, 1, T, T, dtype=torch.bool).tril()
    fill = torch.tensor(torch.finfo(torch.float32).min)
    kept = torch.where(mask, scores, fill)
    assert kept.dtype == torch.bfloat16 and stream_access("copy", [mask, scores, fill], [kept]) == (2, "coalesced")


class AlibiScores(nn.Module):
    """MPT-7B's score chain up to its ALiBi add, at MPT-7B's shape (8 x 1024 tokens, 32
    heads): bf16 scores under autocast plus the fp32 ALiBi buffer sliced to the keys."""

    def __init__(self, heads: int = 32, max_seq: int = 2048) -> None:
        super().__init__()
        self.heads = heads
        self.register_buffer("alibi", torch.randn(heads, 1, max_seq))

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(-1, -2))
        return scores + self.alibi[..., self.alibi.shape[-1] - k.shape[-2]:]


def test_the_traced_alibi_add_is_priced_by_the_elements_the_cast_kernel_iterates() -> None:
    b, h, t, d = 8, 32, 1024, 128
    cap, _ = trace(lambda: (AlibiScores(h), (torch.randn(b, h, t, d), torch.randn(b, h, t, d))),
                   precision="bf16", training=False)
    (add,) = [o for o in cap.ops if o.name == "add"]
    assert add.cast and add.cast_offset and not (add.strided or add.coalesced) and add.element_bytes == 4
    # bf16 scores read, fp32 sum written, the sliced bias once
    assert add.bytes == b * h * t * t * (2 + 4) + h * t * 4 == 1_610_743_808
    assert add.numel == b * h * t * t
    step = H100.step
    by_elements = 1e-9 * add.numel * step.cast_offset_element_ps
    assert by_elements > memory_kernel_ms(add.bytes, step.cast_offset_efficiency, H100)  # 6 bytes an element
    assert op_ms(add, H100) == cast_offset_ms(add, H100) == by_elements
    # 1.315 ms; measured alone on an H100 1.529 ms (docs/data/score_casts_h100_2026-11-26_run2.json);
    # priced 0.987 ms at the strided rate before
    assert op_ms(add, H100) == pytest.approx(1.315, abs=1e-3)
    assert memory_kernel_ms(add.bytes, step.strided_copy_efficiency, H100) == pytest.approx(0.987, abs=1e-3)


def _cast(nbytes: int, numel: int) -> Op:
    return Op(0, "mul", "pointwise", False, nbytes, element_bytes=4, cast=True, numel=numel, out_numel=numel)


def test_a_cast_kernel_costs_its_elements_whatever_their_width_or_its_bytes_where_it_moves_more() -> None:
    """On an H100 (2026-11-26, 16M-256M elements): bf16 scores plus a [1, 1, T, T] fp32
    mask took 4.9 ps an element into fp32 (6 bytes an element) and 4.6 into bf16 (4
    bytes); bf16 heads times fp32 gradients of the transposed heads (10 bytes an element)
    6.4 ps, 0.47 of the bandwidth."""
    n = 16 << 20
    fp32_out, bf16_out, two_full = _cast(6 * n, n), _cast(4 * n, n), _cast(10 * n, n)
    assert cast_offset_ms(fp32_out, H100) == cast_offset_ms(bf16_out, H100) == pytest.approx(n * 4.9e-9)
    assert cast_offset_ms(two_full, H100) == memory_kernel_ms(10 * n, 0.47, H100)
    assert cast_offset_ms(two_full, H100) == pytest.approx(0.1066, abs=1e-4)  # measured 0.1092 ms


class CausalWhere(nn.Module):
    """A causal ``where`` with an fp32 fill (``torch.finfo(float32).min`` as a 0-d tensor)
    over bf16 scores: ``where`` converts the fill to bf16 first, so its kernel runs on
    bf16 without a cast (measured on an H100 at 0.44-0.46 of the bandwidth, 2026-11-26,
    docs/data/score_casts_h100_2026-11-26.json)."""

    def __init__(self, t: int) -> None:
        super().__init__()
        self.register_buffer("causal", torch.ones(1, 1, t, t, dtype=torch.bool).tril())
        self.register_buffer("fill", torch.tensor(torch.finfo(torch.float32).min))

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.where(self.causal, torch.matmul(q, k.transpose(-1, -2)), self.fill)


def test_a_where_with_an_fp32_fill_is_priced_as_the_bf16_kernel_it_runs() -> None:
    b, h, t, d = 4, 16, 1024, 64
    cap, _ = trace(lambda: (CausalWhere(t), (torch.randn(b, h, t, d), torch.randn(b, h, t, d))),
                   precision="bf16", training=False)
    (where,) = [o for o in cap.ops if o.name == "where"]
    assert not where.cast and where.coalesced and where.element_bytes == 2  # the 0-d fill does not widen it
    assert where.bytes == b * h * t * t * 2 * 2 + t * t + 4
    # bf16 on the coalesced path: the strided rate (0.487), not the fp32 coalesced one (0.68)
    assert op_ms(where, H100) == memory_kernel_ms(where.bytes, H100.step.strided_copy_efficiency, H100)


def test_every_profile_prices_the_cast_offset_path() -> None:
    """Each architecture's step table sets the rate (a profile without it does not load),
    a fraction of the bandwidth below the vectorised rate."""
    for name, hw in hardware.builtin_profiles().items():
        step = hw.step
        assert 0 < step.cast_offset_efficiency < step.elementwise_efficiency, name
        assert step.cast_offset_element_ps > 0, name
        assert math.isfinite(step.cast_offset_efficiency)


def _before(hw: hardware.Hardware) -> hardware.Hardware:
    """``hw`` pricing the cast_offset path as the code before it did: at the strided rate."""
    step = dataclasses.replace(hw.step, cast_offset_efficiency=hw.step.strided_copy_efficiency,
                               cast_offset_element_ps=0.0)
    return dataclasses.replace(hw, step=step)


MPT7B = Path(__file__).resolve().parent / "corpus" / "mpt-7b" / "config.json"


@pytest.mark.slow
def test_mpt7b_sl302_estimate_moves_toward_the_measured_speedup() -> None:
    """MPT-7B at 8 x 1024 (bf16 autocast): its hand-written attention adds the fp32 ALiBi to
    bf16 scores in every layer, one cast_offset op of 1.61 GB. Priced at the strided rate
    (and its masked_fill without the clone before it) its SL302 finding was estimated
    4.63x; measured on an H100 6.36x (2026-11-26,
    docs/data/corpus_findings_h100_2026-11-26_final.json). With the masked_fill's clones,
    forward and backward, 5.37x; with the ALiBi add priced by its elements, 5.54x (-13%);
    with the fused forward priced on its grid of query blocks (the after side), 5.35x and
    5.52x."""
    from shapelint.check import run as check
    from shapelint.pipeline.result import Options
    from shapelint.pipeline.run import lint_target

    def sl302(hw: hardware.Hardware) -> tuple[float, int]:
        r = lint_target(MPT7B, Options(), hw, check.load_rules(()))
        (f,) = [f for f in r.findings if f.code == "SL302"]
        adds = [o for o in r.step_model.step.ops if o.cast_offset]
        assert f.est_speedup is not None
        return f.est_speedup, len(adds)

    strided, adds = sl302(_before(H100))
    now, _ = sl302(H100)
    assert adds == 32  # one ALiBi add a layer
    assert strided == pytest.approx(5.35, abs=0.01)  # the cast at the strided rate, the clones counted
    assert now == pytest.approx(5.52, abs=0.01)


def test_the_score_benchmark_builds_the_paths_it_names() -> None:
    """``benchmarks/pointwise_layouts.py --cases scores`` on the CPU: every case with a
    cast takes the cast_offset path, the controls do not, so the GPU run times what the
    table says; the kernel names it reads tell a cast from none."""
    from _benchmarks import load_benchmark

    bench = load_benchmark("pointwise_layouts")
    paths = {}
    for name, _ in bench.SCORE_CASES:
        _, ins, out = bench.score_case(name, bench.DRY_SCORES, "cpu")
        fill = name in ("where-fp32-fill", "masked_fill-fp32")
        paths[name] = stream_access("copy" if fill else "pointwise", ins, [out])[1]
    assert {n for n, p in paths.items() if p == "cast_offset"} == {n for n, _ in bench.SCORE_CASES if ">" in n}
    assert {p for n, p in paths.items() if ">" not in n} == {"coalesced"}
    assert bench.dynamic_cast(["void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<Add>>"])
    assert not bench.dynamic_cast(["void at::native::elementwise_kernel<128, 4, gpu_kernel_impl_nocast<Add>>"])
    # where's own kernel, beside the one-element copy of its fill: the offset-calculator path
    assert bench.path_of(["void at::native::vectorized_elementwise_kernel<8, bfloat16_copy_kernel_cuda>",
                          "void at::native::elementwise_kernel<128, 4, gpu_kernel_impl_nocast<where_kernel_impl>>"]
                         ) == "legacy"
