"""``# shapelint: ignore[...]`` comments and --show-suppressed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _cli_helpers import LINEAR_LINE, run, snapshot, write_model

from shapelint.locate.suppress import ALL, LineReader, apply, codes_on_line
from shapelint.model.records import Finding, Source

ARGS = ["--no-config", "--select", "SL101"]


@pytest.mark.parametrize("line,codes", [
    ("x = 1", None),
    ("x = nn.Linear(1023, 64)  # shapelint: ignore[SL101]", {"SL101"}),
    ("x  #shapelint:ignore[ SL101 , SL201 ]", {"SL101", "SL201"}),
    ("x  # SHAPELINT: IGNORE[misaligned-leading-dim]", {"misaligned-leading-dim"}),
    ("x  # shapelint: ignore", ALL),
    ("x  # shapelint: ignore  (padding costs memory here)", ALL),
    ("x  # shapelint: ignore[]", set()),
    ("x  # noqa: E501  # shapelint: ignore[SL101]", {"SL101"}),
    ("x  # shapelint: ignored", None),
    ("x  # shapelint: ignore-all", None),
    ("x  # shapelint: ignore, padding would cost memory", ALL),
])
def test_codes_on_line(line: str, codes: object) -> None:
    got = codes_on_line(line)
    assert (got if got is None or got is ALL else set(got)) == codes


def _finding(file: str, line: int, code: str = "SL101") -> Finding:
    return Finding(code, "misaligned-leading-dim", "error", "fc", "msg", (0,), 1.0, 0.5, source=Source(file, line))


def test_apply_reads_the_line_a_finding_points_at(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("a = 1  # shapelint: ignore[SL101]\nb = 2  # shapelint: ignore[SL201]\nc = 3\n")
    before = snapshot(tmp_path)
    out = apply([_finding(str(src), 1), _finding(str(src), 2), _finding(str(src), 3),
                 _finding(str(src), 99), _finding(str(tmp_path / "gone.py"), 1),
                 Finding("SL101", "n", "error", "fc", "msg", (0,), 1.0, 0.5)])
    assert [f.suppressed for f in out] == [True, False, False, False, False, False]
    assert snapshot(tmp_path) == before


def test_reader_reads_each_file_once(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("a\n")
    reader = LineReader()
    assert reader.line(str(src), 1) == "a"
    src.write_text("b\n")
    assert reader.line(str(src), 1) == "a"


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("comment", ["# shapelint: ignore[SL101]", "# shapelint: ignore",
                                     "# shapelint: ignore[SL203, misaligned-leading-dim]"])
def test_suppressed_finding_does_not_fail(here: Path, capsys: pytest.CaptureFixture[str], comment: str) -> None:
    write_model(here, comment=comment)
    before = snapshot(here)
    rc, out, err = run(["model.py", *ARGS], capsys)
    assert rc == 0, out + err
    assert "SL101" not in out and "no findings" in out
    rc, out, err = run(["model.py", *ARGS, "--show-suppressed"], capsys)
    assert rc == 0
    assert "SL101" in out and "(suppressed)" in out
    assert snapshot(here) == before  # the linter never writes the user's file


def test_comment_for_another_rule_does_not_suppress(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_model(here, comment="# shapelint: ignore[SL201]")
    rc, out, _ = run(["model.py", *ARGS], capsys)
    assert rc == 1 and "SL101" in out


def test_comment_on_another_line_does_not_suppress(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_model(here)
    lines = path.read_text().splitlines()
    lines[LINEAR_LINE] += "  # shapelint: ignore"  # the line after the constructor
    path.write_text("\n".join(lines) + "\n")
    rc, out, _ = run(["model.py", *ARGS], capsys)
    assert rc == 1


def test_json_omits_suppressed_unless_asked(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_model(here, comment="# shapelint: ignore[SL101]")
    rc, out, _ = run(["model.py", *ARGS, "--format", "json"], capsys)
    doc = json.loads(out)
    assert rc == 0 and doc["findings"] == []
    assert doc["summary"]["findings"] == 0 and doc["summary"]["suppressed"] == 1
    # a suppressed finding is not counted in the estimated speedup either
    assert doc["summary"]["est_ms_after"] == doc["summary"]["est_ms"]
    rc, out, _ = run(["model.py", *ARGS, "--format", "json", "--show-suppressed"], capsys)
    doc = json.loads(out)
    (f,) = doc["findings"]
    assert f["code"] == "SL101" and f["suppressed"] is True and f["source"]["line"] == LINEAR_LINE
    assert rc == 0


def test_sarif_marks_suppressed_only_when_shown(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_model(here, comment="# shapelint: ignore")
    _, out, _ = run(["model.py", *ARGS, "--format", "sarif"], capsys)
    assert json.loads(out)["runs"][0]["results"] == []
    _, out, _ = run(["model.py", *ARGS, "--format", "sarif", "--show-suppressed"], capsys)
    (res,) = json.loads(out)["runs"][0]["results"]
    assert res["suppressions"] == [{"kind": "inSource"}]


def test_yaml_target_comment_on_the_config_key(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A YAML target's finding points at its kwargs line: a comment there suppresses it."""
    (here / "build.py").write_text(
        "import torch.nn as nn\n\n\ndef build(width):\n    return nn.Sequential(nn.Linear(width, 1024))\n")
    target = here / "target.yaml"
    body = "model: build.py:build\nkwargs:\n  width: 1023{c}\ninputs:\n  - shape: [4096, 1023]\n"
    target.write_text(body.format(c=""))
    rc, out, err = run(["target.yaml", *ARGS, "--format", "json"], capsys)
    assert rc == 1, err
    (f,) = json.loads(out)["findings"]
    assert f["source"] == {"file": "target.yaml", "line": 3}
    target.write_text(body.format(c="  # shapelint: ignore[SL101]"))
    rc, out, err = run(["target.yaml", *ARGS], capsys)
    assert rc == 0, out + err
