"""Directories and files that are not what they seem: discovery passes non-targets
over (and says why), finds nested configs, never enters node_modules or a virtual
environment; FIFOs, devices and huge files are refused on one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _hostile import hostile_settings, lint
from hypothesis import event, given
from hypothesis import strategies as st

from shapelint.errors import ShapelintError
from shapelint.files import MAX_BYTES, read_text
from shapelint.load.targets import discover, looks_like_target, why_not_target

GPT2_TINY = {"model_type": "gpt2", "n_layer": 1, "n_embd": 64, "n_head": 4, "vocab_size": 100, "n_positions": 64}
BUILD = "import torch.nn as nn\n\n\ndef build():\n    return nn.Linear(64, 64)\n"


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (tmp_path / "build.py").write_text(BUILD)
    return tmp_path


def _config(path: Path, doc: dict[str, object] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc or GPT2_TINY))


def test_what_a_directory_walk_passes_over(here: Path) -> None:
    """Issue 13: node_modules/*/config.json, a mkdocs.yml or a non-hidden venv/ aborted the run."""
    _config(here / "tree" / "config.json")
    _config(here / "tree" / "deep" / "er" / "config.json")
    _config(here / "tree" / "node_modules" / "x" / "config.json", {"name": "x"})
    _config(here / "tree" / "env" / "config.json")
    (here / "tree" / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    _config(here / "tree" / ".cache" / "config.json")
    _config(here / "tree" / "site-packages" / "config.json")
    _config(here / "tree" / "docs" / "config.json", {"name": "docs"})
    (here / "tree" / "mkdocs.yml").write_text("site_name: x\n")
    (here / "tree" / "tokenizer.json").write_text('{"model": {"type": "BPE"}}\n')
    found = discover(["tree"])
    assert found.targets == [Path("tree/config.json"), Path("tree/deep/er/config.json")]
    reasons = {str(p): why for p, why in found.skipped}
    assert reasons == {
        "tree/.cache": "a hidden folder", "tree/env": "a virtual environment",
        "tree/node_modules": "a node_modules folder", "tree/site-packages": "a site-packages folder",
        "tree/docs/config.json": 'a JSON file without "model_type"',
        "tree/mkdocs.yml": "a YAML file without a top-level model: or hf_config: key",
        "tree/tokenizer.json": 'a JSON file without "model_type"',
    }


def test_a_config_at_the_top_does_not_hide_the_ones_below(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 13: a config.json at the directory's top hid every config below it (exit 0)."""
    pytest.importorskip("transformers")
    _config(here / "tree" / "config.json")
    _config(here / "tree" / "sub" / "config.json", {**GPT2_TINY, "vocab_size": 101})
    _config(here / "tree" / "node_modules" / "x" / "config.json", {"name": "x"})
    (here / "tree" / "mkdocs.yml").write_text("site_name: x\n")
    rc, out, err = lint(["tree", "--format", "json", "--batch", "1", "--seq", "8"], here, capsys)
    assert rc in (0, 1), err
    assert [t["target"] for t in json.loads(out)["targets"]] == ["tree/config.json", "tree/sub/config.json"]


def test_the_skip_other_files_test_is_the_discovery_test(here: Path) -> None:
    (here / "helper.py").write_text("raise SystemExit('imported!')\n")
    (here / "m.py").write_text("def shapelint_model():\n    ...\n")
    (here / "t.yaml").write_text("model: build.py:build\n")
    (here / "ci.yaml").write_text("on: push\n")
    (here / "package.json").write_text('{"name": "x"}\n')
    (here / "notes.txt").write_text("hi\n")
    assert [looks_like_target(here / n) for n in ("helper.py", "m.py", "t.yaml", "ci.yaml", "package.json",
                                                  "notes.txt")] == [False, True, True, False, False, False]
    assert why_not_target(here / "helper.py") == "defines no shapelint_model"


@pytest.mark.parametrize("name", ["model.py", "t.yaml", "config.json"])
def test_a_fifo_target_is_refused_without_hanging(here: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    """Issue 13: a FIFO target hung the run."""
    os.mkfifo(here / name)
    rc, _, err = lint([name], here, capsys)
    assert rc == 2 and f"{name}: not a regular file (a FIFO)" in err


def test_a_device_behind_a_target_name_is_refused(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 13: ``/dev/zero`` was read without limit."""
    (here / "config.json").symlink_to("/dev/zero")
    rc, _, err = lint(["config.json"], here, capsys)
    assert rc == 2 and "config.json: not a regular file (a character device)" in err
    with pytest.raises(ShapelintError, match="not a regular file"):
        read_text(Path("/dev/zero"))


def test_a_huge_file_is_refused(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with open(here / "t.yaml", "wb") as f:
        f.truncate(MAX_BYTES + 1)
    rc, _, err = lint(["t.yaml"], here, capsys)
    assert rc == 2 and "t.yaml: larger than 16 MiB" in err


def test_a_fifo_in_a_directory_is_passed_over(here: Path) -> None:
    (here / "tree").mkdir()
    os.mkfifo(here / "tree" / "config.json")
    (here / "tree" / "t.yaml").write_text("model: ../build.py:build\ninputs: [[4, 64]]\n")
    found = discover(["tree"])
    assert found.targets == [Path("tree/t.yaml")]
    assert found.skipped == [(Path("tree/config.json"), "not a regular file (a FIFO)")]


# -- random directory trees ------------------------------------------------------------

DIRS = st.sampled_from(["a", "b", "node_modules", ".hidden", "venv", "site-packages", "__pycache__", "configs"])
FILES = st.sampled_from(["target", "target", "target", "mkdocs", "package", "broken_target", "no_model_type"])
ENTRY = st.tuples(st.lists(DIRS, max_size=3), FILES, st.sampled_from(["t.yaml", "x.yml", "config.json", ".h.yaml"]),
                  st.booleans())
SKIPPED = {"node_modules", ".hidden", "site-packages", "__pycache__"}


def _write(root: Path, entry: tuple[list[str], str, str, bool]) -> Path | None:
    """Write one entry; the path when it must be found as a target."""
    dirs, kind, name, venv = entry
    folder = root.joinpath(*dirs)
    folder.mkdir(parents=True, exist_ok=True)
    if venv and dirs:
        (folder / "pyvenv.cfg").write_text("home = /usr\n")
    if kind in ("target", "mkdocs"):
        name = name.replace("config.json", "t.yaml")
    else:
        name = "config.json" if kind != "package" else "package.json"
    up = "../" * (len(dirs) + 1)
    body = {"target": f"model: {up}build.py:build\ninputs: [[4, 64]]\n", "mkdocs": "site_name: x\n",
            "package": '{"name": "x"}\n', "broken_target": '{"model_type": \n', "no_model_type": "{}\n"}[kind]
    (folder / name).write_text(body)
    return folder / name if kind in ("target", "broken_target") else None


def _found(path: Path, root: Path) -> bool:
    rel = path.relative_to(root)
    folders = [root.joinpath(*rel.parts[:i]) for i in range(1, len(rel.parts))]
    return not rel.name.startswith(".") and not any(
        f.name in SKIPPED or f.name.startswith(".") or (f / "pyvenv.cfg").exists() for f in folders)


@hostile_settings(25)
@given(st.lists(ENTRY, min_size=1, max_size=6))
def test_random_trees_keep_the_contract(here: Path, capsys: pytest.CaptureFixture[str],
                                        entries: list[tuple[list[str], str, str, bool]]) -> None:
    root = here / "tree"
    import shutil

    shutil.rmtree(root, ignore_errors=True)
    root.mkdir()
    written = {p for p in (_write(root, e) for e in entries) if p is not None}
    # a later entry may have overwritten an earlier one: judge by what is on disk
    expected = sorted(str(p.relative_to(here)) for p in written if _found(p, root)
                      and ('"model_type"' in p.read_text() or p.read_text().startswith("model:")))
    rc, out, err = lint(["tree", "--format", "json"], here, capsys)
    event(f"exit {rc}, {len(expected)} targets")
    if not expected:
        assert rc == 2 and "no config.json or shapelint YAML under this directory" in err
        return
    report = json.loads(out)  # a run with targets always writes its report
    broken = sorted(e["target"] for e in report["errors"])
    assert broken == [name for name in expected if name.endswith("config.json")]  # a broken config fails alone
    assert (rc == 2) if broken else (rc in (0, 1)), err
    assert sorted(t["target"] for t in report["targets"]) == [name for name in expected if name not in broken]
