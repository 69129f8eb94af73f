"""The fixes in the machine outputs: every edit the JSON report's ``fix`` and the SARIF
``fixes`` carry, applied to a copy of the project, gives exactly the files ``--fix``
writes: on a Hugging Face config.json, a shapelint YAML and Python files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from _cli_helpers import run
from conftest import EXAMPLES
from test_fix import HF_CONFIG

#: the targets of tests/test_fix.py: at 8 x 1024 tokens the GPT-2 config's vocabulary is reported
TARGETS = ["convnet.py", "mlp.py", "mlp.yaml", "hf/config.json", "--seq", "1024", "--no-config", "--no-cache"]


def _project(folder: Path) -> Path:
    folder.mkdir()
    for name in ("convnet.py", "mlp.py", "mlp.yaml"):
        shutil.copy(EXAMPLES / name, folder / name)
    (folder / "hf").mkdir()
    (folder / "hf" / "config.json").write_text(HF_CONFIG)
    return folder


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def _apply(folder: Path, edits: list[tuple[str, int, int, int, int, str]]) -> None:
    """Apply (file, start row, start column, end row, end column, text) edits, 1-based and
    end-exclusive, in characters, the last first within each file; the same edit of two
    findings once."""
    by_file: dict[str, list[tuple[int, int, int, int, str]]] = {}
    for file, *rest in sorted(set(edits)):
        by_file.setdefault(file, []).append(tuple(rest))  # type: ignore[arg-type]
    for file, spans in by_file.items():
        path = folder / file
        text = path.read_bytes().decode("utf-8")
        starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
        for r0, c0, r1, c1, new in sorted(spans, reverse=True):
            a, b = starts[r0 - 1] + c0 - 1, starts[r1 - 1] + c1 - 1
            text = text[:a] + new + text[b:]
        path.write_bytes(text.encode("utf-8"))


def _json_edits(doc: dict[str, Any]) -> list[tuple[str, int, int, int, int, str]]:
    return [(e["file"], e["location"]["row"], e["location"]["column"], e["end_location"]["row"],
             e["end_location"]["column"], e["content"])
            for f in doc["findings"] if f["fix"] is not None for e in f["fix"]["edits"]]


def _sarif_edits(doc: dict[str, Any]) -> list[tuple[str, int, int, int, int, str]]:
    out = []
    for result in doc["runs"][0]["results"]:
        for fix in result.get("fixes", []):
            for change in fix["artifactChanges"]:
                file = unquote(change["artifactLocation"]["uri"])
                for rep in change["replacements"]:
                    reg = rep["deletedRegion"]
                    out.append((file, reg["startLine"], reg["startColumn"], reg["endLine"], reg["endColumn"],
                                rep["insertedContent"]["text"]))
    return out


@pytest.mark.slow
def test_machine_fixes_equal_what_fix_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    fixed, copy_json, copy_sarif = (_project(tmp_path / name) for name in ("fixed", "json", "sarif"))
    monkeypatch.chdir(copy_json)
    rc, out, _ = run([*TARGETS, "--format", "json"], capsys)
    doc = json.loads(out)
    json_edits = _json_edits(doc)
    monkeypatch.chdir(copy_sarif)
    rc, out, _ = run([*TARGETS, "--format", "sarif"], capsys)
    sarif_edits = _sarif_edits(json.loads(out))
    assert sorted(sarif_edits) == sorted(json_edits)
    # one edit per fixed token: 4 in convnet.py, 1 in the config, and the YAML's 5461 twice (the out_features
    # of one layer and the in_features of the next are one token: the same edit, applied once); none in mlp.py
    assert sorted((file, new) for file, *_, new in json_edits) == [
        ("convnet.py", "104"), ("convnet.py", "104"), ("convnet.py", "64"), ("convnet.py", "64"),
        ("hf/config.json", "50264"), ("mlp.yaml", "5464"), ("mlp.yaml", "5464")]
    assert len(set(json_edits)) == 6
    vocab = next(f for f in doc["findings"] if f["code"] == "SL501")
    assert vocab["fix"]["applicability"] == "safe"
    assert vocab["fix"]["edits"] == [{"file": "hf/config.json", "content": "50264", "location": {"row": 6, "column": 17},
                                      "end_location": {"row": 6, "column": 22}}]
    assert all(f["fix"] is None for f in doc["findings"] if f["target"] == "mlp.py")  # not provable: no edit

    monkeypatch.chdir(fixed)
    before = _files(fixed)
    run([*TARGETS, "--fix"], capsys)
    assert _files(fixed) != before
    _apply(copy_json, json_edits)
    _apply(copy_sarif, sarif_edits)
    assert _files(copy_json) == _files(fixed)
    assert _files(copy_sarif) == _files(fixed)
