"""Launch one process per rank with ``torchrun`` (``python -m torch.distributed.run``)
and stop all of them together: what ``--verify --step`` of a parallel layout and
``shapelint calibrate``'s collectives both need.

The launcher runs in a process group (a session) of its own, so that past the
timeout, or on an interrupt, the whole group is killed: the launcher and every rank
it started, which would otherwise keep holding the GPUs (and, stuck in an NCCL call,
never exit by themselves).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from shapelint.errors import ShapelintError


def torchrun_command(world: int, module: str, *args: str) -> list[str]:
    """The command that runs ``python -m module args`` as ``world`` ranks on this machine."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
            "-m", module, *args]


def run_ranks(cmd: list[str], timeout_s: float, what: str) -> int:
    """Run ``cmd`` (from :func:`torchrun_command`), its output on our stderr; its exit
    status. Past ``timeout_s`` the whole group is killed and ``what`` is named in one
    error line."""
    proc = subprocess.Popen(cmd, stdout=sys.stderr, stderr=sys.stderr, start_new_session=True)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise ShapelintError(f"{what} under torchrun ran past {timeout_s:g} s; stopped it") from None
    except BaseException:
        kill_group(proc)
        raise


def ranks_json(world: int, module: str, args: list[str], out: Path, timeout_s: float, what: str,
               failed: str, hint: str = "") -> Any:
    """Run ``python -m module args`` on ``world`` ranks (:func:`run_ranks`) and read the
    JSON its rank 0 wrote to ``out`` (named in ``args``); where it exits non-zero or
    writes nothing, one error line: ``failed``, the exit status, then ``hint``."""
    code = run_ranks(torchrun_command(world, module, *args), timeout_s, what)
    if code != 0 or not out.exists():
        raise ShapelintError(f"{failed} (exit {code}; its output is above){hint}")
    return json.loads(out.read_text())


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc``'s process group (it leads one: ``start_new_session``) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


__all__ = ["kill_group", "ranks_json", "run_ranks", "torchrun_command"]
