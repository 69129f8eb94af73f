"""The application layer the command and the Python API share (issue 25): a typed
``Request`` from flags and configuration, ``run(request) -> Outcome``, ``render`` and
the exit code; one option precedence (``LintPlan``) and one suppression for both."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from _cli_helpers import LINEAR_LINE, run, write_model

import shapelint
from shapelint import hardware
from shapelint.app.config import Config
from shapelint.app.lint_plan import LintPlan, RuleSet, select_rules
from shapelint.app.parser import build_parser
from shapelint.app.render import render, report
from shapelint.app.request import Request
from shapelint.app.run import Linted, NothingToLint, Replayed, RuleList
from shapelint.app.run import run as run_request
from shapelint.errors import ShapelintError
from shapelint.pipeline.settings import Settings
from shapelint.price import Policy


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SHAPELINT_NO_CACHE", "1")
    return tmp_path


def request(*argv: str) -> Request:
    return Request.from_args(build_parser().parse_args(list(argv)))


def test_request_reads_flags_then_configuration(here: Path) -> None:
    (here / ".shapelint.yaml").write_text("format: json\nexit-zero: true\ndtype: fp16\n")
    r = request("model.py", "--dtype", "fp32", "-o", "out.json", "--rules-dir", "extra")
    assert r.targets == ("model.py",) and r.output == "out.json" and r.rules_dirs == ("extra",)
    assert r.flags.dtype == "fp32" and r.config.dtype == "fp16" and r.settings.dtype == "fp32"
    assert r.format == "json" and r.exit_zero
    assert request("model.py", "--no-config").format == "text" and not request("--no-config").exit_zero
    with pytest.raises(ShapelintError, match="exclude each other"):
        request("--config", ".shapelint.yaml", "--no-config")
    with pytest.raises(ShapelintError, match="--step needs --verify"):
        request("--step")


def test_options_precedence_flag_target_configuration_default(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text("model: x.py:build\ndtype: fp16\ngpu: a100\n")
    rules = RuleSet((), [])
    cfg = Config(dtype="fp32", batch=4, seq=64, min_speedup=1.5, gpu="l4", allow_builders=["pkg"])
    plan = LintPlan(Settings(batch=2, min_loss=0.2), rules, cfg, gpu=None, config_gpu=hardware.resolve("l4"))
    path, opts, hw = plan.job(tmp_path / "t.yaml")
    assert opts.dtype is None  # the target's own dtype wins over the configuration's
    assert hw is None  # ... and its own gpu
    assert (opts.batch, opts.seq, opts.allow_builders) == (2, 64, ("pkg",))  # flag, configuration
    assert opts.policy == Policy(min_loss=0.2, min_speedup=1.5, min_step_share=0.01)  # flag, configuration, default
    _, opts, hw = plan.job(tmp_path / "other.py")
    assert opts.dtype == "fp32" and hw is not None and hw.name == hardware.resolve("l4").name
    # no flag, no configuration: the API's plan gives the built-in policy and leaves the rest to the target
    bare = LintPlan(Settings(), rules).options()
    assert bare.policy == Policy() and (bare.dtype, bare.training, bare.batch) == (None, None, None)
    assert LintPlan(Settings(inference=True), rules).options().training is False


def test_configuration_rule_codes_are_checked_with_their_line(tmp_path: Path) -> None:
    from shapelint.app.config import read_config

    (tmp_path / "c.yaml").write_text("gpu: h100\nignore: [SL999]\n")
    with pytest.raises(ShapelintError, match=r"c.yaml:2: ignore: unknown rule code 'SL999'"):
        select_rules(Settings(), read_config(tmp_path / "c.yaml"))
    rules = select_rules(Settings(select=["SL1"]))
    assert {r.code[:3] for r in rules.selected} == {"SL1"} and "SL203" in rules.known


def test_run_outcomes_and_their_exit_codes(here: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    listing = run_request(request("--list-rules", "--select", "SL101"))
    assert isinstance(listing, RuleList) and [r.code for r in listing.rules] == ["SL101"]
    render(listing)
    assert capsys.readouterr().out.startswith("SL101  ") and listing.exit_code() == 0
    monkeypatch.delenv("SHAPELINT_NO_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(here.parent / "key-home"))  # outside the project: a key there signs nothing
    (here / "pyproject.toml").write_text('[tool.shapelint]\ntargets = ["model.py"]\n')
    write_model(here)
    first = run_request(request("--hook", "unrelated.txt", "--format", "json"))  # never linted here: linted
    assert isinstance(first, Linted) and not first.errors and first.findings == 1
    render(first)
    assert json.loads(capsys.readouterr().out)["summary"]["findings"] == 1 and first.exit_code() == 1
    nothing = run_request(request("--hook", "unrelated.txt"))  # model.py does not depend on it
    assert isinstance(nothing, NothingToLint) and nothing.exit_code() == 0
    replayed = run_request(request("model.py", "--format", "json"))
    assert isinstance(replayed, Linted)  # another command line: linted (from the cached result)
    render(replayed)
    assert replayed.exit_code() == 1
    again = run_request(request("model.py", "--format", "json"))
    assert isinstance(again, Replayed) and again.exit_code() == 1
    capsys.readouterr()
    render(again)
    assert json.loads(capsys.readouterr().out)["summary"]["findings"] == 1


def test_report_is_the_same_document_on_any_stream(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_model(here)
    for fmt in ("text", "json", "sarif", "github"):
        rc, out, _ = run(["model.py", "--no-config", "--format", fmt], capsys)
        linted = run_request(request("model.py", "--no-config", "--format", fmt))
        assert isinstance(linted, Linted)
        buffer = io.StringIO()
        report(linted, fmt, buffer)
        assert rc == 1 and buffer.getvalue() == out, fmt


def test_api_and_command_resolve_and_suppress_alike(here: Path) -> None:
    """lint_target goes through the same LintPlan and Suppression as the command."""
    write_model(here, comment="# shapelint: ignore[SL101]")
    linted = run_request(request("model.py", "--no-config", "--dtype", "fp16", "--tp", "1"))
    assert isinstance(linted, Linted)
    (cli_result,) = linted.results
    api = shapelint.lint_target("model.py", dtype="fp16", tp=1)
    assert api.result.options == cli_result.options
    assert [(f.code, f.suppressed) for f in api.result.findings] == [(f.code, f.suppressed)
                                                                       for f in cli_result.findings] == [("SL101", True)]
    assert api.findings == [] and api.result.findings[0].source.line == LINEAR_LINE  # type: ignore[union-attr]


def test_per_module_ignores_and_unknown_ignore_comments(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_model(here)
    (here / ".shapelint.yaml").write_text("per-module-ignores:\n  '0': [SL101]\n")
    linted = run_request(request("model.py"))
    assert isinstance(linted, Linted) and linted.results[0].findings == [] and linted.exit_code() == 0
    write_model(here, comment="# shapelint: ignore[SL999]")
    (here / ".shapelint.yaml").unlink()
    linted = run_request(request("model.py"))
    assert isinstance(linted, Linted) and linted.exit_code() == 2
    assert [e.message for e in linted.errors] == [f"model.py:{LINEAR_LINE}: unknown rule 'SL999' in "
                                                  "'# shapelint: ignore[...]' (it suppresses nothing)"]
    assert capsys.readouterr().err.startswith("shapelint: error: model.py:")


def test_the_policy_settings_default_to_the_pricers_policy() -> None:
    """SETTINGS states the policy's defaults for --help and the configuration reference
    (importing the pricer there would slow every command's start); they must be Policy's."""
    from shapelint.app.lint_plan import POLICY_SETTINGS
    from shapelint.pipeline.settings import default

    assert LintPlan(Settings(), RuleSet((), [])).options().policy == Policy()
    assert {key: default(key) for key in POLICY_SETTINGS} == {
        key: getattr(Policy(), key.replace("-", "_")) for key in POLICY_SETTINGS}
