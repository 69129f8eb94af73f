"""Smaller hostile cases of issue 24: concurrent ``shapelint.lint()`` calls, YAML alias
bombs, model files that change torch's default device or dtype. Each case runs in its
own folder; the CLI cases check that nothing outside the requested outputs changed
(``_hostile.lint``)."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest
import torch

import shapelint

# -- concurrent lint() calls ------------------------------------------------------------


class Chatty(torch.nn.Module):
    """A Linear whose forward prints (user code writing to stdout) and lingers, so that
    lints in several threads overlap inside the user-code boundary."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(width, 4096)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        print(f"forward of {self.fc.in_features}")
        time.sleep(0.05)
        return self.fc(x)


def _findings(width: int) -> list[tuple[str, str, str]]:
    report = shapelint.lint(Chatty(width), torch.randn(8192, width), select=["SL101"])
    return [(f.code, f.module, str(f.suggestion)) for f in report.findings]


def test_concurrent_lints_leave_the_streams_and_each_result_as_they_were(capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 24: four threads calling ``shapelint.lint()`` left ``sys.stdout`` and
    ``sys.stderr`` pointing at one lint's capture buffer and fd 1 at stderr; their
    findings lost the constructor's parameter name (``size`` for ``in_features``)."""
    widths = (1023, 1025, 1026, 1024)
    serial = {w: _findings(w) for w in widths}
    assert serial[1023] == [("SL101", "fc", "in_features: 1023 → 1024")] and serial[1024] == []
    capfd.readouterr()
    stdout, stderr, fd1 = sys.stdout, sys.stderr, os.fstat(1)
    results: dict[int, list[tuple[str, str, str]]] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(len(widths))

    def one(width: int) -> None:
        try:
            start.wait()
            results[width] = _findings(width)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(w,)) for w in widths]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sys.stdout is stdout and sys.stderr is stderr
    assert (os.fstat(1).st_dev, os.fstat(1).st_ino) == (fd1.st_dev, fd1.st_ino)
    assert results == serial
    out, err = capfd.readouterr()
    # what each forward printed went to stderr, whole lines, none to stdout
    assert out == "" and sorted(line for line in err.splitlines() if line.startswith("forward of ")) == sorted(
        f"forward of {w}" for w in widths)
