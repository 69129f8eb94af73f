"""The contract every hostile-input test checks through the CLI: exit code 0, 1 or 2;
on exit 2 one ``shapelint: error:`` line per failure (one for a single target); stdout parseable with ``--format
json``; no file created, changed or removed outside the requested outputs
(``__pycache__`` included)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from _cli_helpers import assert_one_error_line, run
from hypothesis import HealthCheck, settings

#: ``SHAPELINT_HOSTILE_EXAMPLES=N``: N random examples per property test, not
#: derandomized (a slow, exploring job); unset: the small, derandomized CI run
_THOROUGH = int(os.environ.get("SHAPELINT_HOSTILE_EXAMPLES", "0") or 0)


def hostile_settings(examples: int) -> settings:
    """Hypothesis settings for a property test that runs ``examples`` cases in CI."""
    return settings(max_examples=_THOROUGH or examples, derandomize=not _THOROUGH, deadline=None,
                    suppress_health_check=list(HealthCheck), database=None)


def full_snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder``: files by content, links by target, folders by name."""
    out: dict[str, bytes | str] = {}
    for root, dirs, files in os.walk(folder):
        for d in dirs:
            out[str((Path(root) / d).relative_to(folder)) + "/"] = "dir"
        for f in files:
            p = Path(root) / f
            rel = str(p.relative_to(folder))
            out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else (p.read_bytes() if p.is_file() else "special")
    return out


def lint(argv: list[Any], folder: Path, capsys: Any, outputs: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """Run ``shapelint ARGV --no-config`` in ``folder`` and check the contract (on exit
    2: one ``shapelint: error:`` line, or one per failed target when several are linted)."""
    before = full_snapshot(folder)
    rc, out, err = run([*argv, "--no-config"], capsys)
    assert rc in (0, 1, 2), (rc, err)
    if rc == 2:
        for line in err.strip().splitlines():
            assert_one_error_line(line)
    if "json" in [str(a) for a in argv] and out:
        json.loads(out)
    after = full_snapshot(folder)
    for name in outputs:
        after.pop(name, None)
    assert after == before, sorted(set(after) ^ set(before)) or "a file changed"
    return rc, out, err
