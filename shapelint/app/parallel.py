"""Several targets linted at once, in worker processes forked after torch and the
rules are imported, one per available core. The first target is linted in this
process before the workers fork: it imports what linting needs beyond torch
(transformers and the model's modeling code, ``torch._dynamo``), which every worker
then shares instead of importing it again.

A job is ``fn(index)`` over module state set before the workers fork, so nothing
but the index goes to a worker (user rule modules, which are forgotten after import,
need no pickling); each worker sends its ``Result`` back pickled, in completion
order, and :func:`run` returns them in the targets' order. A worker's user code is
contained as in the parent (``shapelint.load.usercode``) and also cannot disturb the
parent's state or another target's. POSIX only (fork); elsewhere, for one job, and
on a machine with a CUDA GPU, the jobs run in this process one after the other: a
process that has run autograd's backward there (the first target) or started CUDA
(the local GPU's name) cannot be forked safely (``Unable to handle autograd's
threading in combination with fork-based multiprocessing``, seen on an H100).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: the job function of the current run, read by the forked workers
_job: Callable[[int], object] | None = None


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _cuda_here() -> bool:
    """A CUDA GPU is visible (asked without starting CUDA)."""
    import torch

    return bool(torch.cuda.is_available())


def _call(index: int) -> object:
    assert _job is not None
    return _job(index)


def run(fn: Callable[[int], T], count: int, jobs: int, done: Callable[[int], None] = lambda i: None) -> list[T]:
    """``[fn(0), ..., fn(count - 1)]``, on up to ``jobs`` worker processes; ``done(i)``
    is called in this process as each finishes (not when all have: a progress bar of 50
    targets must move as they do). The first exception is raised and cancels the jobs
    not yet started."""
    from shapelint.app.isolate import available

    jobs = min(jobs, count - 1)
    if jobs <= 1 or not available() or _cuda_here():
        out = []
        for i in range(count):
            out.append(fn(i))
            done(i)
        return out
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    from shapelint.errors import ShapelintError

    global _job
    _job = fn
    results: dict[int, T] = {0: fn(0)}  # the imports every worker shares
    done(0)
    import gc

    gc.freeze()  # the workers' collections then skip the inherited objects (no copy-on-write of them all)
    pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork"))
    try:
        futures = {pool.submit(_call, i): i for i in range(1, count)}
        pending = set(futures)
        while pending:
            # each job as it finishes: done() draws progress, and the first error ends the run
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in sorted(finished, key=futures.__getitem__):
                results[futures[f]] = f.result()  # type: ignore[assignment]  # raises the job's error
                done(futures[f])
    except BrokenProcessPool:
        raise ShapelintError("a worker process ended without a result (user code calling os._exit, or a crash); "
                             "rerun with --jobs 1 to see which target") from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        gc.unfreeze()
        _job = None
    return [results[i] for i in range(count)]


__all__ = ["cores", "run"]
