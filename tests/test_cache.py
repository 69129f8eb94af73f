"""The result cache (issue 11), in-process on a tiny project: model.py imports
pkg/layers.py (nn.Linear(1023, 1024): one SL101 finding); unrelated.py is imported by
nothing. A run served from the cache never calls ``lint_target`` (patched to fail)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shapelint.app import cache, cached, cli, fingerprint, seal

LAYERS = "import torch.nn as nn\n\nWIDTH = {width}\n\n\ndef block():\n    return nn.Sequential(nn.Linear(WIDTH, 1024))\n"
MODEL = """\
from pkg.layers import WIDTH, block


def shapelint_model():
    import torch
    return block(), torch.randn(4096, WIDTH)
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("SHAPELINT_NO_CACHE", raising=False)
    monkeypatch.delenv("SHAPELINT_CACHE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "layers.py").write_text(LAYERS.format(width=1023))
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "unrelated.py").write_text("X = 1\n")
    (tmp_path / "pyproject.toml").write_text('[tool.shapelint]\ntargets = ["model.py"]\nselect = ["SL101"]\n')
    return tmp_path


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def no_lint(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("linted although the cache holds the result")

    monkeypatch.setattr("shapelint.pipeline.run.lint_target", fail)


def entries(root: Path) -> list[Path]:
    return sorted((root / cache.DIR_NAME / "results").glob("*.json"))


def body(record: Path) -> dict:  # type: ignore[type-arg]
    """A record's JSON body (after its first line: magic, schema, HMAC)."""
    return json.loads(record.read_bytes().split(b"\n", 1)[1])


def test_rerun_is_served_from_the_cache_in_every_format(project: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    first = {fmt: run(["--format", fmt], capsys) for fmt in ("json", "text")}
    assert first["json"][0] == 1 and json.loads(first["json"][1])["summary"]["findings"] == 1
    assert (project / cache.DIR_NAME / ".gitignore").read_text().splitlines()[-1] == "*"
    (entry,) = entries(project)  # one entry serves every format
    deps = body(entry)["deps"]
    assert sorted(Path(d).relative_to(project).as_posix() for d, sha in deps.items()
                  if sha is not None and Path(d).is_relative_to(project)) == ["model.py", "pkg/__init__.py", "pkg/layers.py"]
    # files that must stay absent: what the model's imports looked for first in the project
    # and did not find (``pkg`` was found as a package, so a ``pkg.py`` beside it would not win,
    # but is recorded all the same; modules imported before the lint are not looked up again)
    absent = {Path(d).relative_to(project).as_posix() for d, sha in deps.items() if sha is None}
    assert "pkg.py" in absent and not absent & {"model.py", "pkg/__init__.py", "pkg/layers.py"}
    no_lint(monkeypatch)
    for fmt in ("json", "text", "sarif", "github"):  # replayed, or rendered from the cached result
        rc, out, _ = run(["--format", fmt], capsys)
        assert rc == 1 and "SL101" in out
        if fmt in first:
            assert (rc, out) == first[fmt][:2]
    (project / "unrelated.py").write_text("X = 2\n")  # no target depends on it: still served
    assert run(["--format", "json"], capsys)[:2] == first["json"][:2]


def test_editing_an_imported_file_is_not_served_from_the_cache(project: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert run([], capsys)[0] == 1
    (project / "pkg" / "layers.py").write_text(LAYERS.format(width=1024))
    rc, out, _ = run([], capsys)
    assert rc == 0 and "no findings" in out


@pytest.mark.slow
def test_a_replay_imports_no_torch(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = ("import sys\nfrom shapelint.app.cli import main\nrc = main(['--format', 'json', '--statistics'])\n"
            "print('torch' in sys.modules, rc, file=sys.stderr)")
    # the cache's environment covers sys.path: both runs are the same command in a fresh process
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=project)
    assert first.stderr.splitlines()[-1] == "True 1", first.stderr
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=project)
    assert proc.stdout == first.stdout and json.loads(proc.stdout)["summary"]["findings"] == 1
    assert proc.stderr.splitlines()[-1] == "False 1", proc.stderr
    assert "1  total" in proc.stderr  # --statistics (stderr with --format json) replayed too


def test_corrupt_and_foreign_entries_are_ignored_and_rewritten(project: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # FakeTensorMode() reads the source of every frame on the stack (traceback.extract_stack)
    # and a lint records each file it opens as a dependency: the first lint in a process that
    # has not read this test file yet (a pytest-xdist worker) lists it, the next one does not.
    # One uncached lint first, so that both entries compared below see the same files.
    run(["--format", "json", "--no-cache"], capsys)
    rc, out, _ = run(["--format", "json"], capsys)
    folder = project / cache.DIR_NAME
    (entry,) = entries(project)
    good = entry.read_bytes()
    for run_file in (folder / "runs").glob("*.json"):
        run_file.write_text("{not json")
    entry.write_bytes(good[:-40])  # truncated payload: its digest no longer matches
    assert run(["--format", "json"], capsys)[:2] == (rc, out)
    assert entry.read_bytes() == good  # rewritten whole
    monkeypatch.setattr(seal, "SCHEMA", seal.SCHEMA + 1)  # a cache from another shapelint
    monkeypatch.setattr(fingerprint, "environment", lambda: "another")
    calls = []
    real = cached.Session.lint

    def counted(self, *args):  # type: ignore[no-untyped-def]
        calls.append(args[0])
        return real(self, *args)

    monkeypatch.setattr(cached.Session, "lint", counted)
    assert run(["--format", "json"], capsys)[:2] == (rc, out)
    assert calls == [Path("model.py")]  # the foreign entry was not used...
    assert entry.read_bytes().split(b" ")[1] == str(seal.SCHEMA).encode()  # ...but replaced


def test_no_cache_cache_dir_and_clean(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--no-cache"], capsys)[0] == 1
    assert not (project / cache.DIR_NAME).exists()
    assert run(["--cache-dir", "elsewhere"], capsys)[0] == 1
    assert not (project / cache.DIR_NAME).exists() and len(list((project / "elsewhere" / "results").iterdir())) == 1
    rc, out, _ = run(["clean", "--cache-dir", "elsewhere"], capsys)
    assert rc == 0 and not (project / "elsewhere").exists() and "removed elsewhere" in out


def test_configured_targets_globs_and_errors(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "models").mkdir()
    (project / "models" / "b.py").write_text(LAYERS.format(width=1023) + "\n\n" + MODEL.split("\n\n\n")[1])
    (project / "models" / "helper.py").write_text("raise SystemExit('imported!')\n")  # not a target: never run
    (project / "pyproject.toml").write_text('[tool.shapelint]\ntargets = ["model.py", "models/*.py"]\n'
                                            'select = ["SL101"]\n')
    rc, out, err = run(["--format", "json", "--no-cache"], capsys)
    assert rc == 1, err
    assert [t["target"] for t in json.loads(out)["targets"]] == ["model.py", "models/b.py"]
    (project / "pyproject.toml").write_text('[tool.shapelint]\ntargets = ["nothing/*.py"]\n')
    rc, _, err = run([], capsys)
    assert rc == 2 and err.strip() == "shapelint: error: pyproject.toml:2: targets: 'nothing/*.py' matches no target"


def test_hook_lints_only_targets_whose_dependencies_changed(project: Path, capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    rc, out, _ = run(["--hook", "unrelated.py"], capsys)  # never linted here: linted
    assert rc == 1 and "SL101" in out
    with monkeypatch.context() as m:
        no_lint(m)
        assert run(["--hook", "unrelated.py"], capsys)[:2] == (0, "")
    (project / "pkg" / "layers.py").write_text(LAYERS.format(width=1024))
    rc, out, _ = run(["--hook", "pkg/layers.py", "unrelated.py"], capsys)
    assert rc == 0 and "model.py" in out and "no findings" in out


def test_workers_lint_several_targets_as_one_process_does(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "other.py").write_text(MODEL.replace("4096", "2048"))
    serial = run(["model.py", "other.py", "--format", "json", "--jobs", "1", "--no-cache"], capsys)
    forked = run(["model.py", "other.py", "--format", "json", "--jobs", "2"], capsys)
    assert forked[:2] == serial[:2] and serial[0] == 1
    assert [t["tokens"] for t in json.loads(forked[1])["targets"]] == [4096, 2048]
    assert len(entries(project)) == 2  # each worker stored its target's entry
    assert run(["model.py", "other.py", "--jobs", "0"], capsys)[0] == 2
