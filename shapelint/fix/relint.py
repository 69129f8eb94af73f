"""The ``--fix`` re-lint, in a fresh Python process.

After ``--fix`` writes, the edited targets are linted again to show what remains and
to catch an edit that broke a model. That cannot happen in this process: a module
the first lint imported from outside the target's folder (a project library on
``sys.path``) stays in ``sys.modules`` as it was, so the re-lint would see the old
sizes and report the old findings, or pass a model whose edited file no longer
loads. A child process (``sys.executable``) imports everything afresh.

What travels is data, never code: the job (each target with its options and GPU
profile, the selected rule codes, ``--rules-dir``, ``sys.path``) as JSON on the
child's stdin, and the results as JSON (:func:`shapelint.pipeline.result.result_to_data`)
in a file of a private temporary folder, so that whatever the user's code prints in
the child cannot corrupt them. The child runs isolated from the environment's
Python settings (``-I``: no script folder, in particular no ``json.py`` of the
working directory, shadows the standard library) with this process's ``sys.path``,
and writes no bytecode beside the user's files.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shapelint.errors import ShapelintError
from shapelint.fix import journal

if TYPE_CHECKING:
    from shapelint.hardware import Hardware
    from shapelint.pipeline.result import Options, Result

#: what the child runs: the job from stdin, this process's import path, then the lint
_BOOT = ("import json, sys\n"
         "job = json.loads(sys.stdin.read())\n"
         "sys.path[:] = job['sys_path']\n"
         "from shapelint.fix.relint import child\n"
         "sys.exit(child(job))\n")
#: how much of the child's stderr an error quotes
QUOTE_CAP = 200


@dataclass(frozen=True)
class Relinter:
    """How this run lints: each target's options and GPU profile (None: the target's
    own), the selected rule codes and the ``--rules-dir`` folders."""

    jobs: dict[str, tuple[Options, Hardware | None]]
    codes: tuple[str, ...]
    rules_dirs: tuple[str, ...] = ()

    def job(self, targets: Sequence[str], out: str) -> dict[str, Any]:
        from shapelint.hardware import Hardware
        from shapelint.model import serial
        from shapelint.pipeline.result import Options

        return {
            "targets": [{"target": t, "options": serial.encode(self.jobs[t][0], Options),
                         "hardware": serial.encode(self.jobs[t][1], Hardware | None)} for t in targets],
            "codes": list(self.codes), "rules_dirs": list(self.rules_dirs), "sys_path": list(sys.path), "out": out,
        }

    def __call__(self, targets: Sequence[str]) -> list[Result]:
        """Lint ``targets`` in a child process; a target that fails raises its one-line
        :class:`ShapelintError` (naming it)."""
        if not targets:
            return []
        folder = tempfile.mkdtemp(prefix="shapelint-relint-", dir=journal.scratch())
        try:
            out = os.path.join(folder, "results.json")
            proc = subprocess.run([sys.executable, "-I", "-B", "-c", _BOOT], input=json.dumps(self.job(targets, out)),
                                  capture_output=True, text=True, cwd=os.getcwd(), check=False)
            return _results(out, proc, targets)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _results(out: str, proc: subprocess.CompletedProcess[str], targets: Sequence[str]) -> list[Result]:
    from shapelint.model import serial
    from shapelint.pipeline.result import result_from_data

    try:
        with open(out, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        last = next((line for line in reversed(proc.stderr.splitlines()) if line.strip()), "")
        code = f"exit code {proc.returncode}" if proc.returncode >= 0 else f"signal {-proc.returncode}"
        raise ShapelintError(f"the re-lint of {', '.join(targets)} ended ({code}) without a result"
                             + (f": {last.strip()[:QUOTE_CAP]}" if last else "")) from None
    if not isinstance(data, dict):
        raise ShapelintError("the re-lint gave no results")
    error = data.get("error")
    if isinstance(error, dict):
        raise ShapelintError(str(error.get("message", "the re-lint failed")))
    rows = data.get("results")
    if not isinstance(rows, list) or len(rows) != len(targets):
        raise ShapelintError("the re-lint gave no results")
    try:
        return [result_from_data(row) for row in rows]
    except serial.DecodeError as exc:
        raise ShapelintError(f"the re-lint's results do not read back: {exc}") from None


def child(job: dict[str, Any]) -> int:
    """The child's side: lint every target of ``job`` and write the results (or the
    first failure, as its one line) to ``job['out']``."""
    sys.dont_write_bytecode = True
    from shapelint.errors import describe

    try:
        data: dict[str, Any] = {"results": _lint_all(job)}
    except Exception as exc:
        data = {"error": {"message": describe(exc)}}
    with open(job["out"], "w", encoding="utf-8") as f:
        json.dump(data, f)
    return 0


def _lint_all(job: dict[str, Any]) -> list[Any]:
    from shapelint.check import run as check
    from shapelint.errors import describe
    from shapelint.hardware import Hardware
    from shapelint.model import serial
    from shapelint.pipeline.result import Options, result_to_data
    from shapelint.pipeline.run import lint_target

    codes = set(job["codes"])
    rules = [r for r in check.load_rules(job["rules_dirs"]) if r.code in codes]
    out = []
    for t in job["targets"]:
        target = str(t["target"])
        try:
            opts = serial.decode(Options, t["options"])
            hw = serial.decode(Hardware | None, t["hardware"])
            out.append(result_to_data(lint_target(Path(target), opts, hw, rules)))
        except Exception as exc:
            text = describe(exc)
            raise ShapelintError(text if target in text else f"{target}: {text}") from exc
    return out


__all__ = ["Relinter", "child"]
