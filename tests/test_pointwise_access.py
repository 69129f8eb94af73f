"""How a copy or pointwise op walks memory on the GPU (``shapelint.capture.op_traffic``),
as TensorIterator decides it, and the rate the step model prices each path at."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _benchmarks import load_benchmark
from torch import nn

from shapelint import hardware
from shapelint.capture.op_traffic import casts, elementwise_access, stream_access
from shapelint.pipeline.run import trace
from shapelint.price.kernels import memory_kernel_ms, op_ms

H100 = hardware.resolve("h100")
B, T, H, D = 2, 64, 4, 32


def q_heads(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A [B, T, H, D] projection viewed [B, H, T, D], as attention hands q to RoPE."""
    return torch.randn(B, T, H, D, dtype=dtype).transpose(1, 2)


def test_a_permuted_view_with_its_own_permutation_is_vectorised() -> None:
    q = q_heads()
    out = q * q  # TensorIterator gives the output q's permutation: one contiguous run
    assert out.stride() == q.stride()
    assert elementwise_access([q, q], [out]) == "vectorized"
    assert elementwise_access([q], [q * 2.0]) == "vectorized"


def test_rope_on_a_transposed_q_is_coalesced_not_strided() -> None:
    q, cos = q_heads(), torch.randn(1, 1, T, D)
    assert elementwise_access([q, cos], [q * cos]) == "coalesced"
    # an RMS norm's x * rsqrt(mean of squares): a broadcast, so not one run either
    x, r = torch.randn(B, T, H * D), torch.randn(B, T, 1)
    assert elementwise_access([x, r], [x * r]) == "coalesced"
    # q's gradient beside a contiguous q (the backward of q_norm): only D agrees
    assert elementwise_access([q, q.contiguous()], [q * q.contiguous()]) == "coalesced"
    assert elementwise_access([q], [q.contiguous()]) == "coalesced"  # .contiguous() keeps D innermost


def test_a_real_transpose_a_gap_or_a_short_run_is_strided() -> None:
    t = torch.randn(256, 512)
    assert elementwise_access([t.t()], [t.t().contiguous()]) == "strided"
    sliced = torch.randn(100, 1032)[:, :1024]  # rows of 1032, 1024 read: a gap after each
    assert elementwise_access([sliced], [sliced.contiguous()]) == "strided"
    pairs = torch.randn(64, 64, 2).transpose(0, 1)  # runs of 2 fp32: 8 bytes, under a sector
    assert elementwise_access([pairs], [pairs.contiguous()]) == "strided"
    nchw = torch.randn(8, 16, 14, 14)
    cl = nchw.contiguous(memory_format=torch.channels_last)
    assert elementwise_access([cl, cl], [cl + cl]) == "vectorized"
    assert elementwise_access([cl, nchw], [cl + nchw]) == "strided"  # layouts mixed


def test_operands_of_different_shapes_are_judged_one_by_one() -> None:
    """A kernel of the op's own (cat, a gather): the contiguous rate unless a tensor has
    gaps or the layouts disagree."""
    x = torch.randn(8, 64)
    assert elementwise_access([x, x], [torch.cat([x, x], -1)]) == "vectorized"
    table, ids = torch.randn(100, 64), torch.randint(0, 100, (8, 16))
    assert elementwise_access([table, ids], [table[ids]]) == "vectorized"
    sliced = torch.randn(8, 72)[:, :64]
    assert elementwise_access([sliced, x], [torch.cat([sliced, x], -1)]) == "strided"


def test_a_contiguous_cast_is_unrolled_and_any_other_takes_the_cast_offset_path() -> None:
    """fp32 -> bf16 has a copy kernel of its own (vectorised); bf16 -> fp32 and a binary op
    over bf16 and fp32 run TensorIterator's dynamic cast: unrolled where contiguous,
    the offset-calculator kernel with a cast per element otherwise (``cast_offset``, not
    the strided path it was priced as before)."""
    x = torch.randn(B, T, H * D)
    low = x.to(torch.bfloat16)
    assert not casts([x], [low]) and stream_access("copy", [x], [low]) == (4, "vectorized")
    assert casts([low], [x]) and stream_access("copy", [low], [x]) == (4, "coalesced")
    assert stream_access("pointwise", [low, x], [x]) == (4, "coalesced")
    into = torch.empty_like(low)
    assert not casts([into, x], [into])  # into.copy_(x): fp32 -> bf16, the destination read too
    q, cos = q_heads(torch.bfloat16), torch.randn(1, 1, T, D)
    assert stream_access("pointwise", [q, cos], [q * cos]) == (4, "cast_offset")
    mask = torch.ones(B, T, H * D, dtype=torch.bool)
    assert not casts([mask, x, x], [x])  # a mask is the kernel's own type
    assert stream_access("reduction", [low], [x]) == (4, "vectorized")  # not an elementwise kernel


class Rope(nn.Module):
    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.dtype = dtype
        self.register_buffer("cos", torch.randn(1, 1, T, D, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = x.to(self.dtype).view(B, T, H, D).transpose(1, 2)
        return q * self.cos.to(self.dtype)  # the trace keeps buffers in its precision


def test_a_traced_rope_mul_is_priced_at_the_coalesced_rate() -> None:
    cap, _ = trace(lambda: (Rope(), torch.randn(B, T, H * D)), precision="fp32", training=False)
    (mul,) = [o for o in cap.ops if o.name == "mul"]
    assert mul.coalesced and not mul.strided and mul.element_bytes == 4
    assert mul.bytes == 4 * (2 * B * T * H * D + T * D)
    assert op_ms(mul, H100) == memory_kernel_ms(mul.bytes, H100.step.coalesced_efficiency, H100)
    assert H100.step.strided_copy_efficiency < H100.step.coalesced_efficiency < H100.step.elementwise_efficiency


class RotateHalf(nn.Module):
    """Llama's ``rotate_half``: a cat of the two halves of the head dimension, each a
    slice with gaps."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def test_a_traced_cat_takes_its_path_from_the_tensors_it_joins() -> None:
    """``cat`` takes its inputs as a list: the recorder reads them for its bytes and its
    path. Joining the negated half (contiguous) and a slice with gaps is strided, as
    ``elementwise_access`` judges the same operands; a cat of contiguous tensors is not."""
    cap, _ = trace(lambda: (RotateHalf(), torch.randn(B, T, H * D)), precision="fp32", training=False)
    (cat,) = [o for o in cap.ops if o.name == "cat"]
    assert cat.strided and not cat.coalesced
    assert cat.bytes == 4 * 2 * B * T * H * D  # each half read once, the whole written once
    cap, _ = trace(lambda: (Joined(), torch.randn(B, T, H * D)), precision="fp32", training=False)
    (cat,) = [o for o in cap.ops if o.name == "cat"]
    assert not cat.strided and not cat.coalesced


class Joined(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat((x * 2, x + 1), dim=-1)


def test_a_coalesced_op_of_two_byte_elements_runs_at_the_strided_rate() -> None:
    """The non-vectorised kernel loads one element per thread and step: bf16 moves half
    the bytes of fp32 for the same work (``strided_copy_efficiency`` is measured on a
    bf16 copy of that path)."""
    cap, _ = trace(lambda: (Rope(torch.bfloat16), torch.randn(B, T, H * D)), precision="fp32", training=False)
    (mul,) = [o for o in cap.ops if o.name == "mul"]
    assert mul.coalesced and mul.element_bytes == 2
    assert op_ms(mul, H100) == memory_kernel_ms(mul.bytes, H100.step.strided_copy_efficiency, H100)


QWEN3 = Path(__file__).resolve().parent.parent / "benchmarks" / "heldout_models" / "qwen3_0_6b" / "config.json"


@pytest.mark.slow
def test_qwen3_step_prices_rope_and_q_norm_on_transposed_heads_as_coalesced() -> None:
    """Qwen3-0.6B at 8 x 1024 (bf16 autocast, AdamW) on the H100 profile. Before, any op
    with a non-contiguous operand was strided (1,234 ops: RoPE, q_norm/k_norm and their
    gradients over the transposed q and k), broadcasts and casts vectorised: 225.8 ms of
    GPU time, a 233.2 ms step. Now 1,577 ops run the coalesced path (broadcasts, the
    transposed heads, contiguous casts) and 281 the strided one (rotate_half's slices,
    casts off the vectorised path): 218.0 ms, a 224.0 ms step. Then 112 of the strided ones,
    q_norm's and k_norm's fp32 weight times bf16 heads forward and backward, took the
    cast_offset path (169 strided left), priced by their elements or bytes: 219.0 ms, a
    224.1 ms step (their profiled kernels: 7.13 ms, priced 7.93); rotate_half's ``cat`` now
    reads the halves it joins (it had been priced as its write alone): 219.9 ms; and its path
    is judged on those halves (slices with gaps: strided, 56 cats): 221.5 ms. Measured on an H100
    (``--verify --step``, 2026-11-23, docs/benchmarks.md): 220.9 ms."""
    from shapelint.app import api

    report = api.lint_target(QWEN3, gpu="h100", batch=8, seq=1024)
    ops = report.result.step_model.step.ops
    coalesced = [o for o in ops if o.coalesced]
    strided = [o for o in ops if o.strided]
    cast_offset = [o for o in ops if o.cast_offset]
    assert (len(coalesced), len(strided), len(cast_offset)) == (1577, 225, 112)
    assert report.step_time.gpu_ms == pytest.approx(221.5, rel=1e-3)
    assert report.step_time.ms == pytest.approx(220.9, rel=0.03)


def test_the_layouts_benchmark_builds_each_layout_it_names() -> None:
    """``benchmarks/pointwise_layouts.py``'s cases, built on the CPU at one sequence: each
    layout takes the path its name promises, so that the GPU run times what it says."""
    bench = load_benchmark("pointwise_layouts")
    n = bench.HEADS * bench.SEQ * bench.HEAD_DIM
    expected = {"contiguous": "vectorized", "permuted": "vectorized", "contiguous+bcast": "coalesced",
                "permuted+bcast": "coalesced", "mixed-perm": "coalesced", "gap-slice": "strided",
                "transposed": "strided"}
    for layout, path in expected.items():
        _, ins, out = bench.case("mul", layout, n, "float32", "cpu")
        assert stream_access("pointwise", ins, [out]) == (4, path), layout
    _, ins, out = bench.case("_to_copy", "contiguous", n, "bfloat16", "cpu")  # bf16 -> fp32: a cast
    assert stream_access("copy", ins, [out]) == (4, "coalesced")
    assert bench.path_of(["void at::native::unrolled_elementwise_kernel<direct_copy_kernel_cuda>"]) == "unrolled"
    assert bench.path_of(["void at::native::elementwise_kernel<128, 2, gpu_kernel_impl_nocast<Mul>>"]) == "legacy"


class Upcast(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.bfloat16).float()  # autocast's round trip: fp32 -> bf16 -> fp32


def test_a_contiguous_upcast_is_priced_at_the_cast_rate_and_the_downcast_vectorised() -> None:
    cap, _ = trace(lambda: (Upcast(), torch.randn(B, T, H * D)), precision="fp32", training=False)
    down, up = [o for o in cap.ops if o.name == "_to_copy"]
    assert not (down.cast or down.coalesced or down.strided)
    assert op_ms(down, H100) == memory_kernel_ms(down.bytes, H100.step.elementwise_efficiency, H100)
    assert up.cast and up.coalesced and not up.strided and up.bytes == 6 * B * T * H * D
    assert op_ms(up, H100) == memory_kernel_ms(up.bytes, H100.step.cast_efficiency, H100)


class MaskedScores(nn.Module):
    """MPT-7B's fp32 scores masked out of place, at MPT-7B's shape (8 x 1024, 32 heads)."""

    def forward(self, scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return scores.masked_fill(mask, torch.finfo(torch.float32).min)


def test_an_out_of_place_masked_fill_is_a_clone_and_the_fill_in_place() -> None:
    """aten's ``masked_fill`` clones its input (a device-to-device memcpy) and fills the
    clone in place: two kernels. On an H100 (2026-11-26, ``benchmarks/pointwise_layouts.py
    --cases scores``, docs/data/score_casts_h100_2026-11-26.json) MPT-7B's fp32 [8, 32,
    1024, 1024] masked_fill with a [8, 1, 1024, 1024] mask took 1.627 ms; its bytes read and
    written once were priced 0.946 ms."""
    from shapelint.price.kernels import clone_ms, eager_launches

    b, h, t = 8, 32, 1024
    cap, _ = trace(lambda: (MaskedScores(), (torch.randn(b, h, t, t), torch.zeros(b, 1, t, t, dtype=torch.bool))),
                   precision="fp32", training=False)
    (fill,) = [o for o in cap.ops if o.name == "masked_fill"]
    scores = b * h * t * t * 4
    assert fill.bytes == 2 * scores + b * t * t and fill.coalesced and eager_launches(fill) == 2
    assert clone_ms(fill, H100) == memory_kernel_ms(2 * scores, H100.step.elementwise_efficiency, H100)
    assert op_ms(fill, H100) == pytest.approx(0.946 + 0.708, abs=1e-3)
    assert op_ms(fill, H100) == pytest.approx(1.627, rel=0.03)  # the measured time
