"""A progress display on stderr while targets are linted, only on a terminal: a bar
over the targets of a multi-target run, at once; a spinner naming the target of a
single one, once it has taken more than ``SINGLE_DELAY_S`` (a Llama-70B shape takes
seconds; a small model is done before a spinner would be worth drawing). Transient: nothing of it stays on the screen, and
nothing at all is drawn when stderr is not a terminal (CI logs, pre-commit, pipes)."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

#: a single target's spinner appears after this many seconds
SINGLE_DELAY_S = 2.0


@contextlib.contextmanager
def linting(paths: Sequence[Path]) -> Iterator[Callable[[int], None]]:
    """Yields ``done(i)``: target ``i`` is linted."""
    if not sys.stderr.isatty() or not paths:
        yield lambda i: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = [SpinnerColumn(), TextColumn("{task.description}")]
    if len(paths) > 1:
        columns += [BarColumn(), MofNCompleteColumn()]
    bar = Progress(*columns, TimeElapsedColumn(), console=Console(stderr=True), transient=True)
    what = f"linting {paths[0]}" if len(paths) == 1 else f"linting {len(paths)} targets"
    task = bar.add_task(what, total=len(paths))
    later = threading.Timer(SINGLE_DELAY_S if len(paths) == 1 else 0.0, bar.start)
    later.daemon = True
    later.start()
    try:
        yield lambda i: bar.advance(task)
    finally:
        later.cancel()
        later.join()
        bar.stop()
