"""Configuration files: discovery, validation, precedence against flags, and random
documents thrown at every loader (which must load or raise ShapelintError)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from _cli_helpers import assert_one_error_line, run, write_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shapelint.app.config import (
    Config,
    find_config,
    load_config,
    module_ignored,
    read_config,
)
from shapelint.errors import ShapelintError
from shapelint.load import documents as load
from shapelint.model.records import Finding

SL101_ONLY = ["--select", "SL101"]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- discovery --------------------------------------------------------------------


def test_search_upwards_first_directory_wins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.shapelint]\ngpu = "a100"\n')
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    assert find_config(sub) == (tmp_path / "pyproject.toml").resolve()
    # a pyproject.toml without the table (even a broken one) does not stop the search
    (tmp_path / "a" / "pyproject.toml").write_text("[project\nname = 'x'\n")
    assert find_config(sub) == (tmp_path / "pyproject.toml").resolve()
    # a nearer .shapelint.yaml wins over a farther pyproject.toml
    (tmp_path / "a" / ".shapelint.yaml").write_text("gpu: l4\n")
    assert find_config(sub) == (tmp_path / "a" / ".shapelint.yaml").resolve()
    assert load_config(start=sub).gpu == "l4"
    # both in one directory: pyproject.toml is used, with a note
    (tmp_path / "a" / "pyproject.toml").write_text('[tool.shapelint]\ngpu = "t4"\n')
    capsys.readouterr()
    assert load_config(start=sub).gpu == "t4"
    assert "ignoring" in capsys.readouterr().err
    assert load_config(start=sub, search=False) == Config()


def test_pyproject_values(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text("""\
[project]
name = "demo"

[tool.shapelint]
gpu = "a100"
dtype = "fp16"
batch = 4
seq = 256
tp = 2
select = ["SL1"]
ignore = "SL102, SL201"
min_speedup = 1.1
min-loss = 0.1
format = "sarif"
exit-zero = true
inference = false

[tool.shapelint.per-module-ignores]
"lm_head" = ["SL101"]
"h.*.mlp" = "SL1"
""")
    cfg = read_config(path)
    assert (cfg.gpu, cfg.dtype, cfg.batch, cfg.seq, cfg.tp) == ("a100", "fp16", 4, 256, 2)
    assert cfg.select == ["SL1"] and cfg.ignore == ["SL102", "SL201"]
    assert (cfg.min_speedup, cfg.min_loss, cfg.format, cfg.exit_zero, cfg.inference) == (1.1, 0.1, "sarif", True, False)
    assert cfg.per_module_ignores == {"lm_head": ["SL101"], "h.*.mlp": ["SL1"]}


def test_yaml_json_and_plain_toml(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("gpu: h100\nper-module-ignores:\n  fc: [SL101]\n")
    (tmp_path / "c.json").write_text('{"dtype": "tf32", "exit_zero": false}')
    (tmp_path / "shapelint.toml").write_text("batch = 3\n")
    (tmp_path / "empty.yaml").write_text("# nothing\n")
    assert read_config(tmp_path / "c.yaml").per_module_ignores == {"fc": ["SL101"]}
    assert read_config(tmp_path / "c.json").dtype == "tf32"
    assert read_config(tmp_path / "shapelint.toml").batch == 3
    assert read_config(tmp_path / "empty.yaml").file is not None


@pytest.mark.parametrize("name,text,expected", [
    ("pyproject.toml", '[tool.shapelint]\ngpu = "h100"\nbogus = 1\n', "pyproject.toml:3: unknown key 'bogus'"),
    ("pyproject.toml", "[tool.shapelint]\nbatch = 0\n", "pyproject.toml:2: batch: must be a positive integer, got 0"),
    ("pyproject.toml", "[tool.shapelint]\nseq = -8\n", "seq: must be a positive integer, got -8"),
    ("pyproject.toml", '[tool.shapelint]\ntp = "2"\n', "tp: expected a positive integer, got a string ('2')"),
    ("pyproject.toml", "[tool.shapelint]\nbatch = true\n", "batch: expected a positive integer, got a boolean"),
    ("pyproject.toml", '[tool.shapelint]\ndtype = "fp9"\n', "dtype: expected one of bf16, fp16, fp32, tf32"),
    ("pyproject.toml", '[tool.shapelint]\nformat = "xml"\n', "format: expected one of text, json, sarif, github"),
    ("pyproject.toml", '[tool.shapelint]\ngpu = "tpu"\n', "gpu: unknown GPU 'tpu'; known: "),
    ("pyproject.toml", '[tool.shapelint]\nexit-zero = "yes"\n', "exit-zero: expected true or false"),
    ("pyproject.toml", "[tool.shapelint]\nmin-speedup = 0\n", "min-speedup: must be a positive number"),
    ("pyproject.toml", "[tool.shapelint]\nmin-loss = 1.5\n", "min-loss: must be at least 0 and below 1"),
    ("pyproject.toml", "[tool.shapelint]\nselect = [1]\n", "select: expected rule codes (strings)"),
    ("pyproject.toml", "[tool.shapelint]\nper-module-ignores = [\"x\"]\n", "per-module-ignores: expected a mapping"),
    ("pyproject.toml", "[tool.shapelint]\nmin_loss = 0.1\nmin-loss = 0.2\n", "min-loss is set twice"),
    ("pyproject.toml", "[project]\nname = 'x'\n", "pyproject.toml: no [tool.shapelint] table"),
    ("pyproject.toml", "[tool.shapelint]\ngpu = \"h100\"\nbatch = [1,\n", "pyproject.toml:3: TOML syntax error: "),
    ("pyproject.toml", "[tool.shapelint]\ngpu = 'h100'\n\n\nseq = = 3\n", "pyproject.toml:5: TOML syntax error: "),
    (".shapelint.yaml", "gpu: h100\nbatch: [1, 2\n", ".shapelint.yaml:3: YAML syntax error: "),
    (".shapelint.yaml", "gpu: h100\nbatch: -1\n", ".shapelint.yaml:2: batch: must be a positive integer, got -1"),
    (".shapelint.yaml", "- gpu\n", ".shapelint.yaml: expected a mapping of settings, got a list"),
    (".shapelint.yaml", "when: 2024-13-01\n", ".shapelint.yaml: YAML value error: "),
    ("c.json", '{"gpu": "h100",\n "batch": }', "c.json:2: JSON syntax error: "),
    ("c.ini", "[x]\n", "must be .toml, .yaml, .yml or .json"),
])
def test_invalid(here: Path, name: str, text: str, expected: str) -> None:
    (here / name).write_text(text)
    with pytest.raises(ShapelintError) as exc:
        read_config(Path(name))
    assert str(exc.value).startswith(expected) or expected in str(exc.value), str(exc.value)
    assert "\n" not in str(exc.value)


def test_not_utf8_and_missing(here: Path) -> None:
    (here / "c.yaml").write_bytes(b"gpu: \xff\xfe\n")
    with pytest.raises(ShapelintError, match="not UTF-8"):
        read_config(Path("c.yaml"))
    with pytest.raises(ShapelintError, match="no such file"):
        load_config("nope.toml")


def test_per_module_glob() -> None:
    f = Finding("SL101", "misaligned-leading-dim", "error", "h.*.mlp", "m", (0,), 1.0, 0.5,
                modules=("h.0.mlp", "h.1.mlp"))
    assert module_ignored(f, {"h.*.mlp": ["SL101"]})
    assert module_ignored(f, {"h.?.mlp": ["SL1"]})
    assert module_ignored(f, {"h.*": ["misaligned-leading-dim"]})
    assert not module_ignored(f, {"h.0.mlp": ["SL101"]})  # only some of its modules
    assert not module_ignored(f, {"h.*.mlp": ["SL2"]})
    assert not module_ignored(f, {"lm_head": ["SL101"]})


# -- the CLI with a configuration ---------------------------------------------------


def test_config_sets_and_flags_override(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_model(here)
    (here / "pyproject.toml").write_text(
        '[tool.shapelint]\nformat = "json"\ngpu = "a100"\ndtype = "fp16"\ninference = true\nexit-zero = true\n'
        'select = ["SL101"]\n')
    rc, out, err = run(["model.py"], capsys)
    doc = json.loads(out)
    assert rc == 0, err  # exit-zero from the file
    assert doc["findings"] and doc["summary"]["gpu"].startswith("a100")
    assert doc["summary"]["dtype"] == "fp16" and doc["summary"]["training"] is False
    rc, out, err = run(["model.py", "--format", "text", "--gpu", "l4", "--dtype", "bf16", "--no-inference",
                        "--no-exit-zero"], capsys)
    assert rc == 1, err
    assert "(l4)" in out and "bf16, training" in out
    # --no-config: the file is not read at all
    rc, out, err = run(["model.py", "--no-config", *SL101_ONLY], capsys)
    assert rc == 1 and out.startswith("model.py")


def test_config_ignore_and_per_module_ignores(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_model(here)
    (here / ".shapelint.yaml").write_text("select: [SL101]\nignore: [SL101]\n")
    rc, out, err = run(["model.py"], capsys)
    assert rc == 0 and "no findings" in out, out + err
    rc, out, err = run(["model.py", "--ignore", "SL8"], capsys)  # unknown prefix: an error (SL9 is SL900 unused-suppression)
    assert rc == 2 and "unknown rule code 'SL8'" in err
    rc, out, err = run(["model.py", "--ignore", "SL102"], capsys)  # the flag replaces the file's list
    assert rc == 1 and "SL101" in out
    (here / ".shapelint.yaml").write_text("select: [SL101]\nper-module-ignores:\n  '0': [SL101]\n")
    rc, out, err = run(["model.py"], capsys)
    assert rc == 0 and "no findings" in out, out + err
    (here / ".shapelint.yaml").write_text("select: [SL101]\nper-module-ignores:\n  'lm_*': [SL101]\n")
    rc, out, err = run(["model.py"], capsys)
    assert rc == 1


def test_config_min_speedup(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_model(here)
    (here / ".shapelint.yaml").write_text("select: [SL101]\nmin-speedup: 1000\n")
    rc, out, _ = run(["model.py"], capsys)
    assert rc == 0 and "no findings" in out
    rc, out, _ = run(["model.py", "--min-speedup", "1.01"], capsys)
    assert rc == 1


def test_config_errors_through_the_cli(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_model(here)
    (here / ".shapelint.yaml").write_text("gpu: h100\nselect: [SL999]\n")
    rc, _, err = run(["model.py"], capsys)
    assert rc == 2
    assert_one_error_line(err)
    assert ".shapelint.yaml:2: select: unknown rule code 'SL999'" in err
    (here / ".shapelint.yaml").write_text("gpu: [h100\n")
    rc, _, err = run(["model.py"], capsys)
    assert rc == 2 and ".shapelint.yaml:2: YAML syntax error" in err
    assert_one_error_line(err)
    rc, _, err = run(["model.py", "--config", "missing.toml"], capsys)
    assert rc == 2 and "--config missing.toml: no such file" in err
    rc, _, err = run(["model.py", "--config", "x.toml", "--no-config"], capsys)
    assert rc == 2 and "exclude each other" in err


def test_explicit_config_file(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_model(here)
    (here / ".shapelint.yaml").write_text("select: [SL999]\n")  # would fail if it were read
    (here / "ci.toml").write_text('[tool.shapelint]\nselect = ["SL101"]\nformat = "github"\n')
    rc, out, err = run(["model.py", "--config", "ci.toml"], capsys)
    assert rc == 1, err
    assert out.startswith(("::error ", "::warning "))


def test_target_settings_win_over_the_config(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """flag > the YAML target's own setting > configuration file > default."""
    (here / "build.py").write_text(
        "import torch.nn as nn\n\n\ndef build():\n    return nn.Sequential(nn.Linear(1023, 1024))\n")
    (here / "t.yaml").write_text("model: build.py:build\ninputs: [[4096, 1023]]\ngpu: l4\n")
    (here / ".shapelint.yaml").write_text("select: [SL101]\ngpu: a10\ndtype: fp16\nformat: json\n")
    _, out, _ = run(["t.yaml"], capsys)
    summary = json.loads(out)["summary"]
    assert summary["gpu"] == "l4" and summary["dtype"] == "fp16"
    _, out, _ = run(["t.yaml", "--gpu", "t4"], capsys)
    assert json.loads(out)["summary"]["gpu"] == "t4"


def test_batch_and_seq_from_the_config(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "m.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\ndef shapelint_model(batch=2, seq=8):\n"
        "    return nn.Linear(1024, 1024), torch.randn(batch, seq, 1024)\n")
    (here / ".shapelint.yaml").write_text("batch: 3\nseq: 5\nformat: json\n")
    _, out, _ = run(["m.py"], capsys)
    assert json.loads(out)["summary"]["tokens"] == 15
    _, out, _ = run(["m.py", "--seq", "7"], capsys)
    assert json.loads(out)["summary"]["tokens"] == 21


# -- random documents -------------------------------------------------------------

KEYS = ["gpu", "dtype", "batch", "seq", "tp", "select", "ignore", "per-module-ignores", "per_module_ignores",
        "min-speedup", "min_loss", "format", "exit-zero", "inference", "model", "kwargs", "inputs", "bogus"]
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 5000),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.sampled_from(["h100", "bf16", "fp9", "SL101", "json", "h.*.mlp", "", "x:y", "1e3"]),
    st.text(alphabet="abc01-_.*: ", max_size=6),
)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(alphabet="ab.*_-", min_size=1, max_size=4), inner, max_size=3),
                      max_leaves=6)
DOCS = st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(alphabet="ab-_", min_size=1, max_size=4)),
                       VALUES, max_size=5)
NOISE = st.text(alphabet="[]{}()\"':,=#\n\t -!&*|>%@`\\x0.", max_size=4)


def _toml_value(v: object) -> str:
    if v is None:
        return '""'
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    assert isinstance(v, dict)
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"


def _dump(doc: dict, kind: str) -> str:
    if kind == "yaml":
        return yaml.safe_dump(doc, default_flow_style=bool(len(doc) % 2))
    if kind == "json":
        return json.dumps(doc, indent=1 if len(doc) % 2 else None)
    body = "".join(f"{json.dumps(k)} = {_toml_value(v)}\n" for k, v in doc.items())
    return "[tool.shapelint]\n" + body


@st.composite
def documents(draw: st.DrawFn) -> tuple[str, str]:
    kind = draw(st.sampled_from(["yaml", "json", "toml"]))
    text = _dump(draw(DOCS), kind)
    for _ in range(draw(st.integers(0, 2))):  # mutate: insert noise, or cut the text short
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(NOISE) if draw(st.booleans()) else text[:at] + draw(NOISE) + text[at:]
    return kind, text


FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
SUFFIX = {"yaml": ".shapelint.yaml", "json": "config.json", "toml": "pyproject.toml"}


@FUZZ
@given(documents())
def test_random_documents_config(tmp_path: Path, doc: tuple[str, str]) -> None:
    kind, text = doc
    path = tmp_path / SUFFIX[kind]
    path.write_text(text)
    try:
        cfg = read_config(path)
    except ShapelintError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert isinstance(cfg, Config)


@FUZZ
@given(documents())
def test_random_documents_target_readers(tmp_path: Path, doc: tuple[str, str]) -> None:
    kind, text = doc
    path = tmp_path / ("t.json" if kind == "json" else "t.yaml")
    path.write_text(text)
    reader = load.read_json if kind == "json" else load.read_yaml
    try:
        assert isinstance(reader(path), dict)
    except ShapelintError as exc:
        assert str(exc)


@settings(max_examples=30, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=40), st.sampled_from([".shapelint.yaml", "c.json", "pyproject.toml"]))
def test_random_bytes_config(tmp_path: Path, data: bytes, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"[tool.shapelint]\n" + data if name.endswith(".toml") else data)
    try:
        read_config(path)
    except ShapelintError:
        pass


# Inputs on which naive readers raise something other than ShapelintError: not UTF-8,
# an impossible date (PyYAML builds a datetime), nesting deeper than the recursion limit.
LOADER_BUGS = [
    ("t.yaml", b"a: 2024-13-01\n"),
    ("t.yaml", b"\xff\xfe a: 1\n"),
    ("t.json", b"\xff\xfe{}"),
    ("t.json", b"[" * 100_000),
    ("t.yaml", b"[" * 100_000),
]


@pytest.mark.parametrize("name,data", LOADER_BUGS)
def test_target_readers_fail_cleanly(tmp_path: Path, name: str, data: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    reader = load.read_json if name.endswith(".json") else load.read_yaml
    with pytest.raises(ShapelintError):
        reader(path)


@pytest.mark.parametrize("name,data", LOADER_BUGS)
def test_config_reader_handles_the_same_inputs(tmp_path: Path, name: str, data: bytes) -> None:
    path = tmp_path / (".shapelint.yaml" if name.endswith(".yaml") else "c.json")
    path.write_bytes(data)
    with pytest.raises(ShapelintError):
        read_config(path)
