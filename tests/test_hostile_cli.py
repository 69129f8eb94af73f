"""The hostile-input modules as the command runs them: several targets (each failure
one line and an ``errors`` entry, the others reported, exit 2 after all), output paths,
--rules-dir and the forward pass behind the user-code boundary, suppression-comment
problems, allow-builders, the child process (--timeout, the console default)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from _cli_helpers import LINEAR_LINE, MODEL, run, write_model
from _hostile import lint
from test_formats import check_sarif

from shapelint.app import cli, isolate, parser

GOOD = MODEL.format(in_features=1023, comment="")
BUILD = "import torch.nn as nn\n\n\ndef build():\n    return nn.Linear(64, 64)\n"


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    write_model(tmp_path)  # model.py: one SL101 finding
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(0)\n")
    (tmp_path / "t.yaml").write_text("model: shutil:rmtree\nkwargs: {path: victim}\n")
    return tmp_path


def _errors_on_stderr(err: str) -> list[str]:
    lines = err.strip().splitlines()
    assert all(ln.startswith("shapelint: error: ") for ln in lines), err
    return [ln.removeprefix("shapelint: error: ") for ln in lines]


# -- several targets (issue 9) -----------------------------------------------------------


def test_every_target_is_linted_and_each_failure_is_one_line(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 9: one failing target aborted the run, with no other target's findings."""
    rc, out, err = lint(["exits.py", "model.py", "t.yaml", "--format", "json", "--select", "SL101"], here, capsys)
    assert rc == 2
    messages = _errors_on_stderr(err)
    assert [m.split(":")[0] for m in messages] == ["exits.py", "t.yaml"]
    report = json.loads(out)
    assert [t["target"] for t in report["targets"]] == ["model.py"]
    assert [(f["target"], f["code"]) for f in report["findings"]] == [("model.py", "SL101")]
    assert report["errors"] == [{"target": "exits.py", "message": messages[0]},
                                {"target": "t.yaml", "message": messages[1]}]
    assert "called sys.exit(0)" in messages[0] and "shutil is not in this YAML's project" in messages[1]


def test_text_report_keeps_the_other_targets(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = lint(["model.py", "exits.py", "--select", "SL101"], here, capsys)
    assert rc == 2 and len(_errors_on_stderr(err)) == 1
    assert out.startswith("model.py") and "SL101" in out and "exits.py" not in out


def test_sarif_says_the_run_was_incomplete(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = lint(["model.py", "t.yaml", "--format", "sarif", "--select", "SL101"], here, capsys)
    assert rc == 2
    doc = json.loads(out)
    check_sarif(doc)
    (invocation,) = doc["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    (note,) = invocation["toolExecutionNotifications"]
    assert note["level"] == "error" and note["message"]["text"] == _errors_on_stderr(err)[0]
    assert note["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "t.yaml"
    assert [r["ruleId"] for r in doc["runs"][0]["results"]] == ["SL101"]
    rc, out, _ = lint(["model.py", "--format", "sarif", "--select", "SL101"], here, capsys)
    assert json.loads(out)["runs"][0]["invocations"] == [{"executionSuccessful": True,
                                                          "toolExecutionNotifications": []}]


def test_github_annotates_the_targets_that_failed(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 13: ``--format github`` annotated the findings only; a target that could
    not be linted was a stderr line the pull request never showed."""
    write_model(here, "bad.py", comment="# shapelint: ignore[SL101")
    rc, out, err = lint(["model.py", "t.yaml", "bad.py", "--format", "github", "--select", "SL101"], here, capsys)
    assert rc == 2
    yaml_error, comment_error = _errors_on_stderr(err)
    *findings, first, second = out.splitlines()  # bad.py's comment suppresses nothing: its finding stays
    assert [f.split(",title=")[0] for f in findings] == ["::error file=model.py,line=6,col=37",
                                                                  "::error file=bad.py,line=6,col=37"]
    title = "title=shapelint%3A cannot lint this target"
    assert first == f"::error file=t.yaml,{title}::{yaml_error}"
    assert second == f"::error file=bad.py,line={LINEAR_LINE},{title}::{comment_error.replace('%', '%25')}"


def test_a_failing_target_is_in_the_output_file(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = lint(["model.py", "exits.py", "--format", "json", "-o", "r.json"], here, capsys, outputs=("r.json",))
    assert rc == 2 and [e["target"] for e in json.loads((here / "r.json").read_text())["errors"]] == ["exits.py"]


def test_long_errors_are_capped_on_one_line(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 13: a 9,800-character line for an unknown model_type; a transformers 5
    validation error cut before its reason."""
    pytest.importorskip("transformers")
    (here / "a").mkdir()
    (here / "a" / "config.json").write_text('{"model_type": "no_such_model"}')
    (here / "b").mkdir()
    (here / "b" / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 100, "num_attention_heads": 3, "num_hidden_layers": 1,
        "intermediate_size": 64, "vocab_size": 100}))
    rc, _, err = lint(["a/config.json", "b/config.json"], here, capsys)
    unknown, validator = _errors_on_stderr(err)
    assert rc == 2 and len(unknown) <= 300 and unknown.endswith("…")
    assert "is not a multiple of the number of attention heads" in validator


@pytest.mark.parametrize("config,expected", [
    ({"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 3},
     "num_attention_heads = 4 is not a multiple of num_key_value_heads = 3: grouped-query attention"),
    ({"model_type": "mistral", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 8},
     "num_attention_heads = 4 is not a multiple of num_key_value_heads = 8"),
    ({"model_type": "llama", "num_key_value_heads": 5},
     "num_attention_heads = 32 (the default) is not a multiple of num_key_value_heads = 5"),
    ({"model_type": "falcon", "hidden_size": 256, "num_attention_heads": 4, "num_kv_heads": 3,
      "new_decoder_architecture": True}, "num_attention_heads = 4 is not a multiple of num_kv_heads = 3"),
    ({"model_type": "llava", "text_config": {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
                                             "num_key_value_heads": 3}},
     "text_config.num_attention_heads = 4 is not a multiple of text_config.num_key_value_heads = 3"),
    ({"model_type": "gpt2", "n_embd": 100, "n_head": 3},
     "n_embd = 100 is not a multiple of the number of attention heads (n_head = 3)"),
])
def test_invalid_heads_are_named_by_their_keys(here: Path, capsys: pytest.CaptureFixture[str],
                                               config: dict[str, object], expected: str) -> None:
    """Issue 13: ``num_key_value_heads`` 3 of 4 heads was reported as a tensor-size
    mismatch (transformers 5 builds it; Llama then lints green, Falcon fails to trace);
    GPT-2 and BERT quoted transformers' own words (``embed_dim``)."""
    pytest.importorskip("transformers")
    layers = "n_layer" if config["model_type"] == "gpt2" else "num_hidden_layers"
    (here / "config.json").write_text(json.dumps({**config, layers: 1, "vocab_size": 50304}))
    rc, _, err = lint(["config.json"], here, capsys)
    (message,) = _errors_on_stderr(err)
    assert rc == 2 and message.startswith("config.json: ") and expected in message, message
    assert "Error" not in message  # no exception type: the keys say it all


@pytest.mark.parametrize("config,key", [
    ({"model_type": "gpt2", "n_layer": 10_000}, "n_layer = 10000"),
    ({"model_type": "t5", "num_layers": 2, "num_decoder_layers": 5000}, "num_decoder_layers = 5000"),
    ({"model_type": "llava", "text_config": {"model_type": "llama", "num_hidden_layers": 1001}},
     "text_config.num_hidden_layers = 1001"),
])
def test_a_config_too_deep_to_trace_is_refused(here: Path, capsys: pytest.CaptureFixture[str],
                                               config: dict[str, object], key: str) -> None:
    """Issue 13: a 10,000-layer GPT-2 config ran 7.5 minutes and died with SIGSEGV (exit
    139, no message) while torch freed the autograd graph. Refused before anything is
    built (this test takes a second, not minutes)."""
    pytest.importorskip("transformers")
    from shapelint.load.validate import MAX_LAYERS

    (here / "config.json").write_text(json.dumps(config))
    rc, _, err = lint(["config.json"], here, capsys)
    (message,) = _errors_on_stderr(err)
    assert rc == 2 and message.startswith(f"config.json: {key} is more than the {MAX_LAYERS:,} layers"), message


# -- discovery ------------------------------------------------------------------------


def test_verbose_lists_what_was_passed_over(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "build.py").write_text(BUILD)
    (here / "tree" / "node_modules").mkdir(parents=True)
    (here / "tree" / "t.yaml").write_text("model: ../build.py:build\ninputs: [[4, 64]]\n")
    (here / "tree" / "mkdocs.yml").write_text("site_name: x\n")
    (here / "notes.txt").write_text("hi\n")
    rc, out, err = run(["tree", "notes.txt", "--no-config", "--skip-other-files", "--verbose", "--format", "json"],
                       capsys)
    assert rc == 0, err
    assert err.splitlines() == [
        "shapelint: skipped tree/node_modules: a node_modules folder",
        "shapelint: skipped tree/mkdocs.yml: a YAML file without a top-level model: or hf_config: key",
        "shapelint: skipped notes.txt: not a .py, .json, .yaml or .yml file",
    ]
    assert [t["target"] for t in json.loads(out)["targets"]] == ["tree/t.yaml"]


# -- outputs ----------------------------------------------------------------------------


@pytest.mark.parametrize("flags", [["-o", "model.py"], ["--dump-graph", "model.py"], ["-o", "./t.yaml"],
                                   ["--format", "json", "-o", "pyproject.toml", "--config", "pyproject.toml"],
                                   ["--plot", "link.png"], ["-o", "link.png"]])
def test_outputs_never_replace_a_file_the_run_reads(here: Path, capsys: pytest.CaptureFixture[str],
                                                    flags: list[str]) -> None:
    """Issue 13: ``--dump-graph model.py``, ``-o model.py`` and ``-o config.json``
    replaced the target."""
    (here / "link.png").symlink_to("model.py")
    (here / "pyproject.toml").write_text("[tool.shapelint]\nselect = ['SL101']\n")
    argv = ["model.py", *(["t.yaml"] if "./t.yaml" in flags else []), *flags]
    rc, out, err = run(argv if "--config" in flags else [*argv, "--no-config"], capsys)
    assert rc == 2 and "refusing to overwrite it" in err and len(err.splitlines()) == 1, err
    assert (here / "model.py").read_text() == GOOD and out == ""


def test_one_graph_per_target(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 13: ``--dump-graph`` with several targets kept only the last graph."""
    (here / "b").mkdir()
    write_model(here / "b", in_features=512)
    rc, _, err = lint(["model.py", "b/model.py", "--dump-graph", "g.py"], here, capsys,
                      outputs=("g-1-model.py", "g-2-model.py"))
    assert rc == 1, err
    assert "1023" in (here / "g-1-model.py").read_text() and "512" in (here / "g-2-model.py").read_text()
    assert not (here / "g.py").exists()


def test_a_full_disk_is_one_line(here: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    (here / "r.txt").write_text("the old report\n")
    monkeypatch.setattr("shapelint.files._replace_atomically", full)
    rc, _, err = lint(["model.py", "-o", "r.txt"], here, capsys)
    assert rc == 2 and err == "shapelint: error: --output r.txt: No space left on device\n"
    assert (here / "r.txt").read_text() == "the old report\n"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_device_is_refused_before_the_lint(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = lint(["model.py", "-o", "/dev/full"], here, capsys)
    assert rc == 2 and err == ("shapelint: error: --output /dev/full: is a character device; shapelint writes "
                               "regular files only (leave out --output to write to stdout)\n")


def test_a_closed_pipe_ends_quietly_with_the_runs_exit_code(here: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 13: ``| head`` gave exit 2 in JSON and a silent exit 1 in text."""
    spare = open(here / "fd", "w")  # noqa: SIM115 - the guard points this descriptor at /dev/null

    class ClosedPipe(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self) -> int:
            return spare.fileno()

    for fmt in ("json", "text"):
        monkeypatch.setattr(sys, "stdout", ClosedPipe())
        assert cli.main(["model.py", "--no-config", "--format", fmt]) == 1
        monkeypatch.undo()
        monkeypatch.chdir(here)
        assert capsys.readouterr().err == ""
    spare.close()


# -- user code: rules, the forward pass ---------------------------------------------------

RULE = '''\
"""A rule from --rules-dir."""
from shapelint.check.rule_api import Example
CODE, NAME, SEVERITY, BAD, GOOD = "SL901", "user-rule", "warning", [], []
{body}
'''


@pytest.mark.parametrize("body,expected", [
    ("print('loading my rule')\nimport sys\nsys.exit(0)\ndef check(g, h, c):\n    return []",
     "rules/mine.py: importing it called sys.exit(0) instead of returning (its last output: \"loading my rule\")"),
    ("def check(g, h, c):\n    raise ValueError('my rule broke')",
     "rules/mine.py: rule SL901: check() raised ValueError: my rule broke"),
])
def test_rules_dir_modules_run_behind_the_boundary(here: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch, body: str, expected: str) -> None:
    """Issue 13: a rule module's sys.exit ended shapelint silently; a check() that raised
    was an internal error; rule modules left __pycache__."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    (here / "rules").mkdir()
    (here / "rules" / "mine.py").write_text(RULE.format(body=body))
    rc, out, err = lint(["model.py", "--rules-dir", "rules", "--format", "json"], here, capsys)
    assert rc == 2 and expected in err, err
    assert not (here / "rules" / "__pycache__").exists()
    if "check()" in expected:  # the rule failed on this target: reported as its error
        assert json.loads(out)["errors"][0]["message"].endswith(expected)


def test_the_forward_pass_is_user_code_too(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 13: what a model's forward printed landed in the JSON on stdout; a
    forward that exits ended the run."""
    loud = GOOD.replace("import torch.nn as nn\n", "import torch.nn as nn\n\n\nclass Loud(nn.Linear):\n"
                        "    def forward(self, x):\n        print('in forward')\n        return super().forward(x)\n")
    (here / "loud.py").write_text(loud.replace("nn.Sequential(nn.Linear(", "nn.Sequential(Loud("))
    rc, out, err = lint(["loud.py", "--format", "json"], here, capsys)
    assert rc == 1 and "in forward" in err and json.loads(out)["findings"]
    (here / "quits.py").write_text(loud.replace("print('in forward')", "raise SystemExit(0)").replace(
        "nn.Sequential(nn.Linear(", "nn.Sequential(Loud("))
    rc, _, err = lint(["quits.py"], here, capsys)
    assert rc == 2 and "quits.py: forward and backward called sys.exit(0) instead of returning" in err


COMPILED_FUNCTION = """\
import torch
import torch.nn as nn


@torch.compile
def project(x, w):
    return x @ w


class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(1023, 1024))

    def forward(self, x):
        return project(x, self.w)


def shapelint_model():
    return M(), torch.randn(4096, 1023)
"""


@pytest.mark.parametrize("name,source,expected", [
    ("whole.py", GOOD.replace("return model,", "return torch.compile(model),"),
     "whole.py: the model is compiled with torch.compile, which cannot run on fake tensors: lint the uncompiled "
     "model (--compile prices the step as torch.compile runs it)"),
    ("part.py", GOOD.replace("nn.Sequential(nn.Linear(1023, 1024)", "nn.Sequential(torch.compile(nn.Linear(1023, 1024))"),
     "part.py: module 0 is compiled with torch.compile, which cannot run on fake tensors"),
    ("function.py", COMPILED_FUNCTION,
     "function.py: the model runs code compiled with torch.compile (function.py:5, project), which cannot run on fake "
     "tensors"),
    ("inside.py", GOOD.replace(
        "def shapelint_model():\n", "class C(nn.Linear):\n    def forward(self, x):\n"
        "        return torch.compile(super().forward)(x)\n\n\ndef shapelint_model():\n").replace(
        "nn.Sequential(nn.Linear(", "nn.Sequential(C("),
     "inside.py: the model calls torch.compile while it runs, which cannot run on fake tensors"),
    ("meta.py", GOOD.replace("nn.ReLU())", "nn.ReLU())\n    model.register_forward_pre_hook(lambda m, a: (a[0].to('meta'),))"),
     "meta.py: the model puts tensors on two devices (meta and cpu): shapelint traces on the CPU with fake tensors "
     "(no GPU needed): leave .to(device), .cuda() and device= out of the model and its inputs"),
])
def test_a_model_that_cannot_run_on_fake_cpu_tensors_says_why(here: Path, capsys: pytest.CaptureFixture[str], name: str,
                                                                source: str, expected: str) -> None:
    """Issue 13: a torch.compile'd model crashed the lint with SIGSEGV (Inductor's kernels
    read fake tensors' memory) or read as "two devices"; a model moved to another
    device failed in torch's words."""
    (here / name).write_text(source)
    rc, _, err = lint([name], here, capsys)
    (message,) = _errors_on_stderr(err)
    assert rc == 2 and message.startswith(expected), message


def test_a_model_moved_to_cuda_says_why(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``.to('cuda')``: on a CPU-only PyTorch ``not linked with support for cuda devices``,
    on a CUDA build without a GPU ``Found no NVIDIA driver``, with a GPU two devices."""
    (here / "cuda.py").write_text(GOOD.replace("return model,", "return model.to('cuda'),"))
    rc, _, err = lint(["cuda.py"], here, capsys)
    (message,) = _errors_on_stderr(err)
    assert rc == 2 and message.startswith("cuda.py: the model ") and message.endswith(
        "leave .to(device), .cuda() and device= out of the model and its inputs"), message


# -- suppression comments ---------------------------------------------------------------


@pytest.mark.parametrize("comment,expected", [
    ("# shapelint: ignore[SL101", "malformed '# shapelint: ignore[': no closing ']'"),
    ("# shapelint: ignore[SL999]", "unknown rule 'SL999'"),
    ("# shapelint: ignore[sl101]", "'sl101' in '# shapelint: ignore[...]' is not a rule code"),
])
def test_a_bad_suppression_comment_is_an_error(here: Path, capsys: pytest.CaptureFixture[str], comment: str,
                                               expected: str) -> None:
    """Issue 13: ``ignore[SL202`` (no ``]``) suppressed every rule on its line; unknown
    and lowercase codes were ignored silently."""
    write_model(here, comment=comment)
    rc, out, err = lint(["model.py", "--format", "json", "--select", "SL101"], here, capsys)
    (message,) = _errors_on_stderr(err)
    assert rc == 2 and message.startswith(f"model.py:{LINEAR_LINE}: ") and expected in message
    report = json.loads(out)
    assert [f["code"] for f in report["findings"]] == ["SL101"]  # it suppressed nothing
    assert report["errors"] == [{"target": "model.py", "message": message}]


# -- allow-builders ---------------------------------------------------------------------


def test_allow_builders_in_the_configuration(here: Path, tmp_path_factory: pytest.TempPathFactory,
                                             capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path_factory.mktemp("site")
    (site / "menagerie").mkdir()
    (site / "menagerie" / "__init__.py").write_text("")
    (site / "menagerie" / "mlp.py").write_text(BUILD)
    monkeypatch.syspath_prepend(str(site))
    (here / "z.yaml").write_text("model: menagerie.mlp:build\ninputs: [[4, 64]]\n")
    rc, _, err = run(["z.yaml", "--no-config"], capsys)
    assert rc == 2 and "nor allow-listed (allow-builders in the configuration)" in err
    (here / ".shapelint.yaml").write_text("allow-builders: [menagerie]\n")
    rc, _, err = run(["z.yaml"], capsys)
    assert rc == 0, err
    (here / ".shapelint.yaml").write_text("select: [SL101]\nallow-builders: [shutil]\n")
    rc, _, err = run(["z.yaml"], capsys)
    assert rc == 2 and ".shapelint.yaml:2: allow-builders: 'shutil' is part of Python itself" in err


# -- the child process ----------------------------------------------------------------------


def test_isolation_flags_are_checked(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv, expected in ((["--timeout", "0"], "--timeout: must be a positive number of seconds, got 0"),
                           (["--max-memory", "lots"], "--max-memory: expected a positive size such as 8G"),
                           (["--timeout", "5", "--no-isolate"], "--timeout and --max-memory need the child")):
        rc, _, err = run(["model.py", "--no-config", *argv], capsys)
        assert rc == 2 and expected in err and len(err.splitlines()) == 1, err
    assert parser.memory_size("8G") == 8 * 2**30 and parser.memory_size("512m") == 512 * 2**20


@pytest.mark.parametrize("argv,expected", [
    (["-o", ""], "--output: the file name is empty"),
    (["--dump-graph", " "], "--dump-graph: the file name is empty"),
    (["--batch", str(2**70)], f"argument --batch: must be at most {2**63 - 1} (int64), got {2**70}"),
    (["--max-memory", "99999999999T"], "--max-memory 99999999999T is more than any address space (2^63 bytes)"),
])
def test_values_no_run_can_use_are_refused(here: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                           expected: str) -> None:
    """``-o ''`` wrote the report to stdout, ``--dump-graph ''`` was ignored (like
    ``--gpu ''``); a batch beyond int64 failed inside the user's code; a
    ``--max-memory`` beyond 2^63 bytes was an internal OverflowError."""
    if "--max-memory" in argv and not isolate.available():
        pytest.skip("needs os.fork")
    rc, out, err = lint(["model.py", *argv], here, capsys)
    assert rc == 2 and out == "" and err == f"shapelint: error: {expected}\n"


@pytest.mark.skipif(not isolate.available(), reason="needs os.fork")
def test_timeout_through_the_cli(here: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (here / "slow.py").write_text(GOOD.replace("def shapelint_model():\n",
                                               "def shapelint_model():\n    import time\n    time.sleep(60)\n"))
    assert cli.main(["slow.py", "--no-config", "--timeout", "0.5"]) == 2
    out, err = capfd.readouterr()
    assert out == "" and err == "shapelint: error: the lint ran past --timeout 0.5 s and was stopped\n"


@pytest.mark.skipif(not isolate.available(), reason="needs os.fork")
def test_a_too_low_memory_cap_is_one_line_naming_the_flag(here: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 13: a too-low ``--max-memory`` ended in ``internal error: ImportError:
    libtorch_cpu.so: failed to map segment``, ``internal error: MemoryError``, or a
    C++ ``terminate called`` line followed by ``crashed with SIGABRT`` (by cap size).
    The model allocates a real gigabyte at import, so the cap is hit whatever this test
    process has already loaded."""
    (here / "hungry.py").write_text("buffer = bytearray(2**30)\n" + GOOD)
    assert cli.main(["hungry.py", "--no-config", "--max-memory", "64M", "--format", "json"]) == 2
    out, err = capfd.readouterr()
    assert len(err.splitlines()) == 1, err
    message = err.removeprefix("shapelint: error: ").removeprefix("hungry.py: ")  # in loading, or in the target
    assert message.startswith("ran out of memory under --max-memory 64M: raise it (e.g. --max-memory 1G) "
                              "or leave it out ("), err
    assert out == "" or json.loads(out)["errors"][0]["message"] == err.removeprefix("shapelint: error: ").strip()


@pytest.mark.skipif(not isolate.available(), reason="needs os.fork")
def test_the_console_command_lints_in_a_child(here: Path, capfd: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 13: ``os._exit`` in user code escaped every boundary (a silent exit)."""
    (here / "quits.py").write_text("import os\nos._exit(0)\n")
    monkeypatch.setattr(sys, "argv", ["shapelint", "quits.py", "--no-config"])
    assert cli.main() == 2
    assert capfd.readouterr().err.endswith("user code ended the process with os._exit(0); nothing was reported\n")
    monkeypatch.setattr(sys, "argv", ["shapelint", "model.py", "--no-config", "--format", "json"])
    assert cli.main() == 1
    out, err = capfd.readouterr()
    assert json.loads(out)["findings"] and err == ""
