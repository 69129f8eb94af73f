"""Batch norm priced by the shape of its activation (issue 26): the kernels PyTorch
launches and their launch geometry (``shapelint.physics.batch_norm``, from
Normalization.cuh), and the law that times them (``shapelint.price.batch_norm``) against
the H100 measurements it was fitted on (``benchmarks/bn_shape_rates.py``,
``docs/data/bn_shape_rates_h100_2026-11-26.json``) and the whole steps it prices."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from shapelint import hardware
from shapelint.physics.batch_norm import batch_norm_kernels, flexible_launch
from shapelint.price.batch_norm import batch_norm_ms, kernel_ms

H100 = hardware.resolve("h100")
ROOT = Path(__file__).resolve().parent.parent
SWEEP = ROOT / "docs" / "data" / "bn_shape_rates_h100_2026-11-26.json"


def _launch(shape: tuple[int, ...], channels_last: bool, backward: bool) -> list[tuple[str, int, int]]:
    return [(k.name, k.blocks, k.threads) for k in batch_norm_kernels(shape, channels_last, backward)]


def test_nchw_kernels_give_each_channel_one_block() -> None:
    # the profiled grids (H100, torch 2.11): [96,1,1] x [512,1,1]; transform [96,256,1] x [512,1,1]
    assert _launch((256, 96, 112, 112), False, False) == [
        ("batch_norm_collect_statistics_kernel", 96, 512), ("batch_norm_transform_input_kernel", 96 * 256, 512)]
    assert _launch((256, 96, 112, 112), False, True) == [("batch_norm_backward_kernel", 96, 512)]
    # H·W = 49: 64 threads walk a row of 49, eight images at a time; the transform
    # splits (channel, image) pairs into blocks of 64: [2048, 128, 1] (256K / C) x [64, 1, 1]
    stats, transform = batch_norm_kernels((256, 2048, 7, 7), False, False)
    assert (stats.blocks, stats.threads, stats.lanes) == (2048, 512, pytest.approx(49 / 64))
    assert (transform.blocks, transform.threads) == (2048 * 128, 64)
    # bytes each kernel moves: a read (statistics), a read and a write (transform),
    # two reads then two reads and a write (backward); bf16
    tensor = 256 * 2048 * 49 * 2
    assert (stats.bytes, transform.bytes) == (tensor, 2 * tensor)
    assert batch_norm_kernels((256, 2048, 7, 7), False, True)[0].bytes == 5 * tensor


def test_channels_last_kernels_tile_channels_and_rows() -> None:
    # flexible_launch_configs: 32 channels x 16 rows a block, at most 128 blocks along the rows
    assert flexible_launch(256 * 196, 2048) == (32, 16, 64, 128)
    assert flexible_launch(256 * 12544, 16) == (16, 32, 1, 128)  # 16 channels: 128 blocks in all
    # a cooperative kernel (statistics, backward reduce) with under 8 row blocks takes one
    assert flexible_launch(8 * 196, 2048, coop=True) == (32, 16, 64, 1)
    assert flexible_launch(8 * 196, 2048) == (32, 16, 64, 7)
    assert _launch((8, 2048, 14, 14), True, True) == [
        ("batch_norm_backward_reduce_channels_last_kernel", 64, 512),
        ("batch_norm_backward_elemt_channels_last_kernel", 64 * 7, 512)]
    (stats, _) = batch_norm_kernels((256, 144, 56, 56), True, False)
    assert stats.lanes == pytest.approx(144 / 160)  # 5 blocks of 32 channels for 144


def test_no_channel_dimension_has_no_kernels() -> None:
    assert batch_norm_kernels((), False, False) == ()
    assert batch_norm_kernels((0, 16, 4, 4), False, True) == ()


def test_a_few_channels_take_the_time_of_one_channels_walk() -> None:
    """NCHW at 256 x 112^2: 16 and 96 channels measured 8.34 and 9.26 ms forward +
    backward (6x the bytes in 1.1x the time); the law has their blocks run at once."""
    def ms(c: int, channels_last: bool = False) -> float:
        shape = (256, c, 112, 112)
        return sum(kernel_ms(k, H100) for b in (False, True) for k in batch_norm_kernels(shape, channels_last, b))

    assert ms(96) / ms(16) == pytest.approx(1.0, abs=0.1)
    assert ms(16) == pytest.approx(8.34, rel=0.15)
    assert ms(96) == pytest.approx(9.26, rel=0.15)
    # channels-last: 16 channels make 128 blocks, 96 make 384: 0.97 and 2.67 ms measured
    assert ms(16, True) == pytest.approx(0.97, rel=0.2)
    assert ms(96, True) == pytest.approx(2.67, rel=0.2)


def test_the_law_of_one_backward_kernel_by_hand() -> None:
    """32 blocks of 512 threads, each walking its channel's 256 x 112^2 elements of x and
    dy twice and writing dx: the blocks' walk, not the bandwidth, sets the time."""
    (k,) = batch_norm_kernels((256, 32, 112, 112), False, True)
    s = H100.step
    per_block = k.bytes / 2 / 32 / (s.batch_norm_nchw_backward_thread_meps * 1e6 * 512 * (12544 / 12800))
    stream = k.bytes / (s.batch_norm_nchw_backward_efficiency * H100.memory_bandwidth_gbps * 1e9 * 12544 / 12800)
    assert per_block > 5 * stream
    assert kernel_ms(k, H100) == pytest.approx(1e3 * (s.batch_norm_block_us * 1e-6 + per_block))
    assert kernel_ms(k, H100) == pytest.approx(5.703, rel=0.1)  # measured on the H100


def _against(path: Path) -> tuple[int, float, float]:
    """(kernels, the law's total over the measured, share within 25% of their own time)."""
    doc = json.loads(path.read_text())
    est = meas = 0.0
    close = total = 0
    for r in doc["rows"]:
        shape = (r["N"], r["C"], r["side"], r["side"])
        cl = r["layout"] == "channels_last"
        made = {k.name: k for b in (False, True) for k in batch_norm_kernels(shape, cl, b)}
        for m in r["kernels"]:
            if m["kernel"] in made:
                e = kernel_ms(made[m["kernel"]], H100)
                est, meas = est + e, meas + m["ms"]
                close += abs(math.log(e / m["ms"])) < math.log(1.25)
                total += 1
    return total, est / meas, close / total


def test_the_profile_reproduces_the_sweep_it_was_fitted_on() -> None:
    """Every kernel of the 66 shapes x 2 layouts: the law's total within 10% of the
    measured, and three kernels in four within 25% of their own time."""
    total, ratio, close = _against(SWEEP)
    assert total == 462
    assert ratio == pytest.approx(1.0, abs=0.1)
    assert close > 0.75


def test_the_law_holds_on_shapes_it_was_not_fitted_on() -> None:
    """71 held-out shapes x 2 layouts (C 24-1280, H·W 10^2-150^2, N 16-128), measured
    on the same H100: 497 kernels, 0.97x their total, 70% within 25%."""
    total, ratio, close = _against(SWEEP.with_name("bn_shape_rates_heldout_h100_2026-11-26.json"))
    assert total == 497
    assert ratio == pytest.approx(1.0, abs=0.1)
    assert close > 0.65


def test_a_profile_without_the_law_prices_by_bytes() -> None:
    from shapelint.model.step_ops import Op

    op = Op(0, "native_batch_norm", "reduction", False, 4_000_000, reads=((1, 2_000_000),), numel=1_000_000,
            shape=(16, 64, 32, 32))
    assert batch_norm_ms(op, H100) is not None
    off = replace(H100, step=replace(H100.step, batch_norm_nchw_transform_thread_meps=0.0))
    assert batch_norm_ms(op, off) is None
    assert batch_norm_ms(replace(op, shape=()), H100) is None


@pytest.mark.slow
def test_resnet50_batch_norms_priced_as_profiled() -> None:
    """ResNet-50 at batch 64, bf16 autocast, H100 (``benchmarks/bn_shape_rates.py
    --steps``, docs/data/bn_steps_h100_2026-11-26.json): its 53 batch norms' kernels
    took 15.09 ms NCHW and 7.14 ms channels-last per step (one rate per layout had priced
    them 26.5 and 8.0); the steps 31.0 and 21.5 ms."""
    from shapelint.app import api
    from shapelint.price.step import step_time

    report = api.lint_target(ROOT / "tests" / "corpus" / "resnet-50" / "config.json", gpu="h100", batch=64, seq=224)
    sm = report.result.step_model
    assert sm is not None and sm.relaid is not None
    for step, profiled in ((sm.step, 15.09), (sm.relaid.step, 7.14)):
        bns = [op for op in step.ops if "batch_norm" in op.name]
        assert len(bns) == 106 and all(op.shape for op in bns)
        assert sum(batch_norm_ms(op, H100) or 0.0 for op in bns) == pytest.approx(profiled, rel=0.1)
    nchw = step_time(sm.step, sm.hw, sm.mode, sm.optimizer)
    assert nchw.ms == pytest.approx(31.0, rel=0.15)
    # SL402's step: 45.3 -> 25.2 ms (1.80x) with one rate per layout; measured 1.13x and 1.44x
    (found,) = [f for f in report.findings if f.code == "SL402"]
    assert found.step_ms is not None and found.step_ms_saved is not None
    assert found.step_ms / (found.step_ms - found.step_ms_saved) == pytest.approx(1.32, abs=0.05)
