"""A ruff user's reflexes: ``--output-format`` (``--format`` stays), the ``concise``
format, ``--show-settings``, ``shapelint rule``, ``--extend-select``/``--extend-ignore``
(flags and configuration), ``SL900`` unused suppressions, ``--quiet``, ``--color``; and the
commands that lint nothing import no torch."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _cli_helpers import LINEAR_LINE, run, write_model

from shapelint.app import rule_index
from shapelint.check.run import builtin_rules


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    write_model(tmp_path)
    return tmp_path


def test_output_format_is_format(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(["model.py", "--no-config", "--no-cache", "--output-format", "json"], capsys)
    assert rc == 1 and json.loads(out)["findings"][0]["code"] == "SL101"
    rc, out2, _ = run(["model.py", "--no-config", "--no-cache", "--format", "json"], capsys)
    assert json.loads(out2)["findings"] == json.loads(out)["findings"]


def test_concise_is_one_line_per_finding(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(["model.py", "--no-config", "--no-cache", "--output-format", "concise"], capsys)
    lines = out.splitlines()
    column = (here / "model.py").read_text().splitlines()[LINEAR_LINE - 1].index("1023") + 1  # the value --fix edits
    assert rc == 1 and column == 37
    assert lines[0].startswith(f"model.py:{LINEAR_LINE}:37: SL101 [*] misaligned-leading-dim: in_features: 1023 → 1024 "
                               "(est. ")
    assert lines[1:] == ["Found 1 finding.", "[*] 1 fixable with --fix."]
    rc, out, _ = run(["model.py", "--no-config", "--no-cache", "--output-format", "concise", "-q"], capsys)
    assert len(out.splitlines()) == 1  # --quiet: the findings alone


def test_concise_clean_and_config_key(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_model(here, "ok.py", in_features=1024)
    rc, out, _ = run(["ok.py", "--no-config", "--no-cache", "--output-format", "concise"], capsys)
    assert (rc, out) == (0, "All checks passed!\n")
    (here / "cfg.yaml").write_text("output-format: concise\n")  # ruff's key spells the format setting too
    rc, out, _ = run(["model.py", "--config", "cfg.yaml", "--no-cache"], capsys)
    assert rc == 1 and out.endswith("Found 1 finding.\n[*] 1 fixable with --fix.\n")


def test_quiet_text_prints_findings_only(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(["model.py", "--no-config", "--no-cache", "--quiet"], capsys)
    assert rc == 1 and "SL101" in out
    assert "forward +" not in out and "training step (est." not in out and "1 finding" not in out


def test_color_always_and_never(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(["model.py", "--no-config", "--no-cache", "--color", "always"], capsys)
    assert "\x1b[" in out
    _, out, _ = run(["model.py", "--no-config", "--no-cache", "--color", "never"], capsys)
    assert "\x1b[" not in out
    rc, _, err = run(["model.py", "--color", "sometimes"], capsys)
    assert rc == 2 and "invalid choice: 'sometimes'" in err


def test_extend_select_and_ignore(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(["--list-rules", "--no-config"], capsys)
    codes = [line.split()[0] for line in out.splitlines()]
    assert "SL900" not in codes and len(codes) == 13  # opt-in: off by default (SL101 ... SL603)
    _, out, _ = run(["--list-rules", "--no-config", "--select", "SL1", "--extend-select", "SL900,SL501"], capsys)
    assert [line.split()[0] for line in out.splitlines()] == ["SL101", "SL102", "SL501", "SL900"]
    _, out, _ = run(["--list-rules", "--no-config", "--extend-ignore", "SL2", "--ignore", "SL101"], capsys)
    assert [line.split()[0] for line in out.splitlines()] == ["SL102", "SL301", "SL302", "SL401", "SL402", "SL501", "SL601",
                                                                "SL602", "SL603"]
    _, out, _ = run(["--list-rules", "--no-config", "--select", "SL"], capsys)  # "every rule", as before
    assert "SL900" not in out
    (here / ".shapelint.yaml").write_text("extend-select: [SL900]\nextend-ignore: [SL5]\n")
    _, out, _ = run(["--list-rules"], capsys)
    assert "SL900" in out and "SL501" not in out
    (here / ".shapelint.yaml").write_text("extend-select: [SL777]\n")
    rc, _, err = run(["--list-rules"], capsys)
    assert rc == 2 and ".shapelint.yaml:1: extend-select: unknown rule code 'SL777'" in err


def test_unused_suppression(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_model(here, "clean.py", in_features=1024, comment="# shapelint: ignore[SL101]")
    write_model(here, "used.py", comment="# shapelint: ignore[SL101, SL202]")
    argv = ["--no-config", "--no-cache", "--output-format", "concise"]
    rc, out, _ = run(["clean.py", "used.py", *argv], capsys)
    assert rc == 0 and out == "All checks passed!\n"  # off by default
    rc, out, _ = run(["clean.py", "used.py", *argv, "--extend-select", "SL900"], capsys)
    assert rc == 1
    assert out.splitlines() == [
        f"clean.py:{LINEAR_LINE}:1: SL900 unused-suppression: unused code in '# shapelint: ignore[...]': SL101 "
        "(no finding of it on this line): remove it",
        # SL202 ran and found nothing on the line; SL101's finding is suppressed (used)
        f"used.py:{LINEAR_LINE}:1: SL900 unused-suppression: unused code in '# shapelint: ignore[...]': SL202 "
        "(no finding of it on this line): remove it",
        "Found 2 findings.",
    ]
    # a code of a rule that did not run says nothing about this run
    rc, out, _ = run(["clean.py", *argv, "--select", "SL2", "--extend-select", "SL900"], capsys)
    assert (rc, out) == (0, "All checks passed!\n")
    write_model(here, "bare.py", in_features=1024, comment="# shapelint: ignore")
    rc, out, _ = run(["bare.py", *argv, "--extend-select", "unused-suppression"], capsys)
    assert "bare.py:6:1: SL900 unused-suppression: '# shapelint: ignore' suppresses nothing on this line" in out


def test_show_settings(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / ".shapelint.yaml").write_text("gpu: a100\nmin-speedup: 1.2\n")
    rc, out, _ = run(["--show-settings", "--dtype", "fp16"], capsys)
    assert rc == 0
    assert "configuration file: .shapelint.yaml" in out
    assert 'gpu = "a100"  # .shapelint.yaml:1' in out
    assert "min-speedup = 1.2  # .shapelint.yaml:2" in out
    assert 'dtype = "fp16"  # command line' in out
    assert "min-loss = 0.05  # default" in out and "gemms = true  # default" in out
    assert "rules (13 selected):" in out and "  SL501  vocab-padding" in out


def test_rule_prints_its_documentation(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(["rule", "SL501"], capsys)
    assert rc == 0
    assert out.startswith("# vocab-padding (SL501)\n\nSeverity: error\n\n")
    assert "## Why is this bad?" in out and "50264" in out
    assert run(["rule", "vocab-padding"], capsys)[1] == out  # by name too
    rc, out, _ = run(["rule", "--all"], capsys)
    assert [line for line in out.splitlines() if re.fullmatch(r"# [a-z-]+ \(SL\d+\)", line)] == [
        f"# {r.name} ({r.code})" for r in rule_index.rules()]
    rc, out, _ = run(["rule", "SL900", "--output-format", "json"], capsys)
    assert json.loads(out)["name"] == "unused-suppression" and json.loads(out)["opt_in"] is True
    rc, _, err = run(["rule", "SL999"], capsys)
    assert rc == 2 and "unknown rule 'SL999'" in err


def test_index_agrees_with_the_imported_rules() -> None:
    """The index reads the rule modules without importing them: what it reads is what
    importing them gives (the rule module stays the one place of its code and doc)."""
    assert [(r.code, r.name, r.severity, r.doc) for r in rule_index.builtin()] == \
        [(r.code, r.name, r.severity, r.doc) for r in builtin_rules()]


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["--list-rules"], ["rule", "SL501"], ["rule", "--all"],
                                  ["--show-settings"]])
def test_commands_that_lint_nothing_import_no_torch(argv: list[str], tmp_path: Path) -> None:
    """Not a timing test: torch (2-3 s to import) must not be imported at all."""
    code = ("import sys\nfrom shapelint.app.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))[:5]\n")
    proc = subprocess.run([sys.executable, "-c", code, *argv, *([] if argv[0] == "rule" else [])],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_unused_suppression_in_sarif_has_its_documentation(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from test_formats import check_sarif

    write_model(here, "clean.py", in_features=1024, comment="# shapelint: ignore[SL101]")
    rc, out, _ = run(["clean.py", "--no-config", "--no-cache", "--output-format", "sarif", "--extend-select", "SL900"],
                     capsys)
    doc = json.loads(out)
    check_sarif(doc)  # every descriptor has its full description and help
    [result] = doc["runs"][0]["results"]
    assert rc == 1 and result["ruleId"] == "SL900" and result["level"] == "warning"
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == LINEAR_LINE


def test_an_unused_suppression_finding_is_suppressed_by_its_own_code(here: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """As ruff's RUF100 under its own code: the SL900 finding was added after the
    comments were applied, so no comment could silence it."""
    write_model(here, "keep.py", in_features=1024, comment="# shapelint: ignore[SL101, SL900]")
    argv = ["--no-config", "--no-cache", "--output-format", "concise", "--extend-select", "SL900"]
    rc, out, _ = run(["keep.py", *argv], capsys)
    assert (rc, out) == (0, "All checks passed!\n")


def test_a_prefix_as_short_as_the_family_does_not_select_an_opt_in_rule(here: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    for prefix in ("S", "SL"):
        _, out, _ = run(["--list-rules", "--no-config", "--select", prefix], capsys)
        assert "SL900" not in out and "SL101" in out
