"""The progress display: a single target's spinner only after SINGLE_DELAY_S, a
multi-target bar at once, nothing when stderr is not a terminal."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from shapelint.app import progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def drawn(monkeypatch: pytest.MonkeyPatch, paths: list[Path], seconds: float, delay: float = 2.0) -> str:
    err = Terminal()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr(progress, "SINGLE_DELAY_S", delay)
    with progress.linting(paths) as done:
        time.sleep(seconds)
        for i in range(len(paths)):
            done(i)
    return err.getvalue()


def test_a_quick_single_target_draws_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert drawn(monkeypatch, [Path("model.py")], 0.05) == ""


def test_a_slow_single_target_gets_a_spinner(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "linting model.py" in drawn(monkeypatch, [Path("model.py")], 0.3, delay=0.05)


def test_several_targets_get_a_bar_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "linting 2 targets" in drawn(monkeypatch, [Path("a.json"), Path("b.json")], 0.2)


def test_nothing_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    with progress.linting([Path("a.json"), Path("b.json")]) as done:
        done(0)
    assert err.getvalue() == ""
