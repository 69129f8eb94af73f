"""The one timer's counts on the CPU (its wall-clock fallback): how many calls are warm-up
and how many are timed, for kernels and for blocks of training steps. The CUDA paths
run the same counts around CUDA events (exercised by the GPU tests and benchmarks)."""

from __future__ import annotations

from shapelint.measure import timer


class Calls:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> None:
        self.n += 1


def test_a_kernel_is_warmed_up_then_timed_rep_by_rep() -> None:
    fn = Calls()
    samples = timer.wall_timer(reps=3, warmup=2)(fn)
    assert fn.n == 5 and len(samples) == 3 and all(s >= 0 for s in samples)
    fn = Calls()
    assert len(timer.wall_timer()(fn)) == timer.REPS and fn.n == timer.REPS + timer.WARMUP


def test_a_block_times_every_step_and_warms_none() -> None:
    step = Calls()
    assert len(timer.block_timer("cpu")("before", step, 4)) == 4 and step.n == 4


def test_a_variant_is_warmed_by_its_first_step_and_the_warm_up_steps() -> None:
    step = Calls()
    assert timer.first_call_s(step, "cpu") >= 0 and step.n == 1
    timer.warm_up(step, "cpu", timer.STEP_WARMUP)
    assert step.n == 1 + timer.STEP_WARMUP


def test_the_median_and_spread_of_samples() -> None:
    t = timer.Timing((1.0, 2.0, 3.0, 4.0, 100.0))
    assert t.median == 3.0 and t.spread > 0
    assert timer.Timing((1.0, 2.0)).spread == 0.0
