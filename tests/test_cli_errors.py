"""Bad input of every kind: exit code 2 and one line on stderr, ``shapelint: error: ...``,
never a traceback; and the linter never writes into the user's files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from _cli_helpers import assert_one_error_line, run, snapshot, write_model

GPT2_TINY = {
    "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 512, "n_positions": 64,
    "n_embd": 64, "n_layer": 1, "n_head": 4,
}


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    write_model(tmp_path)
    return tmp_path


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str], *expected: str) -> str:
    rc, out, err = run([*argv, "--no-config"], capsys)
    assert rc == 2, (out, err)
    assert_one_error_line(err)
    for text in expected:
        assert text in err, err
    return err


def test_unknown_option(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fails(["model.py", "--bogus"], capsys, "unrecognized arguments: --bogus")


def test_unknown_rule_code(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fails(["model.py", "--select", "SL999"], capsys, "unknown rule code 'SL999'", "SL101")
    _fails(["model.py", "--ignore", "XX1"], capsys, "unknown rule code 'XX1'")


def test_unknown_gpu_lists_the_known(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fails(["model.py", "--gpu", "tpu-v5"], capsys, "unknown GPU 'tpu-v5'", "h100", "a100")


def test_unknown_dtype_format_and_bad_numbers(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fails(["model.py", "--dtype", "fp9"], capsys, "--dtype", "'fp9'", "bf16")
    _fails(["model.py", "--format", "xml"], capsys, "--format", "sarif", "github")
    _fails(["model.py", "--batch", "0"], capsys, "positive integer")
    _fails(["model.py", "--tp", "-2"], capsys, "positive integer")
    _fails(["model.py", "--min-speedup", "nan"], capsys, "positive number")
    _fails(["model.py", "--min-loss", "2"], capsys, "below 1")


def test_no_target(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fails([], capsys, "no target given")


def test_missing_file_and_other_kinds_of_file(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fails(["nope.py"], capsys, "nope.py: no such file or directory")
    (here / "notes.txt").write_text("hello\n")
    _fails(["notes.txt"], capsys, "notes.txt: not a Python file, a config.json, a shapelint YAML or a directory")
    (here / "empty").mkdir()
    _fails(["empty"], capsys, "empty: no config.json or shapelint YAML")


def test_python_file_problems(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "raises.py").write_text("raise RuntimeError('no GPU here\\nsecond line')\n")
    _fails(["raises.py"], capsys, "raises.py", "RuntimeError: no GPU here")
    (here / "builder_raises.py").write_text("def shapelint_model():\n    raise ValueError('bad width')\n")
    _fails(["builder_raises.py"], capsys, "shapelint_model() raised ValueError: bad width")
    (here / "nothing.py").write_text("import torch\n")
    _fails(["nothing.py"], capsys, "nothing.py: defines no shapelint_model()")
    (here / "syntax.py").write_text("def shapelint_model(:\n")
    _fails(["syntax.py"], capsys, "syntax.py:1: syntax error")


def test_data_dependent_shapes(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "dyn.py").write_text("""\
import torch
import torch.nn as nn


class Masked(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x):
        return self.fc(x[: int((x > 0).sum())])


def shapelint_model():
    return Masked(), torch.randn(64, 64)
""")
    # a count read on the host decides the batch: one line naming the line (a boolean
    # mask that indexes is answered instead: tests/test_host_reads.py)
    _fails(["dyn.py"], capsys, "a value read on the host decides what the step runs",
           "dyn.py:11: return self.fc(x[: int((x > 0).sum())])", "pass it in as a Python value")


def test_yaml_target_errors(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "build.py").write_text("import torch.nn as nn\n\n\ndef build(width):\n    return nn.Linear(width, 64)\n")
    (here / "syntax.yaml").write_text("model: build.py:build\nkwargs:\n  width: [1024\n")
    _fails(["syntax.yaml"], capsys, "syntax.yaml:4: YAML syntax error")
    for value in (0, -8):
        (here / "dims.yaml").write_text(f"model: build.py:build\nkwargs:\n  width: {value}\ninputs: [[64, 64]]\n")
        _fails(["dims.yaml"], capsys, f"kwargs.width = {value}: dimensions must be positive")
    (here / "shape.yaml").write_text("model: build.py:build\nkwargs: {width: 64}\ninputs: [[0, 64]]\n")
    _fails(["shape.yaml"], capsys, "zero or negative dimension")


def test_json_config_errors(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "broken.json").write_text('{\n  "model_type": "gpt2",\n  "n_embd": ,\n}\n')
    _fails(["broken.json"], capsys, "broken.json:3: JSON syntax error")


def test_config_json_without_transformers(here: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    (here / "config.json").write_text(json.dumps(GPT2_TINY))
    monkeypatch.setitem(sys.modules, "transformers", None)
    _fails(["config.json"], capsys, "needs transformers", "pip install 'shapelint[hf]'")


def test_config_json_with_zero_or_negative_dimensions(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    for key, value in (("n_embd", 0), ("n_layer", -1)):
        (here / "config.json").write_text(json.dumps({**GPT2_TINY, key: value}, indent=2))
        _fails(["config.json"], capsys, f"{key} = {value}: dimensions must be positive")


def test_toml_config_syntax_error(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.shapelint]\ngpu = "h100\n')
    rc, out, err = run(["model.py"], capsys)
    assert rc == 2
    assert_one_error_line(err)
    assert "pyproject.toml:5: TOML syntax error" in err


def test_output_to_a_missing_folder(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fails(["model.py", "-o", "no/such/dir/report.txt"], capsys, "--output no/such/dir/report.txt")


def test_exit_codes(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["model.py", "--no-config", "--select", "SL101"], capsys)[0] == 1
    assert run(["model.py", "--no-config", "--select", "SL101", "--exit-zero"], capsys)[0] == 0
    write_model(here, "clean.py", in_features=1024)
    assert run(["clean.py", "--no-config", "--select", "SL101"], capsys)[0] == 0
    # --exit-zero does not hide errors
    assert run(["nope.py", "--no-config", "--exit-zero"], capsys)[0] == 2


def test_never_writes_user_files(here: Path, capsys: pytest.CaptureFixture[str],
                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    (here / "build.py").write_text("import torch.nn as nn\n\n\ndef build(width):\n    return nn.Linear(width, 64)\n")
    (here / "t.yaml").write_text("model: build.py:build\nkwargs: {width: 1023}\ninputs: [[64, 1023]]\n")
    (here / "pyproject.toml").write_text('[tool.shapelint]\nselect = ["SL101"]\n')
    write_model(here, "sup.py", comment="# shapelint: ignore[SL101]")
    before = snapshot(here)
    out = tmp_path_factory.mktemp("reports")
    for fmt in ("text", "json", "sarif", "github"):
        rc, _, err = run(["model.py", "t.yaml", "sup.py", "--format", fmt, "-o", out / fmt, "--statistics",
                          "--show-suppressed"], capsys)
        assert rc == 1, err
    assert snapshot(here) == before


def test_skip_other_files(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What pre-commit passes: only files that can be targets are linted (read, not imported)."""
    (here / "helper.py").write_text("raise SystemExit('imported!')\n")
    (here / "notes.txt").write_text("hello\n")
    (here / "package.json").write_text('{"name": "x"}\n')
    (here / "ci.yaml").write_text("on: push\njobs: {}\n")
    others = ["helper.py", "notes.txt", "package.json", "ci.yaml"]
    rc, out, err = run([*others, "--no-config", "--skip-other-files", "--format", "json"], capsys)
    assert rc == 0 and err == "" and json.loads(out)["findings"] == []
    rc, out, err = run([*others, "model.py", "--no-config", "--skip-other-files", "--select", "SL101"], capsys)
    assert rc == 1 and out.startswith("model.py") and "helper.py" not in out, err
    # without the flag a non-target is an error
    _fails(["notes.txt"], capsys, "notes.txt")


def test_bad_values_of_the_ruff_flags(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fails(["model.py", "--output-format", "xml"], capsys, "--output-format", "invalid choice: 'xml'")
    _fails(["model.py", "--color", "sometimes"], capsys, "invalid choice: 'sometimes'")
    _fails(["model.py", "--extend-select", "SL777"], capsys, "unknown rule code 'SL777'")
    for argv, expected in ((["rule"], "give a rule code (shapelint rule SL501) or --all"),
                           (["rule", "SL101", "--all"], "give a rule code"),
                           (["rule", "SL999"], "unknown rule 'SL999' (known: SL101,"),
                           (["rule", "SL101", "--output-format", "sarif"], "invalid choice: 'sarif'")):
        rc, out, err = run(argv, capsys)
        assert rc == 2 and out == "", (out, err)
        assert_one_error_line(err)
        assert expected in err, err
