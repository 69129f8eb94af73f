"""Shapelint YAML targets written carelessly or with intent: no code from outside the
YAML's project runs, every bad value is one error line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from _hostile import hostile_settings, lint
from hypothesis import event, given
from hypothesis import strategies as st

from shapelint.errors import ShapelintError
from shapelint.load.yaml_target import load_yaml

BUILD = """\
import torch.nn as nn
from shutil import rmtree  # a project module that imports a dangerous function


def build(width=64, out=32):
    return nn.Linear(width, out)


class Net(nn.Module):
    def __init__(self, width=64):
        super().__init__()
        self.fc = nn.Linear(width, 16)

    def forward(self, x):
        return self.fc(x)
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proj"
    (root / "victim").mkdir(parents=True)
    (root / "victim" / "keep.txt").write_text("keep\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (root / "build.py").write_text(BUILD)
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "models.py").write_text(BUILD)
    (tmp_path / "elsewhere.py").write_text("def f():\n    open('pwned', 'w').close()\n")
    monkeypatch.chdir(root)
    return root


@pytest.mark.parametrize("model,kwargs,expected", [
    ("shutil:rmtree", {"path": "victim"}, "model: shutil is not in this YAML's project"),
    ("os:system", {"command": "touch pwned"}, "model: os is not in this YAML's project"),
    ("builtins:eval", {}, "model: builtins is not in this YAML's project"),
    ("../elsewhere.py:f", {}, "model: ../elsewhere.py is outside this YAML's project"),
    ("build.py:rmtree", {"path": "victim"}, "model: build.py:rmtree is defined in shutil"),
    ("pkg.models:rmtree", {"path": "victim"}, "model: pkg.models:rmtree is defined in shutil"),
    ("build.py:nope", {}, "model: build.py has no function nope"),
    ("build.py", {}, "must be 'module:function' or 'file.py:function'"),
])
def test_builders_from_outside_the_project_are_refused(project: Path, capsys: pytest.CaptureFixture[str],
                                                        model: str, kwargs: dict[str, Any], expected: str) -> None:
    """Issue 13: ``model: shutil:rmtree`` deleted a folder; ``model: os:system`` ran a command."""
    (project / "t.yaml").write_text(yaml.safe_dump({"model": model, "kwargs": kwargs, "inputs": [[4, 64]]}))
    rc, _, err = lint(["t.yaml"], project.parent, capsys)
    assert rc == 2 and expected in err, err
    assert (project / "victim" / "keep.txt").exists() and not (project / "pwned").exists()


@pytest.mark.parametrize("model", ["build.py:build", "build.py:Net", "pkg.models:build", "pkg.models:Net"])
def test_builders_in_the_project_run(project: Path, capsys: pytest.CaptureFixture[str], model: str) -> None:
    (project / "configs").mkdir()
    place = model.replace("build.py", "../build.py")
    (project / "configs" / "t.yaml").write_text(yaml.safe_dump({"model": place, "inputs": [[4, 64]]}))
    rc, out, err = lint(["configs/t.yaml", "--format", "json"], project.parent, capsys)
    assert rc in (0, 1), err
    assert json.loads(out)["targets"]


def test_a_symlink_out_of_the_project_is_refused(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "link.py").symlink_to(project.parent / "elsewhere.py")
    (project / "t.yaml").write_text("model: link.py:f\n")
    rc, _, err = lint(["t.yaml"], project.parent, capsys)
    assert rc == 2 and "outside this YAML's project" in err


def test_allow_listed_packages(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = tmp_path / "site" / "zoo"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text("")
    (lib / "mlp.py").write_text(BUILD)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    (project / "t.yaml").write_text("model: zoo.mlp:build\ninputs: [[4, 64]]\n")
    with pytest.raises(ShapelintError, match="nor allow-listed"):
        load_yaml(project / "t.yaml")
    assert load_yaml(project / "t.yaml", allow_builders=["zoo"]).kind == "yaml"
    assert load_yaml(project / "t.yaml", allow_builders=["zoo.mlp"]).kind == "yaml"
    with pytest.raises(ShapelintError, match="nor allow-listed"):
        load_yaml(project / "t.yaml", allow_builders=["zo"])
    (project / "s.yaml").write_text("model: shutil:rmtree\nkwargs: {path: victim}\n")
    with pytest.raises(ShapelintError, match="nor allow-listed"):
        load_yaml(project / "s.yaml", allow_builders=["shutil"])  # never Python's own library
    (project / "u.yaml").write_text("model: zoo.mlp:rmtree\nkwargs: {path: victim}\n")
    with pytest.raises(ShapelintError, match="defined in shutil"):
        load_yaml(project / "u.yaml", allow_builders=["zoo"])


@pytest.mark.parametrize("doc,expected", [
    ({"training": "no"}, "training must be true or false, got 'no'"),
    ({"dtype": {"a": 1}}, "dtype must be one of bf16, fp16, fp32, tf32, got {'a': 1}"),
    ({"gpu": ""}, "gpu must be a GPU name"),
    ({"batch": 0}, "batch = 0: dimensions must be positive"),
    ({"inputs": [[2**40, 2**40]]}, "more elements than a tensor can"),
    ({"inputs": [[99999999999999999999999]]}, "more elements than a tensor can"),
    ({"inputs": [{"shape": [4, 64], "dtype": {"a": 1}}]}, "unknown input dtype {'a': 1}"),
    ({"inputs": [{"shape": [4, 64], "requires_grad": "yes"}]}, "requires_grad must be true or false"),
    ({"inputs": [{"shape": [4, 64], "requires_gard": True}]}, "unknown key 'requires_gard'"),
    ({"kwargs": {"width": 2**64}}, "kwargs.width = 18446744073709551616: larger than"),
    ({"kwargs": {"width": [1, 2**70]}}, "kwargs.width[1]: 1180591620717411303424 is larger than int64"),
])
def test_bad_values_are_refused_at_the_edge(project: Path, capsys: pytest.CaptureFixture[str],
                                            doc: dict[str, Any], expected: str) -> None:
    """Issue 13: ``training: 'no'`` meant training; ``dtype: {a: 1}`` and an int64
    overflow were an internal error and a 94-line traceback."""
    (project / "t.yaml").write_text(yaml.safe_dump({"model": "build.py:build", "inputs": [[4, 64]], **doc}))
    rc, _, err = lint(["t.yaml"], project.parent, capsys)
    assert rc == 2 and expected in err, err


# -- random YAML targets ------------------------------------------------------------------

JUNK = st.one_of(st.none(), st.booleans(), st.integers(-2, 2**66), st.floats(allow_nan=True), st.text(max_size=6),
                 st.lists(st.integers(-1, 70), max_size=3))
DIM = st.one_of(st.integers(1, 130), st.integers(-3, 0), st.integers(2**62, 2**65))
SPEC = st.one_of(
    st.lists(DIM, min_size=1, max_size=3),
    st.fixed_dictionaries({"shape": st.lists(DIM, min_size=1, max_size=3)},
                          optional={"dtype": st.one_of(st.sampled_from(["float", "bf16", "int64", "long", "x"]), JUNK),
                                    "high": JUNK, "requires_grad": JUNK}),
    JUNK,
)
GOOD_MODELS = ("build.py:build", "build.py:Net", "pkg.models:build")
BAD_MODELS = ("shutil:rmtree", "os:system", "../elsewhere.py:f", "build.py:rmtree", "build.py:nope", "builtins:exec",
              "build.py")


GOOD_KWARGS = st.fixed_dictionaries({}, optional={"width": st.just(64), "out": st.integers(1, 130)})
GOOD_INPUTS = st.just([[4, 64]]) | st.just([{"shape": [2, 3, 64], "dtype": "float", "requires_grad": True}])
#: a target that lints: the builder, its inputs and any of the settings
VALID = st.fixed_dictionaries(
    {"model": st.sampled_from(GOOD_MODELS), "inputs": GOOD_INPUTS},
    optional={"kwargs": GOOD_KWARGS, "dtype": st.sampled_from(["bf16", "fp16", "fp32", "tf32"]),
              "gpu": st.sampled_from(["h100", "l4", "a100"]), "training": st.booleans(),
              "batch": st.integers(1, 64), "tp": st.sampled_from([1, 2])},
)
#: what a careless or hostile edit puts under each key
BAD = {
    "model": st.one_of(st.sampled_from(BAD_MODELS), JUNK),
    "kwargs": st.one_of(st.dictionaries(st.sampled_from(["width", "out", "path", "command", "1x"]),
                                        st.one_of(DIM, JUNK), min_size=1, max_size=2), JUNK),
    "inputs": st.one_of(st.lists(SPEC, min_size=1, max_size=2),
                        st.dictionaries(st.sampled_from(["x", "bad key"]), SPEC, min_size=1, max_size=1), JUNK),
    "dtype": st.one_of(st.just("fp8"), JUNK), "gpu": st.one_of(st.just("nope"), JUNK), "training": JUNK,
    "batch": st.one_of(DIM, JUNK), "tp": JUNK, "extra": JUNK,
}
MUTATION = st.sampled_from(sorted(BAD)).flatmap(lambda key: st.tuples(st.just(key), BAD[key]))
#: a valid target with none, one or two of its keys made bad (a third of them lint)
TARGET = st.builds(lambda doc, edits: {**doc, **dict(edits)}, VALID, st.lists(MUTATION, max_size=2))


@hostile_settings(40)
@given(TARGET)
def test_random_yaml_targets_keep_the_contract(project: Path, capsys: pytest.CaptureFixture[str],
                                               doc: dict[str, Any]) -> None:
    target = project / "t.yaml"
    target.write_text(yaml.safe_dump(doc))
    try:
        rc, _, err = lint(["t.yaml", "--format", "json"], project.parent, capsys)
    finally:
        target.unlink()
    event(f"exit {rc}")
    assert (project / "victim" / "keep.txt").exists() and not (project / "pwned").exists()
    if rc != 2:
        assert doc["model"] in GOOD_MODELS, (doc, err)


def test_allow_list_values_are_checked() -> None:
    from shapelint.load.builders import parse_allow_list

    assert parse_allow_list(["mypkg.models", "zoo"], "pyproject.toml:3") == ["mypkg.models", "zoo"]
    for bad in ("mypkg", ["my pkg"], [1], ["a..b"], ["shutil:rmtree"], ["shutil"], ["os.path"], ["builtins"]):
        with pytest.raises(ShapelintError, match="pyproject.toml:3: allow-builders"):
            parse_allow_list(bad, "pyproject.toml:3")
