"""A progress display on stderr while targets are linted, only on a terminal: a bar
over the targets of a multi-target run, a spinner naming the target of a single one
(a Llama-70B shape takes seconds). Transient: nothing of it stays on the screen, and
nothing at all is drawn when stderr is not a terminal (CI logs, pre-commit, pipes)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path


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
    with Progress(*columns, TimeElapsedColumn(), console=Console(stderr=True), transient=True) as bar:
        what = f"linting {paths[0]}" if len(paths) == 1 else f"linting {len(paths)} targets"
        task = bar.add_task(what, total=len(paths))
        yield lambda i: bar.advance(task)
