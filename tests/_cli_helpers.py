"""Shared by the CLI-level tests: tiny model files and an in-process ``shapelint`` run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from shapelint.app import cli

#: nn.Linear(1023, 1024) over 4096 tokens (fake tensors: the size costs nothing) in bf16:
#: SL101 flags in_features 1023 → 1024. The Linear is built on line 6, which the
#: finding points at (and where a suppression comment goes).
MODEL = '''\
import torch
import torch.nn as nn


def shapelint_model():
    model = nn.Sequential(nn.Linear({in_features}, 1024), nn.ReLU()){comment}
    return model, torch.randn(4096, {in_features})
'''
LINEAR_LINE = 6


def write_model(folder: Path, name: str = "model.py", *, in_features: int = 1023, comment: str = "") -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(MODEL.format(in_features=in_features, comment=f"  {comment}" if comment else ""))
    return path


def run(argv: list[str], capsys: Any) -> tuple[int, str, str]:
    """``shapelint ARGV`` in this process: (exit code, stdout, stderr)."""
    capsys.readouterr()
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``folder`` with its mtime and contents (to prove nothing was written)."""
    out = {}
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for f in files:
            p = Path(root) / f
            out[str(p.relative_to(folder))] = (p.stat().st_mtime_ns, p.read_bytes())
    return out


def assert_one_error_line(err: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("shapelint: error: "), err
    assert "Traceback" not in err
