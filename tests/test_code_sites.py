"""Findings of a Python target point at the line of the user's file that set the size:
the keyword of a library model's config class call (not transformers' own line), and
a layer's constructor when it was wrapped later (not the ``Sequential`` line); ``--fix``
edits the literal there."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from _cli_helpers import run

from shapelint.locate.code_sites import constructor_of, keywords

GPT2 = '''\
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def shapelint_model(batch: int = 8, seq: int = 512):
    model = GPT2LMHeadModel(GPT2Config(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=2, n_head=12))
    ids = torch.randint(0, 50257, (batch, seq))
    return model, dict(input_ids=ids, labels=ids)
'''

WRAPPED = '''\
import torch
from torch import nn


def shapelint_model(batch: int = 8, seq: int = 512):
    body = nn.Linear(768, 768)
    head = nn.Linear(768, 50257)
    model = nn.Sequential(body, nn.GELU(), head)
    return model, torch.randn(batch, seq, 768)
'''

ATTRIBUTE = '''\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(768, 1023)
        self.layers = nn.Sequential(nn.Linear(768, 768), self.head)

    def forward(self, x):
        return self.layers(x)


def shapelint_model():
    return Net(), torch.randn(4096, 768)
'''


def lint_json(path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    rc, out, err = run([path, "--no-cache", "--format", "json", "--min-step-share", "0"], capsys)
    assert rc == 1, err
    return json.loads(out)["findings"]


def test_keywords_are_every_integer_keyword_and_dict_key() -> None:
    found = keywords(ast.parse('C(vocab_size=50257, name="x", n=2)\nd = {"hidden_size": 768, 3: 4}\n'))
    assert [(k.name, k.value, k.line, k.column) for k in found] == [
        ("vocab_size", 50257, 1, 3), ("n", 2, 1, 31), ("hidden_size", 768, 2, 6)]


def test_the_constructor_of_a_wrapped_layer_is_found_by_its_name() -> None:
    tree = ast.parse(WRAPPED)
    assert constructor_of(tree, 8, 50257) == (7, 12)
    assert constructor_of(tree, 7, 50257) is None  # built on that line: nothing to follow
    assert constructor_of(tree, 8, 1000) is None  # no constructor takes that literal
    assert constructor_of(ast.parse(ATTRIBUTE), 9, 1023) == (8, 21)


@pytest.mark.slow
def test_a_library_model_is_located_at_the_config_keyword(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    path = tmp_path / "model.py"
    path.write_text(GPT2)
    (f,) = [f for f in lint_json(path, capsys) if f["code"] == "SL501"]
    assert f["source"] == {"file": str(path), "line": 6, "column": 40}
    assert GPT2.splitlines()[5][39:].startswith("vocab_size=50257")
    assert f["suggestion"] == {"parameter": "vocab_size", "from": 50257, "to": 50264}
    d = f["details"]
    assert d["config_key"] == "vocab_size" and d["code_parameter"] == "out_features"
    assert d["library_source"]["file"].endswith("transformers/models/gpt2/modeling_gpt2.py")
    rc, out, err = run([path, "--no-cache", "--fix"], capsys)
    assert rc == 0, out + err
    assert "GPT2Config(vocab_size=50264, n_positions=1024" in path.read_text()
    assert "torch.randint(0, 50257, (batch, seq))" in path.read_text()  # the data keeps its tokens


def test_a_wrapped_layer_is_located_at_its_constructor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "model.py"
    path.write_text(WRAPPED)
    (f,) = lint_json(path, capsys)
    assert (f["code"], f["module"]) == ("SL101", "2")
    assert f["source"] == {"file": str(path), "line": 7, "column": 12}
    rc, out, err = run([path, "--no-cache", "--fix"], capsys)
    assert rc == 0, out + err
    lines = path.read_text().splitlines()
    assert lines[6] == "    head = nn.Linear(768, 50264)"
    assert lines[7] == "    model = nn.Sequential(body, nn.GELU(), head)"


def test_a_layer_held_by_an_attribute_is_at_its_constructor(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "model.py"
    path.write_text(ATTRIBUTE)
    (f,) = [f for f in lint_json(path, capsys) if f["code"] == "SL101"]
    assert f["source"] == {"file": str(path), "line": 8}  # ``self.head = ...`` registers it where it is built
    assert f["suggestion"] == {"parameter": "out_features", "from": 1023, "to": 1024}


def test_a_library_size_no_literal_gives_says_what_to_do(tmp_path: Path) -> None:
    """perceiver-pytorch's ``in_features`` 29 is computed from ``num_freq_bands=6``: no
    keyword of the user's file holds it, so the finding stays at the library line and says so."""
    from shapelint.locate.code_sites import at_keyword
    from shapelint.model.locations import Source
    from shapelint.model.records import Finding, Suggestion

    f = Finding("SL101", "misaligned-leading-dim", "error", "fc", "msg", (0,), 1.0, 0.5,
                suggestion=Suggestion("in_features", 29, 32),
                source=Source("/venv/lib/python3.11/site-packages/perceiver_pytorch/perceiver_pytorch.py", 113))
    found = keywords(ast.parse("m = Perceiver(input_channels=3, input_axis=2, num_freq_bands=6)"))
    out = at_keyword(f, found, str(tmp_path / "model.py"))
    assert out.source == f.source and out.location is None
    assert out.message.endswith("in_features = 29 is set in installed code, and no literal of model.py gives it "
                                "(a library default, or computed from what it passes): change the arguments it "
                                "comes from, and where none reaches it the change is the library's (--fix cannot)")
    assert at_keyword(f, keywords(ast.parse("m = Net(in_features=29)")), "model.py").source == Source("model.py", 1, 9)


def test_a_constant_name_counts_as_its_literal() -> None:
    text = WRAPPED.replace("import torch\n", "import torch\nVOCAB = 50257\n").replace("768, 50257", "768, VOCAB")
    tree = ast.parse(text)
    assert constructor_of(tree, 9, 50257) == (8, 12)  # head = nn.Linear(768, VOCAB)
    rebound = ast.parse(text + "VOCAB = 4\n")  # bound twice: no longer one literal
    assert constructor_of(rebound, 9, 50257) is None


INSTALLED = '''\
from torch import nn


class Net(nn.Module):
    def __init__(self, width=1023):
        super().__init__()
        self.fc = nn.Linear(768, width)

    def forward(self, x):
        return self.fc(x)
'''

USES_INSTALLED = '''\
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "site-packages"))
import shapelint_test_installed_pkg as pkg  # noqa: E402
import torch  # noqa: E402


def shapelint_model():
    return pkg.Net(), torch.randn(4096, 768)
'''


def test_a_size_of_installed_code_is_shown_at_the_call_that_builds_it(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A layer an installed package builds with its own default (no literal of the user's
    file gives 1023): the finding is at the user's call of that package (where a
    suppression comment goes), with the installed line kept as context."""
    package = tmp_path / "site-packages" / "shapelint_test_installed_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(INSTALLED)
    path = tmp_path / "model.py"
    path.write_text(USES_INSTALLED)
    (f,) = lint_json(path, capsys)
    assert f["source"] == {"file": str(path), "line": 10, "column": 12}
    assert USES_INSTALLED.splitlines()[9][11:].startswith("pkg.Net()")
    assert f["suggestion"] == {"parameter": "out_features", "from": 1023, "to": 1024}
    lib = f["details"]["library_source"]
    assert lib == {"file": str(package / "__init__.py"), "line": 7}
    assert "no literal of model.py gives it" in f["message"]
    path.write_text(USES_INSTALLED.replace("(4096, 768)\n", "(4096, 768)  # shapelint: ignore[SL101]\n"))
    rc, out, err = run([path, "--no-cache", "--format", "json"], capsys)
    assert rc == 0 and json.loads(out)["findings"] == [], err
