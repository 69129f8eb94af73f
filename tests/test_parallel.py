"""Several targets in worker processes: results in the targets' order, ``done`` as each
job finishes (the progress bar of a 50-target run stayed at 1/50 for 80 s while the
pool waited with FIRST_EXCEPTION), the first error ends the run."""

from __future__ import annotations

import os
import time

import pytest

from shapelint.app import parallel
from shapelint.app.isolate import available

pytestmark = pytest.mark.skipif(not available(), reason="worker processes need os.fork")

#: how long each job sleeps: job 2 finishes first, job 1 last
SLEEPS = {0: 0.0, 1: 1.5, 2: 0.05, 3: 0.6}


def _job(i: int) -> str:
    time.sleep(SLEEPS[i])
    return f"result {i}"


def test_done_is_called_as_each_job_finishes() -> None:
    calls: list[tuple[int, float]] = []
    start = time.monotonic()
    results = parallel.run(_job, 4, 3, lambda i: calls.append((i, time.monotonic() - start)))
    assert results == ["result 0", "result 1", "result 2", "result 3"]  # the targets' order
    assert [i for i, _ in calls] == [0, 2, 3, 1]  # the order they finished in
    at = dict(calls)
    # job 2 is drawn done long before the slowest job ends, not with it
    assert at[2] < at[3] < at[1] and at[1] - at[2] > 0.8, calls


def _failing(i: int) -> str:
    if i == 2:
        raise ValueError("job 2 failed")
    time.sleep(SLEEPS[i])
    return f"result {i}"


def test_the_first_error_ends_the_run() -> None:
    calls: list[int] = []
    with pytest.raises(ValueError, match="job 2 failed"):
        parallel.run(_failing, 4, 3, calls.append)
    assert 2 not in calls and calls[0] == 0


def test_one_worker_runs_in_this_process_in_order() -> None:
    calls: list[int] = []
    assert parallel.run(_job, 3, 1, calls.append) == ["result 0", "result 1", "result 2"]
    assert calls == [0, 1, 2]


def test_on_a_machine_with_a_cuda_gpu_the_jobs_run_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that ran autograd's backward or started CUDA there cannot be forked
    (seen on an H100: every worker's target failed)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    pids: list[int] = []
    assert parallel.run(lambda i: pids.append(os.getpid()) or i, 4, 4) == [0, 1, 2, 3]
    assert pids == [os.getpid()] * 4
