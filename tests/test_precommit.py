"""The real pre-commit, offline, on a throwaway git repository: a ``repo: local``,
``language: system`` hook running this interpreter's shapelint fails on a model with
nn.Linear(1023, 3072) and passes once it is 1024. Plus: our .pre-commit-hooks.yaml is
a valid pre-commit manifest."""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

MODEL = """\
import torch
import torch.nn as nn


def shapelint_model():
    return nn.Sequential(nn.Linear({width}, 3072)), torch.randn(4096, {width})
"""

HELPER = "def helper():\n    return 1\n"  # a Python file that is not a target: skipped

needs_pre_commit = pytest.mark.skipif(
    importlib.util.find_spec("pre_commit") is None or shutil.which("git") is None,
    reason="pre-commit (dev extra) or git is not installed",
)


def test_manifest_is_valid() -> None:
    pytest.importorskip("pre_commit")
    from pre_commit.clientlib import load_manifest

    (hook,) = load_manifest(str(ROOT / ".pre-commit-hooks.yaml"))
    assert hook["id"] == "shapelint" and hook["language"] == "python"
    assert hook["entry"].split()[0] == "shapelint" and "--skip-other-files" in hook["entry"]
    assert set(hook["types_or"]) == {"python", "json", "yaml"} and hook["pass_filenames"]


def _git(repo: Path, *args: str, env: dict[str, str]) -> None:
    subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)


@needs_pre_commit
def test_pre_commit_hook_fails_then_passes(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(PRE_COMMIT_HOME=str(tmp_path / "cache"), HOME=str(tmp_path), NO_COLOR="1",
               GIT_CONFIG_NOSYSTEM="1", PRE_COMMIT_COLOR="never")
    entry = f"{shlex.quote(sys.executable)} -m shapelint --skip-other-files"
    (repo / ".pre-commit-config.yaml").write_text(f"""\
repos:
  - repo: local
    hooks:
      - id: shapelint
        name: shapelint
        entry: {entry}
        language: system
        types_or: [python, json, yaml]
        require_serial: true
""")
    # the hook finds this configuration from the repository root (and stops searching there)
    (repo / "pyproject.toml").write_text('[tool.shapelint]\nselect = ["SL101"]\n')
    (repo / "model.py").write_text(MODEL.format(width=1023))
    (repo / "helper.py").write_text(HELPER)
    _git(repo, "init", "-q", env=env)
    _git(repo, "add", ".", env=env)

    def pre_commit() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pre_commit", "run", "--all-files", "--color", "never"],
                              cwd=repo, env=env, capture_output=True, text=True, timeout=300)

    bad = pre_commit()
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "shapelint" in bad.stdout and "Failed" in bad.stdout
    assert "SL101" in bad.stdout and "in_features: 1023 → 1024" in bad.stdout
    assert "helper.py" not in bad.stdout  # not a target: skipped, not an error

    (repo / "model.py").write_text(MODEL.format(width=1024))
    _git(repo, "add", ".", env=env)
    good = pre_commit()
    assert good.returncode == 0, good.stdout + good.stderr
    assert "Passed" in good.stdout
