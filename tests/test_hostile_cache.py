"""Issue 24: the result cache, ``shapelint clean`` and the output path under hostile
input. Each case runs in its own folder, with a snapshot of the files before and
after: nothing the cache holds is ever run or trusted blindly, nothing is deleted that
shapelint did not make, and a replay writes only where a fresh run would.

The project: ``model.py`` builds ``nn.Linear(1023, 1024)`` over 4096 tokens: one SL101
finding, exit 1 (``tests/_cli_helpers.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _cli_helpers import run, write_model
from _hostile import full_snapshot

from shapelint.app import cache, fingerprint, seal

FINDING = "SL101"


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder (a git root) with the cache on and a key home of its own."""
    monkeypatch.delenv("SHAPELINT_NO_CACHE", raising=False)
    monkeypatch.delenv("SHAPELINT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "key-home"))
    seal.key.cache_clear()
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    write_model(project)
    monkeypatch.chdir(project)
    yield project
    seal.key.cache_clear()


def records(project: Path, kind: str = "results") -> list[Path]:
    return sorted((project / cache.DIR_NAME / kind).glob("*.json"))


def lint_json(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    rc, out, err = run(["model.py", "--format", "json", "--no-config", *extra], capsys)
    assert rc in (1, 0), err
    return rc, json.loads(out)


def findings(doc: dict) -> list[str]:  # type: ignore[type-arg]
    return [f["code"] for f in doc["findings"]]


# -- nothing in the cache is code ---------------------------------------------------------


def test_a_pickled_entry_is_never_unpickled(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A crafted entry (schema 1's JSON header line + a pickle that calls os.system)
    ran code while shapelint linted a plain target. Now it is a file shapelint never
    opens as code: the lint runs, and the marker file the pickle would make is absent."""
    lint_json(capsys)
    (entry,) = records(here)
    marker = here / "pwned"

    class Evil:
        def __reduce__(self) -> tuple:  # type: ignore[type-arg]
            return (os.system, (f"touch {marker}",))

    import pickle

    payload = pickle.dumps(Evil())
    header = {"schema": 1, "env": fingerprint.environment(), "target": str((here / "model.py").resolve()), "deps": {},
              "payload": __import__("hashlib").sha256(payload).hexdigest()}
    for name in (entry.name, entry.with_suffix(".entry").name):
        (entry.parent / name).write_bytes(json.dumps(header).encode() + b"\n" + payload)
    for run_file in records(here, "runs"):
        run_file.unlink()
    rc, doc = lint_json(capsys)
    assert rc == 1 and findings(doc) == [FINDING]
    assert not marker.exists()


def test_a_forged_record_is_a_miss(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An edited record replayed "no findings" and exit 0. A record whose bytes were
    changed does not verify under the key: it is linted again."""
    first = lint_json(capsys)
    for record in records(here) + records(here, "runs"):
        head, _, body = record.read_bytes().partition(b"\n")
        doc = json.loads(body)
        if "result" in doc:
            doc["result"]["findings"] = []
        else:
            doc["run"].update(stdout='{"findings": []}\n', rc=0, findings=0)
        record.write_bytes(head + b"\n" + json.dumps(doc).encode())
    assert lint_json(capsys) == first


def test_a_record_from_another_machine_is_a_miss(here: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache committed to the repository (``git add -f``) or restored from a shared CI
    cache was made under another key: every record is a miss, never a result."""
    write_model(here, in_features=1024)  # no finding
    rc, doc = lint_json(capsys)
    assert rc == 0 and findings(doc) == []
    write_model(here)  # the finding is back, and the attacker's records claim no finding:
    forged = {p: p.read_bytes() for p in records(here) + records(here, "runs")}
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "attacker-home"))
    seal.key.cache_clear()
    write_model(here, in_features=1024)
    lint_json(capsys)  # records of the clean model, under the attacker's key, with this content
    attacker = {p: p.read_bytes() for p in records(here) + records(here, "runs")}
    write_model(here)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "key-home"))
    seal.key.cache_clear()
    for p, data in {**forged, **attacker}.items():
        p.write_bytes(data)
    rc, doc = lint_json(capsys)
    assert rc == 1 and findings(doc) == [FINDING]


def test_an_exit_code_must_agree_with_the_findings() -> None:
    """A stored exit code of 300 replayed as 44; a replay now needs 0, 1 or 2, and the
    one its findings and errors give."""
    ok = cache.Replay("", "", None, 1, findings=1)
    assert ok.consistent()
    for bad in (cache.Replay("", "", None, 300, findings=1), cache.Replay("", "", None, 0, findings=1),
                cache.Replay("", "", None, 1, findings=0), cache.Replay("", "", None, 0, findings=1, errors=1),
                cache.Replay("", "", None, 1, findings=1, exit_zero=True), cache.Replay("", "", None, 0, findings=-1)):
        assert not bad.consistent(), bad


def test_a_signed_but_inconsistent_run_is_not_replayed(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Even a record that verifies (written with the key) replays only an exit code that
    agrees with it."""
    first = lint_json(capsys)
    key = seal.key()
    assert key is not None
    for record in records(here, "runs"):
        doc = json.loads(record.read_bytes().partition(b"\n")[2])
        doc["run"]["rc"] = 0
        record.write_bytes(seal.seal(key, f"runs/{record.stem}", doc))
    assert lint_json(capsys) == first


def test_an_insecure_key_turns_the_cache_off(here: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A key file others can write could sign anything: the cache is off, the lint runs."""
    lint_json(capsys)
    seal.key_file().chmod(0o666)
    seal.key.cache_clear()
    for record in records(here) + records(here, "runs"):
        record.unlink()
    assert lint_json(capsys)[0] == 1
    assert records(here) == [] and records(here, "runs") == []


# -- the key covers what decides a result --------------------------------------------------


def test_the_environment_covers_sys_path_and_every_distribution(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache went stale after upgrading any library but torch and transformers, or
    after a PYTHONPATH change."""
    fingerprint.environment.cache_clear()
    before = fingerprint.environment()
    monkeypatch.setattr(sys, "path", [*sys.path, "/somewhere/else"])
    fingerprint.environment.cache_clear()
    assert fingerprint.environment() != before
    monkeypatch.undo()
    real = fingerprint.distributions()
    assert f"pytest-{__import__('pytest').__version__}.dist-info" in {name for _, name in real}
    upgraded = [(where, name.replace("pyyaml-", "pyyaml-0.0+").replace("PyYAML-", "PyYAML-0.0+")) for where, name in real]
    assert upgraded != real  # PyYAML at another version
    monkeypatch.setattr(fingerprint, "distributions", lambda: upgraded)
    fingerprint.environment.cache_clear()
    assert fingerprint.environment() != before
    monkeypatch.undo()
    fingerprint.environment.cache_clear()
    assert fingerprint.environment() == before


def test_an_edit_during_the_lint_stores_nothing(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """File digests were taken after tracing: an edit mid-lint stored the old result
    under the new content, and the next run replayed exit 0. The model below edits its
    own file while it is linted (as an editor saving mid-lint would): nothing is stored,
    and the next run lints the file as it now is."""
    fixed = (here / "model.py").read_text().replace("1023", "1024")
    (here / "model.py").write_text(
        "import torch\nimport torch.nn as nn\nfrom pathlib import Path\n\n\n"
        "def shapelint_model():\n"
        "    Path(__file__).write_text(" + repr(fixed) + ")\n"
        "    return nn.Sequential(nn.Linear(1023, 1024)), torch.randn(4096, 1023)\n")
    rc, doc = lint_json(capsys)
    assert rc == 1 and findings(doc) == [FINDING]
    assert records(here) == []
    rc, doc = lint_json(capsys)  # the file as it is now: no finding, and now it is stored
    assert rc == 0 and findings(doc) == [] and len(records(here)) == 1


# -- clean deletes only what shapelint made ------------------------------------------------


def clean(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run(["clean", *argv], capsys)


@pytest.mark.parametrize("folder", ["proj", "home"])
def test_clean_never_deletes_a_folder_it_did_not_make(here: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch, folder: str) -> None:
    """``clean --cache-dir proj`` deleted a user's project (it held ``results/``);
    ``SHAPELINT_CACHE_DIR=~/.cache`` then ``clean`` deleted all of ``~/.cache``."""
    target = here / folder
    (target / "results").mkdir(parents=True)
    (target / "results" / "weights.json").write_text("{}")
    (target / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n# another tool's\n")
    (target / "notes.txt").write_text("mine")
    before = full_snapshot(here)
    if folder == "home":
        monkeypatch.setenv("SHAPELINT_CACHE_DIR", str(target))
        rc, out, err = clean(capsys)
    else:
        rc, out, err = clean(capsys, "--cache-dir", folder)
    assert rc == 2 and "not a shapelint cache" in err and "nothing removed" in err
    assert full_snapshot(here) == before
    given = [] if folder == "home" else ["--cache-dir", folder]
    rc, _, err = run(["model.py", "--no-config", *given], capsys)  # nor is it used as a cache
    assert rc == 2 and "exists and is not a shapelint cache" in err
    assert full_snapshot(here) == before


@pytest.mark.parametrize("given", [".", "..", "/"])
def test_the_project_root_and_its_parents_are_never_a_cache(here: Path, capsys: pytest.CaptureFixture[str],
                                                            given: str) -> None:
    """``--cache-dir .`` wrote a ``.gitignore`` of ``*`` into the project, and ``clean
    --cache-dir .`` deleted the repository, ``.git`` included."""
    before = full_snapshot(here.parent)
    rc, _, err = run(["model.py", "--no-config", "--cache-dir", given], capsys)
    assert rc == 2 and ("is the project root" in err or "holds the project root" in err), err
    rc, _, err = clean(capsys, "--cache-dir", given)
    assert rc == 2 and "nothing removed" in err
    assert full_snapshot(here.parent) == before


def test_clean_removes_its_own_files_and_keeps_the_rest(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lint_json(capsys)
    folder = here / cache.DIR_NAME
    assert records(here) and records(here, "runs")
    (folder / "results" / "mine.txt").write_text("a user's file dropped in the cache")
    outside = here / "outside"
    outside.mkdir()
    (outside / "0").write_text("x")
    os.symlink(outside, folder / "link")
    rc, out, _ = clean(capsys)
    assert rc == 0 and "kept what shapelint did not make" in out
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == [
        "CACHEDIR.TAG", "link", "results", "results/mine.txt"]
    assert (outside / "0").read_text() == "x"  # a link is never followed
    (folder / "results" / "mine.txt").unlink()
    (folder / "link").unlink()
    rc, out, _ = clean(capsys)
    assert rc == 0 and out.strip() == f"removed {folder}" and not folder.exists()
    rc, out, _ = clean(capsys)
    assert rc == 0 and out.strip() == f"no cache at {folder}"


def test_a_new_cache_folder_is_made_only_where_nothing_is(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "empty").mkdir()
    assert run(["model.py", "--no-config", "--cache-dir", "empty"], capsys)[0] == 1
    assert (here / "empty" / "CACHEDIR.TAG").read_text() == cache.CACHEDIR_TAG
    assert (here / "empty" / ".gitignore").read_text().splitlines()[-1] == "*"
    assert run(["model.py", "--no-config", "--cache-dir", "new/deeper"], capsys)[0] == 1
    assert cache.is_cache(here / "new" / "deeper")


# -- one output path, cached or not --------------------------------------------------------


@pytest.mark.parametrize("cached", [False, True])
def test_a_replay_refuses_what_a_fresh_run_refuses(here: Path, capsys: pytest.CaptureFixture[str],
                                                   cached: bool) -> None:
    """A cached run skipped the "output is an input" check: ``-o r.txt`` with
    ``r.txt -> model.py`` replaced the model with the report."""
    if cached:
        run(["model.py", "--no-config", "-o", "report.txt"], capsys)
        (here / "report.txt").unlink()
    os.symlink("model.py", here / "report.txt")
    model = (here / "model.py").read_bytes()
    rc, _, err = run(["model.py", "--no-config", "-o", "report.txt"], capsys)
    assert rc == 2 and err == ("shapelint: error: --output report.txt: is model.py, which shapelint reads; "
                               "refusing to overwrite it\n")
    assert (here / "model.py").read_bytes() == model and os.readlink(here / "report.txt") == "model.py"


@pytest.mark.parametrize("cached", [False, True])
def test_a_link_to_another_file_stays_a_link(here: Path, capsys: pytest.CaptureFixture[str], cached: bool) -> None:
    (here / "reports").mkdir()
    os.symlink("reports/latest.json", here / "r.json")
    for _ in range(2 if cached else 1):
        rc, _, err = run(["model.py", "--no-config", "--format", "json", "-o", "r.json"], capsys)
        assert rc == 1, err
    assert os.readlink(here / "r.json") == "reports/latest.json"
    assert findings(json.loads((here / "reports" / "latest.json").read_text())) == [FINDING]


def test_a_failed_run_leaves_an_existing_report_whole(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "bad.py").write_text("def shapelint_model(:\n")
    (here / "r.txt").write_text("the last report\n")
    rc, out, err = run(["bad.py", "--no-config", "-o", "r.txt"], capsys)
    assert rc == 2 and out == "" and "syntax error" in err
    assert (here / "r.txt").read_text() == "the last report\n"


@pytest.mark.parametrize("second", ["--plot", "--dump-graph"])
def test_two_outputs_are_never_one_file(here: Path, capsys: pytest.CaptureFixture[str], second: str) -> None:
    before = full_snapshot(here)
    rc, _, err = run(["model.py", "--no-config", "-o", "r.svg", second, "r.svg"], capsys)
    assert rc == 2 and f"{second} r.svg: is also --output's file" in err
    assert full_snapshot(here) == before


def test_a_fifo_is_refused_not_waited_on(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(here / "f")
    rc, _, err = run(["model.py", "--no-config", "-o", "f"], capsys)
    assert rc == 2 and err == ("shapelint: error: --output f: is a FIFO; shapelint writes regular files only "
                               "(leave out --output to write to stdout)\n")


@pytest.mark.slow
@pytest.mark.parametrize(("fmt", "isolate"), [("json", ""), ("text", ""), ("sarif", "--no-isolate")])
def test_a_closed_pipe_keeps_the_exit_code(here: Path, fmt: str, isolate: str) -> None:
    """``shapelint big.py --format json | head -c 100`` exited 0 with findings: the
    forked lint's exit code was lost when stdout closed. The reader here closes the
    pipe before anything is written."""
    argv = [sys.executable, "-m", "shapelint", "model.py", "--format", fmt, "--no-config", "--no-cache"]
    proc = subprocess.Popen(argv + ([isolate] if isolate else []), cwd=here, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() == 1, err
    assert err == ""


# -- the red team's second pass (issue 24) -------------------------------------------------


def test_a_signed_record_copied_to_another_name_is_a_miss(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run record of a passing run, copied over the record of a failing one: its seal
    covers its place in the cache, so it does not verify there."""
    rc, _, _ = run(["model.py", "--no-config", "--ignore", "SL101"], capsys)
    assert rc == 0
    passing = {p.name: p.read_bytes() for p in records(here, "runs")}
    rc, _, _ = run(["model.py", "--no-config"], capsys)
    assert rc == 1
    (new,) = [p for p in records(here, "runs") if p.name not in passing]
    for entry in records(here):  # and the per-target records swapped the same way
        entry.write_bytes(next(iter(passing.values())))
    new.write_bytes(next(iter(passing.values())))
    rc, out, _ = run(["model.py", "--no-config"], capsys)
    assert rc == 1 and FINDING in out


@pytest.mark.parametrize("where", ["relative", "inside"])
def test_a_key_the_work_tree_could_supply_signs_nothing(here: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """``XDG_CACHE_HOME=.cache`` with a key committed in the repository signed records
    with a key the pull request knew."""
    (here / ".cache" / "shapelint").mkdir(parents=True)
    planted = here / ".cache" / "shapelint" / "cache-key"
    planted.write_text("ab" * 32)
    planted.chmod(0o600)
    monkeypatch.setenv("XDG_CACHE_HOME", ".cache" if where == "relative" else str(here / ".cache"))
    monkeypatch.setenv("HOME", str(here.parent / "home"))  # the key ~/.cache would get: the test's own
    seal.key.cache_clear()
    assert run(["model.py", "--no-config"], capsys)[0] == 1
    if where == "inside":  # the cache is off: nothing signed with the planted key
        assert records(here) == [] and records(here, "runs") == []
    else:  # a relative XDG_CACHE_HOME is ignored (the XDG rule): the key is ~/.cache's
        assert seal.key_file() == here.parent / "home" / ".cache" / "shapelint" / "cache-key"
        assert planted.read_text() == "ab" * 32 and records(here)


def test_a_key_others_can_read_signs_nothing(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lint_json(capsys)
    seal.key_file().chmod(0o644)
    seal.key.cache_clear()
    for record in records(here) + records(here, "runs"):
        record.unlink()
    assert lint_json(capsys)[0] == 1 and records(here) == []


def test_a_planted_cache_with_linked_record_folders_is_refused(here: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A committed ``.shapelint_cache`` with shapelint's own tag and ``runs``/``results``
    linked elsewhere made the cache write its records there."""
    victim = tmp_path / "victim"
    victim.mkdir()
    folder = here / cache.DIR_NAME
    folder.mkdir()
    (folder / "CACHEDIR.TAG").write_text(cache.CACHEDIR_TAG)
    for sub in ("runs", "results"):
        os.symlink(victim, folder / sub)
    rc, _, err = run(["model.py", "--no-config"], capsys)
    assert rc == 2 and "exists and is not a shapelint cache" in err
    assert list(victim.iterdir()) == []
    rc, _, err = run(["clean"], capsys)
    assert rc == 2 and list(victim.iterdir()) == [] and (folder / "runs").is_symlink()


def test_a_huge_tag_is_not_read_whole(here: Path) -> None:
    folder = here / cache.DIR_NAME
    folder.mkdir()
    with open(folder / "CACHEDIR.TAG", "wb") as f:
        f.write(cache.CACHEDIR_TAG.encode())
        f.truncate(2**31)  # sparse: 2 GiB
    import time

    start = time.monotonic()
    assert not cache.is_cache(folder)
    assert time.monotonic() - start < 1.0


@pytest.mark.parametrize("kind", ["fifo target", "device link target", "fifo profile"])
def test_what_cannot_be_read_is_one_line_not_a_hang(here: Path, capsys: pytest.CaptureFixture[str], kind: str) -> None:
    """A FIFO or ``/dev/zero`` behind a target's or profile's name hung the cache's digest."""
    import signal

    def hung(*_: object) -> None:
        raise AssertionError(f"{kind}: still running after 20 s")

    if kind == "fifo target":
        os.mkfifo(here / "f.py")
        argv = ["f.py"]
    elif kind == "device link target":
        os.symlink("/dev/zero", here / "c.json")
        argv = ["c.json"]
    else:
        os.mkfifo(here / "prof.yaml")
        argv = ["model.py", "--gpu-profile", "prof.yaml", "--no-cache"]
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        rc, _, err = run([*argv, "--no-config"], capsys)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "not a regular file" in err, err


def test_a_new_module_that_an_import_now_finds_is_a_miss(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``override.py`` added beside a model whose import of it failed: the cached result
    replayed the old width, and ``--hook override.py`` let the commit through."""
    (here / "model.py").write_text(
        "import torch\nfrom torch import nn\ntry:\n    from override import W\nexcept ImportError:\n    W = 1024\n\n\n"
        "def shapelint_model():\n    return nn.Sequential(nn.Linear(W, 1024)), torch.randn(4096, W)\n")
    (here / "pyproject.toml").write_text('[tool.shapelint]\ntargets = ["model.py"]\n')
    assert run(["model.py"], capsys)[0] == 0
    (here / "override.py").write_text("W = 1023\n")
    assert run(["model.py"], capsys)[0] == 1
    (here / "override.py").unlink()
    assert run(["model.py"], capsys)[0] == 0
    (here / "override.py").write_text("W = 1023\n")
    rc, out, _ = run(["--hook", "override.py"], capsys)
    assert rc == 1 and FINDING in out


def test_a_project_inside_the_python_prefix_is_the_users() -> None:
    """A virtual environment at the project root, or Debian's /usr prefix with a project
    under /usr/src: the whole prefix counted as Python's own, so no dependency was kept."""
    from shapelint.app import deps

    system = deps._system_dirs()
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        assert os.path.normpath(prefix) + os.sep not in system
    assert not deps._is_system(os.path.join(sys.prefix, "src", "app", "model.py"), system)
    assert deps._is_system(os.path.join(sysconfig_path("purelib"), "torch", "nn", "linear.py"), system)


def sysconfig_path(name: str) -> str:
    import sysconfig

    return sysconfig.get_paths()[name]


def test_the_hook_sees_a_dependency_imported_through_a_linked_folder(here: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (here / "shared").mkdir()
    (here / "shared" / "__init__.py").write_text("")
    (here / "shared" / "layers.py").write_text("W = 1024\n")
    os.symlink("shared", here / "lib")
    (here / "model.py").write_text("import torch\nfrom torch import nn\nfrom lib.layers import W\n\n\n"
                                   "def shapelint_model():\n    return nn.Sequential(nn.Linear(W, 1024)), "
                                   "torch.randn(4096, W)\n")
    (here / "pyproject.toml").write_text('[tool.shapelint]\ntargets = ["model.py"]\n')
    assert run(["--hook", "model.py"], capsys)[0] == 0
    (here / "shared" / "layers.py").write_text("W = 1023\n")
    rc, out, _ = run(["--hook", "shared/layers.py"], capsys)
    assert rc == 1 and FINDING in out


def test_the_gpu_profile_is_never_an_output(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from shapelint.hardware import PROFILE_DIR

    (here / "p.yaml").write_bytes((PROFILE_DIR / "h100-sxm.yaml").read_bytes())
    before = full_snapshot(here)
    rc, _, err = run(["model.py", "--no-config", "--gpu-profile", "p.yaml", "-o", "p.yaml"], capsys)
    assert rc == 2 and "--output p.yaml: is p.yaml, which shapelint reads" in err
    assert full_snapshot(here) == before


def test_a_link_out_of_the_project_is_no_output(here: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``-o report.txt`` with ``report.txt`` a committed link to a file outside the
    repository overwrote that file."""
    outside = tmp_path / "bashrc"
    outside.write_text("mine\n")
    os.symlink(outside, here / "report.txt")
    rc, _, err = run(["model.py", "--no-config", "-o", "report.txt"], capsys)
    assert rc == 2 and "a symbolic link leads it to" in err and "outside the project" in err
    assert outside.read_text() == "mine\n"


def test_diff_goes_to_the_output_file(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (here / "r.txt").write_text("old\n")
    rc, out, _ = run(["model.py", "--no-config", "--diff", "-o", "r.txt"], capsys)
    assert rc == 1 and out == ""
    assert "-    model = nn.Sequential(nn.Linear(1023, 1024)" in (here / "r.txt").read_text()


def test_a_report_that_cannot_be_renamed_over_is_written_in_place(here: Path, capsys: pytest.CaptureFixture[str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A bind-mounted ``-o`` file (a container's ``-v $PWD/r.json:/w/r.json``) cannot be
    renamed over: ``Device or resource busy``."""
    import errno

    (here / "r.json").write_text("old")

    def busy(src: object, dst: object) -> None:
        raise OSError(errno.EBUSY, "Device or resource busy")

    monkeypatch.setattr("shapelint.files.os.replace", busy)
    rc, _, err = run(["model.py", "--no-config", "--no-cache", "--format", "json", "-o", "r.json"], capsys)
    assert rc == 1, err
    assert findings(json.loads((here / "r.json").read_text())) == [FINDING]
    assert sorted(p.name for p in here.iterdir() if p.name.startswith(".r.json")) == []


@pytest.mark.slow
def test_a_closed_stderr_keeps_the_report_and_the_exit_code(here: Path) -> None:
    """A model that prints to stderr, with stderr a closed pipe: the run exited 2 with no
    report. The report still goes to stdout and the exit code is the lint's."""
    (here / "m.py").write_text("import sys, torch\nfrom torch import nn\n\n\ndef shapelint_model():\n"
                               "    for i in range(20000):\n        print(i, file=sys.stderr)\n"
                               "    return nn.Sequential(nn.Linear(1024, 1024)), torch.randn(4096, 1024)\n")
    for extra in ([], ["--no-isolate"]):
        proc = subprocess.Popen([sys.executable, "-m", "shapelint", "m.py", "--no-config", "--no-cache", "--format",
                                 "json", *extra], cwd=here, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        proc.stderr.close()
        out, _ = proc.communicate()
        assert proc.returncode == 0, extra
        assert json.loads(out)["findings"] == []


@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("through", ["name", "link"])
def test_a_module_the_model_imports_is_never_an_output(here: Path, capsys: pytest.CaptureFixture[str], cached: bool,
                                                      through: str) -> None:
    """``-o helper.py`` replaced a module the model imports with the report (exit 1)."""
    (here / "helper.py").write_text("W = 1023\n")
    (here / "model.py").write_text("import torch\nfrom torch import nn\nfrom helper import W\n\n\n"
                                   "def shapelint_model():\n    return nn.Sequential(nn.Linear(W, 1024)), "
                                   "torch.randn(4096, W)\n")
    if cached:
        assert run(["model.py", "--no-config", "-o", "r.txt"], capsys)[0] == 1
    out = "helper.py"
    if through == "link":
        os.symlink("helper.py", here / "h.txt")
        out = "h.txt"
    rc, _, err = run(["model.py", "--no-config", "-o", out], capsys)
    assert rc == 2 and "helper.py, which shapelint reads; refusing to overwrite it" in err, err
    assert (here / "helper.py").read_text() == "W = 1023\n"
