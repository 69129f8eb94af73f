"""The real pre-commit, offline, on a throwaway git repository with a ``repo: local``,
``language: system`` hook running this interpreter's ``shapelint --hook``. The project
configures ``targets = ["model.py"]``; model.py imports layers.py. Committing a
misaligned layers.py (nn.Linear(1023, 1024)) fails with the finding, although
model.py itself is unchanged; a commit touching only a file no target depends on
passes without importing torch (a ``torch`` that raises on import is first on the
path). Plus: our .pre-commit-hooks.yaml is a valid pre-commit manifest."""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

#: a real git repository and pre-commit: the full suite's tier (pytest -m 'not slow' skips them)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent

LAYERS = "import torch.nn as nn\n\nWIDTH = {width}\n\n\ndef block():\n    return nn.Sequential(nn.Linear(WIDTH, 1024))\n"
MODEL = """\
import torch

from layers import WIDTH, block


def shapelint_model():
    return block(), torch.randn(4096, WIDTH)
"""

needs_pre_commit = pytest.mark.skipif(
    importlib.util.find_spec("pre_commit") is None or shutil.which("git") is None,
    reason="pre-commit (dev extra) or git is not installed",
)


def test_manifest_is_valid() -> None:
    pytest.importorskip("pre_commit")
    from pre_commit.clientlib import load_manifest

    (hook,) = load_manifest(str(ROOT / ".pre-commit-hooks.yaml"))
    assert hook["id"] == "shapelint" and hook["language"] == "python"
    assert hook["entry"].split() == ["shapelint", "--hook"]
    assert set(hook["types_or"]) == {"python", "json", "yaml"} and hook["pass_filenames"]


@needs_pre_commit
def test_commit_fails_when_a_file_the_target_imports_breaks(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "SHAPELINT_"))}
    env.update(PRE_COMMIT_HOME=str(tmp_path / "cache"), HOME=str(tmp_path), NO_COLOR="1", GIT_CONFIG_NOSYSTEM="1",
               PRE_COMMIT_COLOR="never", GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    entry = f"{shlex.quote(sys.executable)} -m shapelint --hook"
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
    (repo / "pyproject.toml").write_text('[tool.shapelint]\ntargets = ["model.py"]\nselect = ["SL101"]\n')
    (repo / "model.py").write_text(MODEL)
    (repo / "layers.py").write_text(LAYERS.format(width=1024))
    (repo / "helper.py").write_text("def helper():\n    return 1\n")

    def git(*args: str, check: bool = True, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *args], cwd=repo, env={**env, **(extra or {})}, capture_output=True, text=True,
                              check=check, timeout=300)

    git("init", "-q")
    subprocess.run([sys.executable, "-m", "pre_commit", "install"], cwd=repo, env=env, check=True,
                   capture_output=True)
    git("add", ".")
    first = git("commit", "-m", "clean model", check=False)  # model.py was never linted: it is
    assert first.returncode == 0, first.stdout + first.stderr
    assert (repo / ".shapelint_cache" / ".gitignore").is_file()
    assert "shapelint_cache" not in git("status", "--porcelain").stdout  # it ignores itself

    (repo / "layers.py").write_text(LAYERS.format(width=1023))  # model.py unchanged
    git("add", "layers.py")
    bad = git("commit", "-m", "misaligned", check=False)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    said = bad.stdout + bad.stderr  # git prints the hook's output on stderr
    assert "Failed" in said and "model.py" in said
    assert "SL101" in said and "in_features: 1023 → 1024" in said

    git("checkout", "HEAD", "--", "layers.py")
    (repo / "helper.py").write_text("def helper():\n    return 2\n")
    git("add", "helper.py")
    no_torch = tmp_path / "no_torch"
    no_torch.mkdir()
    (no_torch / "torch.py").write_text("raise ImportError('the hook imported torch')\n")
    quick = git("commit", "-m", "unrelated", check=False, extra={"PYTHONPATH": str(no_torch)})
    assert quick.returncode == 0, quick.stdout + quick.stderr
    assert "Passed" in quick.stdout + quick.stderr
