"""Smaller hostile cases of issue 24: concurrent ``shapelint.lint()`` calls, YAML alias
bombs, model files that change torch's default device or dtype. Each case runs in its
own folder; the CLI cases check that nothing outside the requested outputs changed
(``_hostile.lint``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from _cli_helpers import MODEL, run
from _hostile import full_snapshot, lint

import shapelint
from shapelint.errors import ShapelintError
from shapelint.files import MAX_ALIAS_VALUES, parse_yaml


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


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


# -- YAML alias bombs -------------------------------------------------------------------------


def _bomb(indent: str = "", levels: int = 9, top: str = "a") -> list[str]:
    """``a0: &a0 [1 x 9]``, ``a1: &a1 [*a0 x 9]``... ``levels`` anchors: over 9 ** levels
    values once expanded, in under 400 bytes."""
    names = [f"{top}{i}" for i in range(levels)]
    lines = [f"{indent}{names[0]}: &{names[0]} [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for prev, name in zip(names, names[1:]):
        lines.append(f"{indent}{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return lines


BUILD = "import torch.nn as nn\n\n\ndef build(width=64, **extra):\n    return nn.Linear(width, 32)\n"


@contextlib.contextmanager
def within(seconds: float) -> Iterator[None]:
    """Fail (not hang) when the body runs longer than ``seconds``: the alias bomb spun
    at 100% CPU for ever."""
    def stop(*_: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def project(here: Path) -> Path:
    (here / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (here / "build.py").write_text(BUILD)
    return here


def test_an_alias_bomb_under_kwargs_is_refused_at_once(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 24: 1 KB of YAML under ``kwargs:`` hung at 100% CPU: validating the
    keyword arguments walked its 9^9 values (before that validation nothing walked
    them, and a builder without such parameters refused them)."""
    text = "\n".join(["model: build.py:build", "kwargs:", "  width: 64", *_bomb("  "), "inputs: [[4, 64]]", ""])
    assert len(text) < 1024
    (project / "t.yaml").write_text(text)
    began = time.monotonic()
    with within(20):
        rc, out, err = lint(["t.yaml", "--format", "json"], project, capsys)
    assert time.monotonic() - began < 5
    assert rc == 2
    assert err == ("shapelint: error: t.yaml: YAML alias error: its aliases expand it to 490,329,075 values; "
                   f"shapelint reads documents whose aliases repeat at most {MAX_ALIAS_VALUES:,}\n")
    assert out == ""  # the CLI reads a YAML target's own settings first: the run stops there, as on a syntax error


def test_a_self_containing_alias_is_refused(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "t.yaml").write_text("model: build.py:build\nkwargs:\n  width: 64\n  a: &a [1, *a]\ninputs: [[4, 64]]\n")
    with within(20):
        rc, _, err = lint(["t.yaml"], project, capsys)
    assert rc == 2 and err == ("shapelint: error: t.yaml:4: YAML alias error: an alias refers to a value that holds "
                               "it (a document that contains itself)\n")


def test_a_merge_key_bomb_is_refused(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``<<: [*a, *a, ...]`` counts as its expansion: PyYAML releases before the fix of
    yaml/pyyaml#897 (``pyyaml>=6`` allows them) flatten repeated merges into 2 x 9^8
    key/value pairs while loading; this one merges them into two keys."""
    lines = ["model: build.py:build", "kwargs:", "  width: 64", "  m0: &m0 {x: 1, y: 2}"]
    lines += [f"  m{i}: &m{i} {{<<: [" + ", ".join([f"*m{i - 1}"] * 9) + "]}" for i in range(1, 9)]
    (project / "t.yaml").write_text("\n".join([*lines, "inputs: [[4, 64]]", ""]))
    with within(20):
        rc, _, err = lint(["t.yaml"], project, capsys)
    assert rc == 2 and "t.yaml: YAML alias error: its aliases expand it to" in err


def test_an_alias_bomb_in_a_configuration_file_is_refused(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "model.py").write_text(MODEL.format(in_features=1023, comment=""))
    (project / ".shapelint.yaml").write_text("\n".join([*_bomb(top="x"), "select: *x8", ""]))
    before = full_snapshot(project)
    for argv in (["model.py"], ["model.py", "--config", ".shapelint.yaml"]):  # found, and named
        with within(20):
            rc, out, err = run(argv, capsys)
        assert rc == 2 and out == ""
        assert err.startswith("shapelint: error: .shapelint.yaml: YAML alias error: its aliases expand it to ")
    assert full_snapshot(project) == before


def test_a_few_aliases_still_read(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Anchors that repeat a block or two (the common use) are data as before."""
    (project / "t.yaml").write_text("model: build.py:build\nkwargs:\n  width: &w 1023\n  extra: {a: *w, b: [*w, *w]}\n"
                                    "inputs: [[4096, *w]]\n")
    rc, out, err = lint(["t.yaml", "--format", "json"], project, capsys)
    assert rc == 1, err
    assert [f["suggestion"] for f in json.loads(out)["findings"] if f["code"] == "SL101"] == [
        {"parameter": "in_features", "from": 1023, "to": 1024}]


def test_parse_yaml_counts_repeated_values_not_distinct_ones() -> None:
    # five levels expand to 74,738 values (74,718 of them repeats): read; six to 672,610: refused
    assert parse_yaml("\n".join(_bomb(levels=5)), "t.yaml")["a4"][0][0][0][0] == [1] * 9
    with pytest.raises(ShapelintError, match=r"^t\.yaml: YAML alias error: its aliases expand it to 672,610 values"):
        parse_yaml("\n".join(_bomb(levels=6)), "t.yaml")
    # a long document without aliases is not an alias bomb
    assert len(parse_yaml("[" + ", ".join(["1"] * (MAX_ALIAS_VALUES + 10)) + "]", "t.yaml")) == MAX_ALIAS_VALUES + 10
    assert parse_yaml("", "t.yaml") is None


# -- torch's default device and dtype -------------------------------------------------------

DEFAULT_CUDA_AT_IMPORT = """\
import torch
import torch.nn as nn

torch.set_default_device("cuda")


def shapelint_model():
    return nn.Linear(1023, 1024), torch.randn(4096, 1023)
"""

DEFAULT_CUDA_INSIDE = DEFAULT_CUDA_AT_IMPORT.replace('torch.set_default_device("cuda")\n', "").replace(
    "def shapelint_model():\n", 'def shapelint_model():\n    torch.set_default_device("cuda")\n')

BUILT_ON_CUDA = """\
import torch
import torch.nn as nn


def shapelint_model():
    with torch.device("cuda"):
        return nn.Linear(1023, 1024), torch.randn(4096, 1023)
"""

INPUT_ON_CUDA = BUILT_ON_CUDA.replace('    with torch.device("cuda"):\n        return nn.Linear(1023, 1024), '
                                      'torch.randn(4096, 1023)',
                                      '    return nn.Linear(1023, 1024), torch.randn(4096, 1023, device="cuda")')

DEFAULT_CUDA_IN_FORWARD = """\
import torch
import torch.nn as nn


class M(nn.Linear):
    def forward(self, x):
        torch.set_default_device("cuda")
        return super().forward(x) + torch.ones(1024)


def shapelint_model():
    return M(1023, 1024), torch.randn(4096, 1023)
"""

FLOAT64_AT_IMPORT = MODEL.format(in_features=1023, comment="").replace(
    "import torch.nn as nn\n", "import torch.nn as nn\n\ntorch.set_default_dtype(torch.float64)\n")

#: lints the targets in this process (no child: the CLI from Python), then prints
#: torch's defaults as the process has them afterwards
SCRIPT = """\
import json, sys, torch
from shapelint.app.cli import main
rc = main([*sys.argv[1:], "--no-config", "--no-cache", "--format", "json"])
context = getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
print(json.dumps({"rc": rc, "context": repr(context), "device": str(torch.empty(1).device),
                  "dtype": str(torch.get_default_dtype())}), file=sys.stderr)
"""

_ON_CPU = ("shapelint traces on the CPU with fake tensors (no GPU needed): leave .to(device), .cuda() and device= "
           "out of the model and its inputs")
_DEFAULT = ("sets torch's default device to cuda (torch.set_default_device): shapelint builds and traces the model "
            "on the CPU with fake tensors (no GPU needed): leave torch.set_default_device out of the model's file "
            "(the training script can set it)")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA build builds on cuda for real")
def test_a_model_on_another_device_is_one_line_and_leaves_torch_as_it_was(here: Path) -> None:
    """Issue 24: ``torch.set_default_device('cuda')`` in a model file ended the process
    in SIGABRT with C++ frames (fake CUDA tensors in autograd on a CPU-only PyTorch), as
    did a model built with ``device='cuda'``; the default device and dtype stayed
    changed for the targets linted after it. Run in a child: a regression aborts it,
    not the test worker."""
    files = {"import.py": DEFAULT_CUDA_AT_IMPORT, "inside.py": DEFAULT_CUDA_INSIDE, "built.py": BUILT_ON_CUDA,
             "input.py": INPUT_ON_CUDA, "forward.py": DEFAULT_CUDA_IN_FORWARD, "f64.py": FLOAT64_AT_IMPORT,
             "good.py": MODEL.format(in_features=1023, comment="")}
    for name, body in files.items():
        (here / name).write_text(body)
    before = full_snapshot(here)
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *files], capture_output=True, text=True, cwd=here,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    *errors, last = proc.stderr.strip().splitlines()
    assert json.loads(last) == {"rc": 2, "context": "None", "device": "cpu", "dtype": "torch.float32"}
    assert errors == [
        f"shapelint: error: import.py: importing it {_DEFAULT}",
        f"shapelint: error: inside.py: shapelint_model() {_DEFAULT}",
        f"shapelint: error: built.py: the model puts parameter weight on cuda:0: {_ON_CPU}",
        f"shapelint: error: input.py: the model puts example input 0 on cuda:0: {_ON_CPU}",
        f"shapelint: error: forward.py: the model puts tensors on two devices (cpu and cuda:0): {_ON_CPU}",
    ]
    doc = json.loads(proc.stdout)
    # the targets after them are linted as on their own: the float64 default did not stay either
    assert [t["target"] for t in doc["targets"]] == ["f64.py", "good.py"]
    assert [(f["target"], f["suggestion"]) for f in doc["findings"] if f["code"] == "SL101"] == [
        (name, {"parameter": "in_features", "from": 1023, "to": 1024}) for name in ("f64.py", "good.py")]
    assert full_snapshot(here) == before


def test_the_boundary_restores_the_default_dtype_and_device(here: Path) -> None:
    from shapelint.load.usercode import call_user

    def changes() -> None:
        torch.set_default_dtype(torch.float64)
        torch.set_default_device("cpu")  # the device shapelint builds on: allowed, and put back

    call_user(changes, here / "m.py", "shapelint_model()")
    assert torch.get_default_dtype() == torch.float32
    assert getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None) is None
    assert torch.empty(1).dtype == torch.float32
