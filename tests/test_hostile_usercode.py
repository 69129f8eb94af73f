"""User code behind one boundary: every way out of it is one error line naming the
file, exit 2; it sees its own argv; what it prints stays off stdout; it writes no
bytecode and leaves the working directory, sys.path and sys.modules as they were."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from _cli_helpers import MODEL, run
from _hostile import full_snapshot, lint

from shapelint.errors import ShapelintError, one_line
from shapelint.load.usercode import call_user, import_user_file, run_user_rule, user_code

GOOD_BODY = MODEL.format(in_features=1023, comment="")


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("call", ["sys.exit(0)", "sys.exit(3)", "sys.exit()", "sys.exit('bye')", "raise SystemExit(0)"])
@pytest.mark.parametrize("where", ["import", "builder"])
def test_user_code_that_exits_is_an_error_not_a_green_run(here: Path, capsys: pytest.CaptureFixture[str],
                                                         call: str, where: str) -> None:
    """Issue 13: ``sys.exit(0)`` in a model file made shapelint exit 0 with no report."""
    body = f"import sys\n{call}\n" if where == "import" else f"import sys\n\ndef shapelint_model():\n    {call}\n"
    (here / "m.py").write_text(body)
    rc, out, err = lint(["m.py", "--format", "json"], here, capsys)
    assert rc == 2 and "m.py: " in err and "instead of returning" in err
    report = json.loads(out)  # the report is still written: no findings, the target in errors
    assert report["targets"] == [] and [e["target"] for e in report["errors"]] == ["m.py"]
    assert report["errors"][0]["message"] == err.strip().removeprefix("shapelint: error: ")


def test_yaml_builder_that_exits(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "build.py").write_text("import sys\n\ndef build():\n    sys.exit(0)\n")
    (here / "t.yaml").write_text("model: build.py:build\ninputs: [[4, 4]]\n")
    rc, _, err = lint(["t.yaml"], here, capsys)
    assert rc == 2 and "build.py: builder build.py:build (from t.yaml) called sys.exit(0)" in err


def test_script_parsing_its_arguments_at_import(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 13: ``parse_args()`` at import saw shapelint's argv and printed its usage
    as if it were shapelint's."""
    (here / "train.py").write_text(
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--lr', type=float, default=1e-3)\n"
        "args = p.parse_args()\n" + GOOD_BODY)
    rc, out, err = lint(["train.py", "--format", "json", "--select", "SL101"], here, capsys)
    assert rc == 1 and json.loads(out)["findings"], err
    assert "usage" not in err
    (here / "req.py").write_text(
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--data', required=True)\np.parse_args()\n")
    rc, _, err = lint(["req.py"], here, capsys)
    assert rc == 2 and "req.py: importing it called sys.exit(2)" in err
    assert "the following arguments are required: --data" in err


@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_what_user_code_prints_stays_off_stdout(here: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    """Issue 13: prints at import and in shapelint_model() landed before the JSON document."""
    (here / "loud.py").write_text("print('importing')\n" + GOOD_BODY.replace(
        "def shapelint_model():\n", "def shapelint_model():\n    print('building')\n"))
    rc, out, err = lint(["loud.py", "--format", fmt], here, capsys)
    assert rc == 1
    json.loads(out)
    assert "importing" in err and "building" in err


def test_no_bytecode_beside_user_code(here: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 13: every imported target, builder and helper left ``__pycache__``."""
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    (here / "helpers.py").write_text("WIDTH = 1023\n")
    (here / "m.py").write_text("from helpers import WIDTH\n" + GOOD_BODY)
    (here / "build.py").write_text("import torch.nn as nn\nimport helpers\n\ndef build():\n"
                                   "    return nn.Linear(helpers.WIDTH, 64)\n")
    (here / "t.yaml").write_text("model: build.py:build\ninputs: [[64, 1023]]\n")
    rc, _, err = lint(["m.py", "t.yaml"], here, capsys)
    assert rc == 1, err
    assert not list(here.rglob("__pycache__"))
    assert sys.dont_write_bytecode is False


def test_working_directory_path_and_modules_are_restored(here: Path) -> None:
    (here / "sub").mkdir()
    (here / "helpers.py").write_text("X = 1\n")
    (here / "m.py").write_text("import os, sys, helpers\nos.chdir('sub')\nsys.path.append('/nowhere')\n")
    cwd, path, argv = os.getcwd(), list(sys.path), list(sys.argv)
    import_user_file(here / "m.py")
    assert (os.getcwd(), sys.path, sys.argv) == (cwd, path, argv)
    assert "helpers" not in sys.modules  # the next target's helpers.py is its own


def test_two_targets_each_with_their_own_helpers(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, width in (("a", 1023), ("b", 1024)):
        (here / name).mkdir()
        (here / name / "helpers.py").write_text(f"WIDTH = {width}\n")
        (here / name / "m.py").write_text("from helpers import WIDTH\n" + GOOD_BODY.replace("1023", "{WIDTH}")
                                          .replace("nn.Linear({WIDTH}", "nn.Linear(WIDTH").replace(
                                              "randn(4096, {WIDTH})", "randn(4096, WIDTH)"))
    rc, out, _ = lint(["a/m.py", "b/m.py", "--format", "json", "--select", "SL101"], here, capsys)
    assert rc == 1
    assert {f["target"] for f in json.loads(out)["findings"]} == {"a/m.py"}


def test_keyboard_interrupt_stays_an_interrupt(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "m.py").write_text("raise KeyboardInterrupt\n")
    rc, _, err = run(["m.py", "--no-config"], capsys)
    assert rc == 130 and "interrupted" in err


def test_syntax_error_names_file_and_line(here: Path) -> None:
    (here / "bad.py").write_text("x = 1\ndef f(:\n")
    with pytest.raises(ShapelintError, match=r"bad\.py:2: syntax error"):
        import_user_file(here / "bad.py")


def test_rule_check_behind_the_boundary(here: Path) -> None:
    """Issue 13: a rule whose check() raised was an internal error."""
    def check(gemms: list[int]) -> object:
        yield from gemms
        raise ValueError("bad rule\nsecond line")

    with pytest.raises(ShapelintError) as info:
        run_user_rule(check, here / "my_rule.py", "SL999", [1, 2])
    assert str(info.value) == f"{here / 'my_rule.py'}: rule SL999: check() raised ValueError: bad rule"
    assert run_user_rule(lambda g: iter(g), "r.py", "SL998", [1, 2]) == [1, 2]

    def exits(gemms: list[int]) -> list[int]:
        raise SystemExit(0)

    with pytest.raises(ShapelintError, match="rule SL997: check\\(\\) called sys.exit\\(0\\)"):
        run_user_rule(exits, "r.py", "SL997", [])


def test_base_exceptions_other_than_interrupt_are_wrapped(here: Path) -> None:
    def gen_exit() -> None:
        raise GeneratorExit

    with pytest.raises(ShapelintError, match="raised GeneratorExit"):
        call_user(gen_exit, "x.py", "f()")
    with pytest.raises(KeyboardInterrupt), user_code("x.py", "f()"):
        raise KeyboardInterrupt


def test_one_line_follows_the_cause_and_caps_length() -> None:
    try:
        try:
            raise ValueError("Value error, validator 'validate_architecture':\n  hidden size 10 is not a multiple of 3")
        except ValueError as inner:
            raise RuntimeError("cannot build") from inner
    except RuntimeError as exc:
        text = one_line(exc)
    assert text == ("RuntimeError: cannot build: ValueError: Value error, validator 'validate_architecture': "
                    "hidden size 10 is not a multiple of 3")
    assert len(one_line(ValueError("x" * 9800), cap=300)) == 300


def test_wrong_input_width_prints_no_torch_traceback(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 13: the fake-tensor logger printed a 19-line traceback before the error."""
    (here / "m.py").write_text(GOOD_BODY.replace("randn(4096, 1023)", "randn(4096, 1000)"))
    rc, _, err = lint(["m.py"], here, capsys)
    assert rc == 2 and "cannot trace the model" in err


def test_snapshot_sees_pycache(here: Path) -> None:
    (here / "__pycache__").mkdir()
    assert "__pycache__/" in full_snapshot(here)
