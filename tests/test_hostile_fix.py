"""--fix on hostile and fragile inputs (issue 24): each case in its own folder, the
whole folder snapshotted before and after, and exactly the bytes that changed (or
nothing, and the reason line) asserted.

The project is ``tmp_path/proj`` (it holds ``.git``); ``tmp_path/outside`` is beyond it."""

from __future__ import annotations

import io
import json
import os
import signal
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch
from _cli_helpers import MODEL, run
from _hostile import full_snapshot

from shapelint.app import cli, isolate
from shapelint.errors import ShapelintError
from shapelint.fix import files as fix_files

#: a one-layer GPT-2 whose vocabulary (32001) SL501 pads to 32008 in bf16
GPT2 = {"model_type": "gpt2", "n_embd": 256, "n_head": 4, "n_layer": 1, "n_positions": 128, "vocab_size": 32001}
GPT2_ARGS = ["--seq", "128", "--batch", "2", "--min-step-share", "0"]
RECIPE = "model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=8)"
#: the tiny MLP: nn.Linear(1023, 1024) and its example input torch.randn(4096, 1023)
LINEAR = MODEL.format(in_features=1023, comment="")
FIXED = LINEAR.replace("1023", "1024")


@pytest.fixture
def proj(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    monkeypatch.chdir(root)
    return root


def fix(argv: list[object], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    return run([*argv, "--fix", "--no-config"], capsys)


def changes(before: dict[str, bytes | str], after: dict[str, bytes | str]) -> dict[str, tuple[object, object]]:
    """Each entry that differs: (before, after)."""
    return {k: (before.get(k), after.get(k)) for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)}


def unchanged(folder: Path, argv: list[object], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``--fix``; nothing under ``folder`` may change. Its stdout."""
    before = full_snapshot(folder)
    rc, out, err = fix(argv, capsys)
    assert rc == 1, err
    assert changes(before, full_snapshot(folder)) == {}
    return out


# -- pretrained checkpoints --------------------------------------------------------------


def test_checkpoint_with_weights_is_never_edited(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = proj / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps(GPT2, indent=2) + "\n")
    (ckpt / "model.safetensors").write_bytes(b"\0weights\0")
    rc, out, _ = run([ckpt / "config.json", "--no-config", *GPT2_ARGS], capsys)  # the report alone
    assert rc == 1
    assert (f"pretrained checkpoint (model.safetensors is beside config.json): do not edit its config, pad in the "
            f"training code after from_pretrained: {RECIPE} (32001 → 32008 rows when len(tokenizer) is 32001); "
            f"the tokenizer keeps its 32001 tokens") in out
    rc, out, _ = run([ckpt / "config.json", "--no-config", "--format", "json", *GPT2_ARGS], capsys)
    (f,) = json.loads(out)["findings"]
    assert f["code"] == "SL501" and f["details"]["pretrained"] == "model.safetensors is beside config.json"
    assert RECIPE in f["details"]["pretrained_fix"]
    out = unchanged(proj, [ckpt / "config.json", *GPT2_ARGS], capsys)
    assert "SL501 vocab_size: 32001 → 32008: not fixed: a pretrained checkpoint (model.safetensors is beside " \
           "config.json)" in out and RECIPE in out and "the tokenizer keeps its 32001 tokens" in out
    assert "Fixed 0 findings (1 remaining)." in out
    _, out, _ = run([ckpt / "config.json", "--diff", "--no-config", *GPT2_ARGS], capsys)
    assert out == ""  # --diff shows what --fix writes: nothing


def test_downloaded_config_with_torch_dtype_is_never_edited(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (proj / "config.json").write_text(json.dumps({**GPT2, "torch_dtype": "float32"}, indent=2) + "\n")
    out = unchanged(proj, [proj / "config.json", *GPT2_ARGS], capsys)
    assert "not fixed: a pretrained checkpoint (config.json has torch_dtype, the mark of a downloaded model)" in out
    assert RECIPE in out


def test_a_config_saved_by_transformers_5_20_is_never_edited(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """transformers 5.20's save_pretrained writes ``dtype`` (not ``torch_dtype``) and no
    ``_name_or_path``: a config-only download was edited."""
    saved = {**GPT2, "architectures": ["GPT2LMHeadModel"], "dtype": "bfloat16", "transformers_version": "5.20.0"}
    (proj / "config.json").write_text(json.dumps(saved, indent=2) + "\n")
    out = unchanged(proj, [proj / "config.json", *GPT2_ARGS], capsys)
    assert "not fixed: a pretrained checkpoint (config.json has dtype, the mark of a downloaded model)" in out
    assert RECIPE in out and "Fixed 0 findings (1 remaining)." in out


# -- exactly the token that is the size --------------------------------------------------


def test_another_functions_variable_of_the_same_value_is_left_alone(proj: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    text = ("import torch\nimport torch.nn as nn\n\nD = 1023\n\n\ndef other():\n    D = 1023\n    return D\n\n\n"
            "def shapelint_model():\n    return nn.Sequential(nn.Linear(D, 1024), nn.ReLU()), torch.randn(4096, D)\n")
    (proj / "model.py").write_text(text)
    before = full_snapshot(proj)
    rc, out, _ = fix(["model.py"], capsys)
    assert rc == 0 and "Fixed 1 finding (0 remaining)." in out
    assert changes(before, full_snapshot(proj)) == {
        "model.py": (text.encode(), text.replace("D = 1023\n\n\ndef", "D = 1024\n\n\ndef", 1).encode())}
    assert "    D = 1023\n" in (proj / "model.py").read_text()


TOKENIZER = '''\
import torch
import torch.nn as nn


class Tokenizer:
    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size


class LM(nn.Module):
    def __init__(self, vocab_size: int = 32001) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab_size, 256)
        self.head = nn.Linear(256, vocab_size, bias=False)

    def forward(self, idx):
        return self.head(self.emb(idx))


def shapelint_model():
    tokenizer = Tokenizer(vocab_size=32001)
    return LM(vocab_size=32001), torch.randint(0, tokenizer.vocab_size, (2, 128))
'''


def test_a_tokenizers_vocab_size_is_left_alone(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (proj / "lm.py").write_text(TOKENIZER)
    before = full_snapshot(proj)
    rc, out, _ = fix(["lm.py", "--min-step-share", "0"], capsys)
    assert "fixed SL501 out_features: 32001 → 32008 in lm.py" in out and rc == 0
    # the construction that reaches the layer changes; the tokenizer and the unused default do not
    after = TOKENIZER.replace("LM(vocab_size=32001)", "LM(vocab_size=32008)")
    assert changes(before, full_snapshot(proj)) == {"lm.py": (TOKENIZER.encode(), after.encode())}


#: ``Linear(1023)`` passes out_features: the partial already gave in_features
PARTIAL = """\
import functools

import torch
import torch.nn as nn

Linear = functools.partial(nn.Linear, 1023)


def shapelint_model():
    return nn.Sequential(Linear(1023), nn.ReLU()), torch.randn(4096, 1023)
"""
#: the class itself replaced in the module the file imports
PATCHED = PARTIAL.replace("Linear = functools.partial(nn.Linear, 1023)", "nn.Linear = functools.partial(nn.Linear, 1023)"
                          ).replace("Sequential(Linear(1023)", "Sequential(nn.Linear(1023)")


@pytest.mark.parametrize("text", [PARTIAL, PATCHED], ids=["partial", "patched"])
def test_positions_are_not_read_by_a_name_that_is_not_the_class(text: str, proj: Path,
                                                                capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """``Linear = functools.partial(nn.Linear, 1023)`` then ``Linear(1023)``: the fix
    edited the 1023 that is really out_features."""
    # PATCHED replaces torch.nn.Linear in this process (the CLI lints in a child): put it back after
    monkeypatch.setattr(torch.nn, "Linear", torch.nn.Linear)
    (proj / "model.py").write_text(text)
    out = unchanged(proj, ["model.py"], capsys)
    assert "SL101 in_features: 1023 → 1024: not fixed: `" in out
    assert "is not provably the torch.nn class its name suggests" in out
    assert "shapelint cannot tell which parameter its positional arguments set" in out
    if text is PARTIAL:
        assert "it is set at model.py:6 to `functools.partial(nn.Linear, 1023)`, not imported from torch.nn" in out


def test_a_class_replaced_by_an_imported_helper_is_not_read_by_position(proj: Path,
                                                                        capsys: pytest.CaptureFixture[str],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The patch lives in ``helper.py``: nothing in ``model.py`` assigns over ``nn.Linear``,
    but while the model runs ``nn.Linear(1023)`` is ``Linear(1023, 1023)``."""
    monkeypatch.setattr(torch.nn, "Linear", torch.nn.Linear)
    (proj / "helper.py").write_text("import functools\n\nimport torch.nn as nn\n\n"
                                    "nn.Linear = functools.partial(nn.Linear, 1023)\n")
    (proj / "model.py").write_text(PATCHED.replace("nn.Linear = functools.partial(nn.Linear, 1023)\n", "import helper\n"))
    out = unchanged(proj, ["model.py"], capsys)
    assert ("`nn.Linear(...)` at model.py:10 is not provably the torch.nn class its name suggests (torch.nn.Linear "
            "is not torch's class while the model runs: code it imports replaced it)") in out


def test_a_class_imported_from_torch_nn_under_another_name_is_fixed(proj: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    text = LINEAR.replace("import torch.nn as nn\n", "import torch.nn as nn\nfrom torch.nn import Linear as Dense\n"
                          ).replace("nn.Linear(1023, 1024)", "Dense(1023, 1024)")
    (proj / "model.py").write_text(text)
    before = full_snapshot(proj)
    rc, out, _ = fix(["model.py"], capsys)
    assert rc == 0 and "Fixed 1 finding (0 remaining)." in out
    assert changes(before, full_snapshot(proj)) == {"model.py": (text.encode(), text.replace("1023", "1024").encode())}


#: the decorator builds the class with its own 1023: the call's 1023 is read by nothing
WRAPPED = """\
import torch
import torch.nn as nn


def fixed_hidden(cls):
    return lambda width, hidden: cls(width, 1023)


@fixed_hidden
class Block(nn.Module):
    def __init__(self, width, hidden):
        super().__init__()
        self.up = nn.Linear(width, hidden)

    def forward(self, x):
        return self.up(x)


def shapelint_model():
    return nn.Sequential(Block(4096, 1023), nn.ReLU()), torch.randn(4096, 4096)
"""


def test_a_decorated_class_is_not_read_by_its_signature(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``Block(4096, 1023)`` passes ``hidden`` by its __init__, but the decorator builds
    the class with its own 1023: the fix edited the call's 1023, which sizes nothing."""
    (proj / "model.py").write_text(WRAPPED)
    out = unchanged(proj, ["model.py", "--min-step-share", "0"], capsys)
    assert "Block (model.py:10) is wrapped by @fixed_hidden: shapelint cannot tell what the call at model.py:20 " \
           "passes to `hidden`" in out


def test_an_edit_the_relint_shows_changed_nothing_is_undone(proj: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The last line of defence, for a proof that is wrong (here: the decorator check
    taken away): a fixed finding the re-lint still reports as it was means the edit
    changed nothing the model reads; it was kept, 'Fixed 1 finding (1 remaining)'."""
    from shapelint.fix import chain, follow

    monkeypatch.setattr(follow, "rewrapping", lambda *_: None)
    monkeypatch.setattr(chain, "rewrapping", lambda *_: None)
    (proj / "model.py").write_text(WRAPPED)
    before = full_snapshot(proj)
    rc, _, err = fix(["model.py", "--min-step-share", "0"], capsys)
    assert rc == 2 and err == ("shapelint: error: the edit of model.py did not change what it was to fix (SL101 "
                               "out_features: 1023 → 1024 is still reported): the model does not read that value; "
                               "every edit was undone (1 file restored)\n")
    assert changes(before, full_snapshot(proj)) == {}


CONFIG_ONE_LINE = ('{"model_type": "gpt2", "task_specific_params": {"vocab_size": 32001}, "n_embd": 256, "n_head": 4, '
                   '"n_layer": 1, "n_positions": 128, "vocab_size": 32001}\n')


def test_one_line_json_edits_the_top_level_key(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (proj / "config.json").write_text(CONFIG_ONE_LINE)
    before = full_snapshot(proj)
    rc, out, _ = fix(["config.json", *GPT2_ARGS], capsys)
    assert rc == 0 and "Fixed 1 finding (0 remaining)." in out
    after = CONFIG_ONE_LINE.replace('"n_positions": 128, "vocab_size": 32001}', '"n_positions": 128, "vocab_size": 32008}')
    assert changes(before, full_snapshot(proj)) == {"config.json": (CONFIG_ONE_LINE.encode(), after.encode())}


def test_json_with_a_duplicated_key_edits_the_one_json_loads_uses(proj: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    text = json.dumps(GPT2, indent=2).replace('"n_embd"', '"vocab_size": 50000,\n  "n_embd"') + "\n"
    assert json.loads(text)["vocab_size"] == 32001 and text.count('"vocab_size"') == 2
    (proj / "config.json").write_text(text)
    before = full_snapshot(proj)
    rc, out, _ = fix(["config.json", *GPT2_ARGS], capsys)
    assert rc == 0 and "config.json:8: fixed SL501 vocab_size: 32001 → 32008" in out
    after = text.replace('"vocab_size": 32001', '"vocab_size": 32008')
    assert changes(before, full_snapshot(proj)) == {"config.json": (text.encode(), after.encode())}


# -- the bytes the lint read ---------------------------------------------------------------

#: an editor saved this between the lint and the fix: line 6, where the finding points,
#: is now another layer whose 1023 is not the finding's size
SAVED_MEANWHILE = LINEAR.replace("    model = ", "    probe = nn.Linear(1023, 8)\n    model = ")


def test_a_file_changed_since_the_lint_is_not_edited(proj: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from shapelint.fix import run as fix_run

    (proj / "model.py").write_text(LINEAR)
    real_plan = fix_run.plan

    def saved_then_planned(*args: object, **kwargs: object) -> object:
        (proj / "model.py").write_text(SAVED_MEANWHILE)
        return real_plan(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(fix_run, "plan", saved_then_planned)
    rc, out, err = fix(["model.py"], capsys)
    assert rc == 1, err
    assert "SL101 in_features: 1023 → 1024: not fixed: model.py changed since it was linted; run shapelint again" in out
    assert (proj / "model.py").read_text() == SAVED_MEANWHILE


# -- inside the project only ----------------------------------------------------------------

LIBRARY = "import torch.nn as nn\n\n\ndef block():\n    return nn.Sequential(nn.Linear(1024, 1023))\n"
USES_LIBRARY = ("import torch\nfrom {module} import block\n\n\ndef shapelint_model():\n"
                "    return block(), torch.randn(4096, 1024)\n")


def test_a_library_outside_the_project_is_left_alone(tmp_path: Path, proj: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "outside" / "hostile_fix_shared.py").write_text(LIBRARY)
    monkeypatch.syspath_prepend(str(tmp_path / "outside"))
    monkeypatch.delitem(sys.modules, "hostile_fix_shared", raising=False)
    (proj / "model.py").write_text(USES_LIBRARY.format(module="hostile_fix_shared"))
    out = unchanged(tmp_path, ["model.py"], capsys)
    assert "SL101 out_features: 1023 → 1024: not fixed:" in out and "outside the project" in out
    sys.modules.pop("hostile_fix_shared", None)


def test_the_relint_sees_the_edited_library_module(proj: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The project's own library, imported from sys.path (not the target's folder): the
    first lint leaves it in sys.modules, so only a fresh process sees the edit."""
    (proj / "lib").mkdir()
    (proj / "lib" / "hostile_fix_layers.py").write_text(LIBRARY)
    monkeypatch.syspath_prepend(str(proj / "lib"))
    monkeypatch.delitem(sys.modules, "hostile_fix_layers", raising=False)
    (proj / "models").mkdir()
    (proj / "models" / "model.py").write_text(USES_LIBRARY.format(module="hostile_fix_layers"))
    before = full_snapshot(proj)
    rc, out, _ = fix(["models/model.py"], capsys)
    assert "hostile_fix_layers" in sys.modules  # the stale module this process keeps
    sys.modules.pop("hostile_fix_layers", None)
    assert "Fixed 1 finding (0 remaining)." in out and rc == 0
    assert changes(before, full_snapshot(proj)) == {
        "lib/hostile_fix_layers.py": (LIBRARY.encode(), LIBRARY.replace("1023", "1024").encode())}


def test_a_symlink_inside_the_project_stays_a_link(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (proj / "real").mkdir()
    (proj / "real" / "model.py").write_text(LINEAR)
    (proj / "model.py").symlink_to("real/model.py")
    before = full_snapshot(proj)
    rc, out, _ = fix(["model.py"], capsys)
    assert rc == 0 and "Fixed 1 finding (0 remaining)." in out
    assert changes(before, full_snapshot(proj)) == {"real/model.py": (LINEAR.encode(), FIXED.encode())}
    assert (proj / "model.py").is_symlink() and os.readlink(proj / "model.py") == "real/model.py"


def test_a_symlink_leaving_the_project_is_refused(tmp_path: Path, proj: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "outside" / "model.py").write_text(LINEAR)
    (proj / "model.py").symlink_to(tmp_path / "outside" / "model.py")
    out = unchanged(tmp_path, ["model.py"], capsys)
    assert "not fixed:" in out and "is a symlink to" in out and "outside the project" in out


# -- what the file is ---------------------------------------------------------------------


def test_a_hard_linked_file_is_refused(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (proj / "model.py").write_text(LINEAR)
    os.link(proj / "model.py", proj / "twin.py")
    out = unchanged(proj, ["model.py"], capsys)
    assert "not fixed: model.py has 2 hard links: writing it would split them" in out
    assert os.stat(proj / "model.py").st_ino == os.stat(proj / "twin.py").st_ino


def test_a_read_only_file_is_refused(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (proj / "model.py").write_text(LINEAR)
    (proj / "model.py").chmod(0o444)
    out = unchanged(proj, ["model.py"], capsys)
    assert "not fixed: model.py is read-only (mode 444)" in out
    assert stat.S_IMODE((proj / "model.py").stat().st_mode) == 0o444


BUILDER = ("import torch.nn as nn\n\n\ndef build(widths):\n    layers = []\n"
           "    for fan_in, fan_out in zip(widths, widths[1:]):\n        layers.append(nn.Linear(fan_in, fan_out))\n"
           "    return nn.Sequential(*layers)\n")


def test_a_yaml_hex_integer_is_refused_cleanly(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (proj / "mlp.py").write_text(BUILDER)
    (proj / "mlp.yaml").write_text("model: mlp.py:build\nkwargs:\n  widths: [1024, 4096, 0x1555, 1024]\n"
                                   "inputs:\n  - shape: [8192, 1024]\n")
    out = unchanged(proj, ["mlp.yaml"], capsys)
    assert "mlp.yaml:3: `0x1555` is 5461 written in another form than decimal" in out
    assert "write it as 5461 for --fix to change it" in out and "internal error" not in out


# -- YAML: anchors, aliases, block and flow style ------------------------------------------

#: a builder whose two sizes are named by the layer's parameters, and one whose are not
LIN = ("import torch.nn as nn\n\n\ndef build(in_features, out_features):\n"
       "    return nn.Sequential(nn.Linear(in_features, out_features), nn.ReLU())\n")
DH = "import torch.nn as nn\n\n\ndef build(d, h):\n    return nn.Sequential(nn.Linear(d, h), nn.ReLU())\n"


def yaml_target(kwargs: dict[str, str], style: str, width: str = "1023") -> str:
    """A shapelint YAML for ``lin.py:build`` with ``kwargs`` (values written as given) in
    block or flow style."""
    if style == "block":
        body = "kwargs:\n" + "".join(f"  {k}: {v}\n" for k, v in kwargs.items())
    else:
        body = "kwargs: {" + ", ".join(f"{k}: {v}" for k, v in kwargs.items()) + "}\n"
    return f"model: lin.py:build\n{body}inputs:\n  - shape: [4096, {width}]\n"


@pytest.mark.parametrize("written", ["&w 1023", "!!int 1023", "&w !!int 1023"])
def test_a_yaml_anchor_or_tag_is_kept_and_its_alias_follows(written: str, proj: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The edit span began at the anchor: ``in_features: &w 1023`` became ``in_features:
    1024`` and the input's ``*w`` an undefined alias."""
    (proj / "lin.py").write_text(LIN)
    text = yaml_target({"in_features": written, "out_features": "1024"}, "block", "*w" if "&w" in written else "1023")
    (proj / "t.yaml").write_text(text)
    before = full_snapshot(proj)
    rc, out, err = fix(["t.yaml"], capsys)
    assert rc == 0 and "Fixed 1 finding (0 remaining)." in out, err
    after = text.replace("1023", "1024")
    assert changes(before, full_snapshot(proj)) == {"t.yaml": (text.encode(), after.encode())}
    assert f"in_features: {written.replace('1023', '1024')}\n" in after


@pytest.mark.parametrize("style", ["block", "flow"])
def test_a_yaml_anchor_another_key_aliases_is_not_edited(style: str, proj: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """``out_features: *w`` reads the same node: editing it would grow out_features too."""
    (proj / "lin.py").write_text(LIN)
    (proj / "t.yaml").write_text(yaml_target({"in_features": "&w 1023", "out_features": "*w"}, style))
    out = unchanged(proj, ["t.yaml"], capsys)
    assert ("1023 at kwargs.in_features is an anchor also read at kwargs.out_features: editing it would change "
            "those too; give kwargs.in_features its own value to fix it") in out


@pytest.mark.parametrize("style", ["block", "flow"])
def test_block_and_flow_yaml_edit_the_key_and_the_input_alike(style: str, proj: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Both sizes 1023: the key named in_features is the size, and the example input
    grows with it (block style edited the key and left the input 1023: the re-lint failed)."""
    (proj / "lin.py").write_text(LIN)
    text = yaml_target({"out_features": "1023", "in_features": "1023"}, style)
    (proj / "t.yaml").write_text(text)
    before = full_snapshot(proj)
    rc, out, err = fix(["t.yaml"], capsys)
    # out_features 1023 shows once in_features is fixed (it was below the step-share bar)
    assert rc == 1 and "Fixed 1 finding (1 remaining)." in out, err
    after = yaml_target({"out_features": "1023", "in_features": "1024"}, style, "1024")
    assert changes(before, full_snapshot(proj)) == {"t.yaml": (text.encode(), after.encode())}


@pytest.mark.parametrize("style", ["block", "flow"])
def test_block_and_flow_yaml_refuse_an_ambiguous_key_alike(style: str, proj: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """``build(d, h)`` with d = h = 1023: which key is in_features is a guess (block
    style edited h, the output size)."""
    (proj / "lin.py").write_text(DH)
    (proj / "t.yaml").write_text(yaml_target({"h": "1023", "d": "1023"}, style))
    out = unchanged(proj, ["t.yaml", "--unsafe-fixes"], capsys)
    assert "cannot tell which" in out and "Fixed 0 findings (1 remaining)." in out


@pytest.mark.parametrize("style", ["block", "flow"])
def test_block_and_flow_yaml_agree_a_builders_own_key_is_unsafe(style: str, proj: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``d`` may size more than this layer: growing it is not padding, in either style
    (flow style called it a safe in_features fix)."""
    (proj / "lin.py").write_text(DH)
    (proj / "t.yaml").write_text(yaml_target({"h": "1024", "d": "1023"}, style))
    out = unchanged(proj, ["t.yaml"], capsys)
    assert "not fixed: unsafe fix (it changes what the model computes): rerun with --unsafe-fixes" in out
    assert "1 unsafe fix can be applied with --unsafe-fixes." in out


@pytest.mark.parametrize("style", ["block", "flow"])
def test_a_yaml_key_given_twice_is_not_edited(style: str, proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """YAML keeps the last of a duplicated key: block style edited the first, dead one
    (and the input), so the re-lint failed on a model the edit never reached."""
    (proj / "lin.py").write_text(LIN)
    text = yaml_target({"in_features": "1023", "out_features": "1024"}, style)
    text = text.replace("in_features: 1023", "in_features: 1023\n  in_features: 1023" if style == "block"
                        else "in_features: 1023, in_features: 1023")
    (proj / "t.yaml").write_text(text)
    out = unchanged(proj, ["t.yaml"], capsys)
    assert "SL101 in_features: 1023 → 1024: not fixed: " in out
    assert ("the key in_features is given 2 times in one mapping (YAML keeps the last)" if style == "block"
            else "1023 is given 2 times under kwargs or hf_config") in out


def test_a_file_with_a_bom_keeps_it(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (proj / "model.py").write_bytes(b"\xef\xbb\xbf" + LINEAR.encode())
    before = full_snapshot(proj)
    rc, out, _ = fix(["model.py"], capsys)
    assert rc == 0 and "Fixed 1 finding (0 remaining)." in out
    assert changes(before, full_snapshot(proj)) == {
        "model.py": (b"\xef\xbb\xbf" + LINEAR.encode(), b"\xef\xbb\xbf" + FIXED.encode())}


def test_a_latin_1_python_file_keeps_its_encoding(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    head = "# -*- coding: latin-1 -*-\n# Modèle à café\n"
    (proj / "model.py").write_bytes((head + LINEAR).encode("latin-1"))
    before = full_snapshot(proj)
    rc, out, _ = fix(["model.py"], capsys)
    assert rc == 0 and "Fixed 1 finding (0 remaining)." in out
    assert changes(before, full_snapshot(proj)) == {
        "model.py": ((head + LINEAR).encode("latin-1"), (head + FIXED).encode("latin-1"))}


def test_crlf_line_ends_are_kept(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (proj / "model.py").write_bytes(LINEAR.replace("\n", "\r\n").encode())
    config = json.dumps(GPT2, indent=2).replace("\n", "\r\n") + "\r\n"
    (proj / "config.json").write_bytes(config.encode())
    before = full_snapshot(proj)
    rc, out, _ = fix(["model.py", "config.json", *GPT2_ARGS], capsys)
    assert rc == 0 and "Fixed 2 findings (0 remaining)." in out
    assert changes(before, full_snapshot(proj)) == {
        "config.json": (config.encode(), config.replace("32001", "32008").encode()),
        "model.py": (LINEAR.replace("\n", "\r\n").encode(), FIXED.replace("\n", "\r\n").encode())}


# -- the re-lint ---------------------------------------------------------------------------

#: a rule from --rules-dir: the first GEMM could run in fp8 (a run setting, never fixed)
USER_RULE = '''\
"""A rule from --rules-dir."""
from dataclasses import replace

from shapelint.model.records import Change, Proposal, Suggestion

CODE, NAME, SEVERITY, BAD, GOOD = "SL901", "user-rule", "warning", [], []


def check(gemms, hardware, context):
    first = tuple(gemms[:1])
    yield Proposal(CODE, NAME, SEVERITY, first,
                   Change(Suggestion("dtype", "bf16", "fp8"), tuple(replace(g, dtype="fp8") for g in first), "fp8"))
'''
#: a model that prints when imported and writes to fd 1 while it is built
LOUD = LINEAR.replace("import torch\n", "import os\n\nimport torch\n\nprint('{\"findings\": []}')\n", 1).replace(
    "    model = ", "    os.write(1, b'not json')\n    model = ")


def test_the_relint_keeps_the_runs_rules_gpu_and_options(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The child process lints with the selected codes, --rules-dir, --gpu and the
    policy of this run, and what the model prints there cannot corrupt the results."""
    (proj / "rules").mkdir()
    (proj / "rules" / "mine.py").write_text(USER_RULE)
    (proj / "model.py").write_text(LOUD)
    rc, out, _ = fix(["model.py", "--rules-dir", "rules", "--gpu", "a100", "--select", "SL101,SL901",
                      "--min-step-share", "0", "--format", "json"], capsys)
    report = json.loads(out)
    assert rc == 1 and report["summary"]["gpu"] == "a100-80gb"
    assert [(f["code"], f["details"].get("not_fixed", "")) for f in report["findings"]] == [
        ("SL901", "dtype is how the model runs, not a size in a file")]
    assert (proj / "model.py").read_text() == LOUD.replace("1023", "1024")


# -- undoing -----------------------------------------------------------------------------


#: the fix is proven, but the file checks the old width itself: the re-lint fails
CHECKED = LINEAR.replace("    return model,", "    if model[0].in_features != 1000 + 23:\n"
                                            "        raise ValueError('the width changed')\n    return model,")


def test_a_relint_failure_restores_every_file(proj: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (proj / "good.py").write_text(LINEAR)
    (proj / "bad.py").write_text(CHECKED)
    (proj / "bad.py").chmod(0o640)
    before = full_snapshot(proj)
    rc, out, err = fix(["good.py", "bad.py"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "the fixes broke the re-lint, so every edit was undone (2 files restored): bad.py:" in err
    assert "the width changed" in err
    assert changes(before, full_snapshot(proj)) == {}
    assert stat.S_IMODE((proj / "bad.py").stat().st_mode) == 0o640
    assert not list(proj.rglob("*.shapelint"))


def test_a_write_failure_restores_every_file(proj: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    (proj / "a.py").write_text(LINEAR)
    (proj / "b.py").write_text(LINEAR)
    before = full_snapshot(proj)
    real = fix_files.replace_file
    calls: list[Path] = []

    def failing(path: Path, data: bytes, st: os.stat_result) -> None:
        calls.append(path)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(path, data, st)

    monkeypatch.setattr(fix_files, "replace_file", failing)
    rc, _, err = fix(["a.py", "b.py"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "No space left on device; every edit was undone" in err
    assert len(calls) == 3  # a written, b failed, a put back
    assert changes(before, full_snapshot(proj)) == {}


# -- a fix the process cannot finish (--timeout) -----------------------------------------

needs_fork = pytest.mark.skipif(not isolate.available(), reason="needs os.fork")


@pytest.fixture
def journals(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary folder the journal is made in, to see that none is left (nor a
    re-lint's folder; torch may leave its own caches there)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _ours(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.startswith("shapelint-")]


def _stopped_mid_fix(target: Path, new: bytes, *, commit: bool = False, meddle: bytes | None = None,
                     half: bool = False) -> int:
    """The child's side: write ``new`` over ``target`` as --fix does, then hang (``half``:
    in the middle of writing a second file's temporary copy, as replace_file makes it)."""
    tx = fix_files.Transaction()
    tx.write(target, target.read_bytes(), new)
    if half:
        fd, _ = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".shapelint")
        os.write(fd, new[: len(new) // 2])
    if commit:
        tx.commit()
    if meddle is not None:
        target.write_bytes(meddle)
    time.sleep(60)
    return 0


@needs_fork
def test_a_fix_stopped_by_the_timeout_is_put_back(proj: Path, journals: Path) -> None:
    """The parent killed the child between its write and the re-lint's verdict: the file
    stayed half-fixed (edited, never re-linted, never undone)."""
    model = proj / "model.py"
    model.write_text(LINEAR)
    model.chmod(0o640)
    before = full_snapshot(proj)
    with pytest.raises(ShapelintError) as stopped:
        isolate.run_isolated(lambda: _stopped_mid_fix(model, FIXED.encode()), timeout=2, stdout=io.BytesIO())
    assert str(stopped.value) == ("--fix did not finish: put back model.py as it was; the lint ran past --timeout 2 s "
                                  "and was stopped")
    assert full_snapshot(proj) == before and stat.S_IMODE(model.stat().st_mode) == 0o640
    assert _ours(journals) == []  # the journal is gone


@needs_fork
def test_a_temporary_file_half_written_when_stopped_is_removed(proj: Path, journals: Path) -> None:
    model = proj / "model.py"
    model.write_text(LINEAR)
    (proj / ".model.py.mine.shapelint").write_text("a file of the user's that has such a name\n")
    before = full_snapshot(proj)
    with pytest.raises(ShapelintError, match="^--fix did not finish: put back model.py as it was; "):
        isolate.run_isolated(lambda: _stopped_mid_fix(model, FIXED.encode(), half=True), timeout=2,
                             stdout=io.BytesIO())
    assert full_snapshot(proj) == before


@needs_fork
def test_a_fix_the_relint_confirmed_stays_after_a_timeout(proj: Path, journals: Path) -> None:
    model = proj / "model.py"
    model.write_text(LINEAR)
    with pytest.raises(ShapelintError, match="^the lint ran past --timeout 2 s and was stopped$"):
        isolate.run_isolated(lambda: _stopped_mid_fix(model, FIXED.encode(), commit=True), timeout=2,
                             stdout=io.BytesIO())
    assert model.read_text() == FIXED and _ours(journals) == []


@needs_fork
def test_a_file_changed_after_the_fix_wrote_it_is_not_put_back(proj: Path, journals: Path) -> None:
    """Someone saved the file after --fix wrote it: restoring the old bytes would lose that."""
    model = proj / "model.py"
    model.write_text(LINEAR)
    mine = (FIXED + "# mine\n").encode()
    with pytest.raises(ShapelintError) as stopped:
        isolate.run_isolated(lambda: _stopped_mid_fix(model, FIXED.encode(), meddle=mine), timeout=2,
                             stdout=io.BytesIO())
    assert str(stopped.value).startswith("--fix did not finish: model.py changed after it wrote it, left as it is: "
                                         "check it by hand; the lint ran past --timeout 2 s")
    assert model.read_bytes() == mine and _ours(journals) == []


#: the model hangs once its input width is fixed: the re-lint of the fixed file never ends
HANGS_WHEN_FIXED = LINEAR.replace("def shapelint_model():\n", "def shapelint_model():\n"
                                  "    import pathlib, time\n"
                                  "    if 'randn(4096, ' + '1024)' in pathlib.Path(__file__).read_text():\n"
                                  "        time.sleep(120)\n")


@needs_fork
@pytest.mark.slow
def test_a_relint_that_hangs_past_the_timeout_leaves_the_files_as_they_were(
        proj: Path, journals: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (proj / "model.py").write_text(HANGS_WHEN_FIXED)
    before = full_snapshot(proj)
    rc = cli.main(["model.py", "--fix", "--no-config", "--no-cache", "--timeout", "25"])
    out, err = capfd.readouterr()
    assert rc == 2 and out == ""
    assert err == ("shapelint: error: --fix did not finish: put back model.py as it was; the lint ran past "
                   "--timeout 25 s and was stopped\n")
    assert full_snapshot(proj) == before and _ours(journals) == []


@needs_fork
@pytest.mark.skipif(signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL, reason="SIGTERM is handled here")
def test_a_fix_stopped_by_sigterm_is_put_back(proj: Path, journals: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A cancelled CI job sends SIGTERM: the parent died on the spot, and the child (a
    process group of its own) went on with a half-done fix nobody waited for."""
    model = proj / "model.py"
    model.write_text(LINEAR)
    before = full_snapshot(proj)
    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        with pytest.raises(SystemExit) as stopped:
            isolate.run_isolated(lambda: _stopped_mid_fix(model, FIXED.encode()), stdout=io.BytesIO())
    finally:
        timer.cancel()
    assert stopped.value.code == 128 + signal.SIGTERM
    assert capfd.readouterr().err == "shapelint: --fix did not finish: put back model.py as it was\n"
    assert full_snapshot(proj) == before and _ours(journals) == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.parametrize("text", ["kwargs: &k {d: 1023}\nhf_config: {<<: *k}\n",
                                  "kwargs: &k\n  d: 1023\nhf_config:\n  <<: *k\n"], ids=["flow", "block"])
def test_a_yaml_mapping_merged_into_another_key_is_not_edited(text: str, tmp_path: Path) -> None:
    """``hf_config: {<<: *k}`` reads kwargs' mapping: the walk stopped at a mapping it had
    seen, so the second reader was never counted and the edit of kwargs.d changed
    hf_config.d too."""
    from shapelint.fix.files import Doc, NotFixed
    from shapelint.fix.yaml_edits import yaml_spans

    path = tmp_path / "t.yaml"
    path.write_text(text)
    doc = Doc(path, text.encode(), text, "utf-8")
    with pytest.raises(NotFixed, match=r"hf_config\.<<\.d"):  # refused, naming the second reader
        yaml_spans(doc, [text.splitlines().index(next(ln for ln in text.splitlines() if "1023" in ln)) + 1], 1023,
                   None, ["d"])
