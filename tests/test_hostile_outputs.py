"""Output paths: never over a file shapelint reads; whole files; a full disk or a
closed pipe handled."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shapelint.app.outputs import (
    check_output_path,
    graph_paths,
    protected_paths,
    write_file,
)
from shapelint.errors import ShapelintError


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text("def shapelint_model(): ...\n")
    (tmp_path / "build.py").write_text("def build(): ...\n")
    (tmp_path / "t.yaml").write_text("model: build.py:build\n")
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}\n')
    (tmp_path / "pyproject.toml").write_text("[tool.shapelint]\n")
    return tmp_path


@pytest.mark.parametrize("out", ["model.py", "./model.py", "build.py", "config.json", "pyproject.toml", "t.yaml"])
def test_outputs_never_replace_what_shapelint_reads(project: Path, out: str) -> None:
    """Issue 13: ``--dump-graph model.py``, ``-o model.py``, ``-o config.json`` replaced the target."""
    protected = protected_paths([Path("model.py"), Path("t.yaml"), Path("config.json")], "pyproject.toml")
    with pytest.raises(ShapelintError, match="refusing to overwrite"):
        check_output_path(out, protected)
    check_output_path("report.json", protected)


def test_a_symlink_to_a_target_is_refused(project: Path) -> None:
    os.symlink("model.py", "link.txt")
    with pytest.raises(ShapelintError, match="link.txt: is model.py"):
        check_output_path("link.txt", [Path("model.py")], flag="-o")


def test_one_graph_per_target() -> None:
    """Issue 13: ``--dump-graph`` with several targets kept only the last graph."""
    targets = [Path("a/model.py"), Path("b/model.py"), Path("gpt2/config.json")]
    assert graph_paths("out/g.py", targets) == [Path("out/g-1-model.py"), Path("out/g-2-model.py"),
                                                Path("out/g-3-gpt2.py")]
    assert graph_paths("g.py", targets[:1]) == [Path("g.py")]


def test_write_file_is_whole_or_nothing(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    out.write_text("old")
    write_file(str(out), "new")
    assert out.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_device_is_refused() -> None:
    """Issue 13: ``-o /dev/full`` was an internal error; a device is no place for a report."""
    with pytest.raises(ShapelintError, match="--output /dev/full: is a character device"):
        write_file("/dev/full", "x" * 100_000)


def test_missing_folder_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ShapelintError, match="No such file or directory"):
        write_file(str(tmp_path / "no" / "r.json"), "x")


def test_stdout_guard_on_a_closed_pipe() -> None:
    """Issue 13: ``| head`` gave exit 2 in JSON and a silent exit 1 in text."""
    code = ("import sys\nfrom shapelint.app.outputs import stdout_guard\nwith stdout_guard():\n"
            "    for i in range(200000):\n        sys.stdout.write('line %d\\n' % i)\nsys.exit(1)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() == 1 and err == ""


def test_dev_null_takes_the_report(tmp_path: Path) -> None:
    """``-o /dev/null``: only the exit code is wanted; nothing is written, nothing refused."""
    check_output_path(os.devnull, [tmp_path / "model.py"])
    write_file(os.devnull, "x" * 100)
