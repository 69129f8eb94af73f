"""The package as a user installs it: ``python -m build`` makes an sdist and a wheel that
carry the rules (``shapelint.rules``) and the GPU profiles; the wheel installs into a
fresh virtual environment and lints an example there, from the installed files only.

The fresh environment gets its dependencies (torch, rich, PyYAML) from this one through
a ``.pth`` line instead of the package index (a multi-GB torch download otherwise): the
line puts this environment's site-packages after the new one's, and does not run the
``.pth`` files there, so the editable install of the working tree stays out of it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT

pytestmark = pytest.mark.slow

#: what every installation must hold besides the code
RULES = sorted(p.name for p in (ROOT / "rules").glob("sl*.py"))
PROFILES = sorted(p.name for p in (ROOT / "shapelint" / "hardware" / "profiles").glob("*.yaml"))


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel, built from a copy of the working tree (no build folder left in it)."""
    pytest.importorskip("build")
    out = tmp_path_factory.mktemp("dist")
    src = tmp_path_factory.mktemp("src") / "shapelint"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv*", "site", "build", "dist", "*.egg-info",
                                                             "__pycache__", ".shapelint_cache", ".pytest_cache"))
    # --no-isolation: the build backend (setuptools) of this environment, no package index needed
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return out


def test_the_sdist_and_the_wheel_carry_the_rules_and_profiles(dist: Path) -> None:
    [wheel], [sdist] = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    names = zipfile.ZipFile(wheel).namelist()
    # every module of the tree (pyproject.toml lists the packages: a new folder left out of it
    # once made the wheel fail on its first lint with "No module named shapelint.capture.replay")
    tree = {str(p.relative_to(ROOT)) for p in (ROOT / "shapelint").rglob("*.py")}
    assert tree <= set(names), sorted(tree - set(names))
    assert sorted(Path(n).name for n in names if n.startswith("shapelint/rules/sl")) == RULES
    assert sorted(Path(n).name for n in names if n.startswith("shapelint/hardware/profiles/") and n.endswith(".yaml")) \
        == PROFILES
    assert "shapelint/py.typed" in names
    assert any(n.endswith("entry_points.txt") for n in names)
    members = tarfile.open(sdist).getnames()
    assert sum("/rules/sl" in m for m in members) == len(RULES)
    assert sum("/hardware/profiles/" in m and m.endswith(".yaml") for m in members) == len(PROFILES)


def test_the_wheel_installs_and_lints_an_example(dist: Path, tmp_path: Path) -> None:
    [wheel] = sorted(dist.glob("*.whl"))
    env = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(env)
    python = env / "bin" / "python"
    site = Path(subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)], check=True,
                   capture_output=True, timeout=300)
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(EXAMPLES / "mlp.py", work / "mlp.py")
    where = subprocess.run([str(python), "-c", "import shapelint, shapelint.rules, shapelint.hardware as h; "
                            "print(shapelint.__file__); print(shapelint.rules.__path__[0]); "
                            "print(sorted(h.builtin_profiles()))"], cwd=work, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    package, rules, profiles = where.stdout.splitlines()
    assert package.startswith(str(site)) and rules.startswith(str(site))  # the wheel's files, not the working tree's
    assert "h100-sxm" in profiles and "a100-80gb" in profiles
    lint = subprocess.run([str(env / "bin" / "shapelint"), "mlp.py", "--no-cache", "--output-format", "concise"],
                          cwd=work, capture_output=True, text=True, timeout=300)
    assert lint.returncode == 1, lint.stderr  # the example has findings
    assert "mlp.py:" in lint.stdout and " SL101 misaligned-leading-dim: in_features: 1023 → 1024" in lint.stdout
    listed = subprocess.run([str(env / "bin" / "shapelint"), "--list-rules"], cwd=work, capture_output=True, text=True,
                            timeout=120)
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [r[:5].upper() for r in RULES]
