"""The ``shapelint`` command: parse → run → render → exit code. Exit codes: 0 clean,
1 findings, 2 usage or input error, 130 interrupted.

The command line becomes a :class:`~shapelint.app.request.Request`, which
:func:`shapelint.app.run.run` carries out and :func:`shapelint.app.render.render`
prints; ``calibrate`` and ``clean`` are :mod:`shapelint.app.subcommands`. The lint
runs in a forked child process (:mod:`shapelint.app.isolate`) where that is safe.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from shapelint.app import subcommands
from shapelint.app.parser import build_parser
from shapelint.errors import ShapelintError

#: the commands that lint nothing, by their first argument
SUBCOMMANDS: dict[str, Callable[[Sequence[str]], int]] = {"calibrate": subcommands.calibrate,
                                                          "clean": subcommands.clean, "rule": subcommands.rule}


def main(argv: Sequence[str] | None = None) -> int:
    """The command. ``argv`` None (the console command): the lint runs in a forked
    child on Linux (see :func:`_isolation`); from Python only when ``--timeout`` or
    ``--max-memory`` asks for it."""
    console = argv is None
    if console:  # a closed or full stderr must not change the report or the exit code
        from shapelint.app.outputs import guard_stderr

        guard_stderr()
        # torch warns on import when NumPy is absent; shapelint never hands it arrays
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
    args_list = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args_list
    if args_list[:1] and args_list[0] in SUBCOMMANDS:
        command = SUBCOMMANDS[args_list[0]]
        return _guarded(lambda: command(args_list[1:]), debug)

    def isolated() -> int:
        args = build_parser().parse_args(args_list)  # usage errors: one line, before any fork
        limits = _isolation(args, console)
        if limits is None:
            return _guarded(lambda: _run(args), debug)
        from shapelint.app import isolate

        return isolate.run_isolated(lambda: _guarded(lambda: _run(args), debug), **limits)

    return _guarded(isolated, debug)


def _run(args: argparse.Namespace) -> int:
    """parse → run → render → exit code."""
    from shapelint.app.render import render
    from shapelint.app.request import Request
    from shapelint.app.run import run

    outcome = run(Request.from_args(args))
    render(outcome)
    return outcome.exit_code()


def _guarded(fn: Callable[[], int], debug: bool) -> int:
    """``fn()``, every error one ``shapelint: error:`` line and exit 2 (a traceback
    only with ``--debug``); Ctrl-C exit 130."""
    from shapelint.errors import describe

    try:
        return fn()
    except ShapelintError as exc:
        if debug:
            raise
        print(f"shapelint: error: {describe(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("shapelint: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        print(f"shapelint: error: {describe(exc)}", file=sys.stderr)
        return 2


def _isolation(args: argparse.Namespace, console: bool) -> dict[str, Any] | None:
    """``run_isolated``'s limits when the lint runs in a child process, else None:
    on by default for the console command where ``fork`` is safe, off with
    ``--no-isolate`` or ``--debug`` (a debugger needs the process); from Python only
    when ``--timeout`` or ``--max-memory`` is given (they need the child)."""
    from shapelint.app import isolate

    limited = args.timeout is not None or args.max_memory is not None
    if args.no_isolate or args.debug:
        if limited:
            raise ShapelintError("--timeout and --max-memory need the child process (drop --no-isolate/--debug)")
        return None
    if limited and not isolate.available():
        raise ShapelintError("--timeout and --max-memory need os.fork (Linux or another POSIX system but macOS)")
    if not (console or limited) or not isolate.available():
        return None
    return {"timeout": args.timeout, "max_memory": args.max_memory}


__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
