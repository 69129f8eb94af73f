"""The ``shapelint`` command. Exit codes: 0 clean, 1 findings, 2 usage or input error."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

from shapelint.app import cached, parallel
from shapelint.app.cache import Store
from shapelint.errors import ShapelintError
from shapelint.pipeline.settings import Settings, add_flags, default, from_args, merged
from shapelint.version import __version__

if TYPE_CHECKING:
    from shapelint.app.config import Config
    from shapelint.check.rule_api import Rule
    from shapelint.locate import suppress
    from shapelint.pipeline.result import Options, Result, TargetError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ShapelintError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="shapelint",
        description="Find the layer shapes that waste your GPU: every GEMM of the forward and backward "
        "pass, traced on fake tensors, checked against a GPU profile.",
        epilog="Settings also come from [tool.shapelint] in pyproject.toml or .shapelint.yaml (searched "
        "from the current directory upwards); flags override them. Exit codes: 0 no findings, "
        "1 findings, 2 usage or input error.",
    )
    p.add_argument("targets", nargs="*", metavar="TARGET",
                   help="model.py (defining shapelint_model()), a Hugging Face config.json, a shapelint "
                        "YAML, or a directory of configs (default: the configuration's targets)")
    add_flags(p)  # every setting a configuration file can also set (shapelint.pipeline.settings)
    p.add_argument("--gpu-profile", metavar="FILE", help="a GPU profile YAML (e.g. from `shapelint calibrate`)")
    p.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE instead of stdout")
    p.add_argument("--rules-dir", action="append", default=[], metavar="DIR", help="load extra rule modules")
    p.add_argument("--statistics", action="store_true",
                   help="after the report, print the number of findings per rule code")
    p.add_argument("--show-suppressed", action="store_true",
                   help="also report findings silenced by a '# shapelint: ignore' comment")
    p.add_argument("--config", metavar="FILE",
                   help="read settings from FILE (pyproject.toml, .toml, .yaml or .json) instead of searching")
    p.add_argument("--no-config", action="store_true", help="ignore configuration files")
    p.add_argument("--plot", metavar="FILE", help="draw every GEMM on the GPU's roofline to FILE.png or FILE.svg "
                                                   "(needs matplotlib: pip install 'shapelint[plot]')")
    p.add_argument("--skip-other-files", action="store_true",
                   help="skip given files that are not targets (Python files without shapelint_model, "
                        "JSON without model_type, YAML without model:), as the pre-commit hook does")
    p.add_argument("--verify", action="store_true",
                   help="on a CUDA GPU: time each finding's GEMMs before and after its suggestion "
                        "(findings measured below the reporting threshold are marked not confirmed)")
    p.add_argument("--step", action="store_true",
                   help="with --verify: also train the real model (random weights) before and after every "
                        "suggestion and compare the measured step time and speedup with the estimate")
    p.add_argument("--fix", action="store_true",
                   help="apply the findings' suggestions to the files that set the sizes (config.json, shapelint "
                        "YAML, integer literals in Python), then lint the edited targets again")
    p.add_argument("--diff", action="store_true", help="print the edits --fix would make as a unified diff; "
                                                         "write nothing")
    p.add_argument("--unsafe-fixes", action="store_true",
                   help="also fix what changes the model beyond padding (head_dim, heads, a smaller layer)")
    p.add_argument("--dump-graph", metavar="FILE", help="write the joint forward+backward FX graph's code")
    p.add_argument("--list-rules", action="store_true", help="list the rules and exit")
    p.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the result cache (also: SHAPELINT_NO_CACHE=1)")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="where the result cache lives (default .shapelint_cache at the project root; also: "
                        "SHAPELINT_CACHE_DIR); `shapelint clean` deletes it")
    p.add_argument("--jobs", "-j", type=_jobs, metavar="N",
                   help="lint up to N targets at once, in worker processes (default: the available cores)")
    p.add_argument("--hook", action="store_true",
                   help="pre-commit mode: the TARGETs are changed files; lint the configured targets whose "
                        "recorded dependencies include one of them (or never linted here), and the changed "
                        "files that are targets")
    p.add_argument("--verbose", "-v", action="store_true", help="add the full GEMM table")
    p.add_argument("--timeout", type=_seconds, metavar="SECONDS",
                   help="stop the lint after SECONDS and exit 2 (runs it in a child process)")
    p.add_argument("--max-memory", type=_bytes, metavar="SIZE",
                   help="cap the lint's memory (address space) at SIZE, e.g. 8G (runs it in a child process)")
    p.add_argument("--no-isolate", action="store_true",
                   help="lint in this process, not in a forked child (the default for the shapelint command on "
                        "Linux: it turns os._exit, crashes and runaway memory in user code into one error line)")
    p.add_argument("--debug", action="store_true", help="show tracebacks (and lint in this process)")
    p.add_argument("--version", action="version", version=f"shapelint {__version__}")
    return p


def _jobs(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def calibrate_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="shapelint calibrate",
                description="Measure the local CUDA GPU (GEMM peaks per dtype, copy bandwidth, misalignment "
                            "penalties, a wave sweep, the training-step table) and write a GPU profile "
                            "for --gpu-profile.")
    p.add_argument("--output", "-o", metavar="FILE", default="gpu-profile.yaml",
                   help="where to write the profile (default gpu-profile.yaml)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The command. ``argv`` None (the console command): the lint runs in a forked
    child on Linux (see :func:`_isolation`); from Python only when ``--timeout`` or
    ``--max-memory`` asks for it."""
    console = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    if argv[:1] == ["calibrate"]:
        return _guarded(lambda: _calibrate(argv[1:]), debug)
    if argv[:1] == ["clean"]:
        return _guarded(lambda: _clean(argv[1:]), debug)

    def lint() -> int:
        return _guarded(lambda: _run(argv), debug)

    def isolated() -> int:
        limits = _isolation(argv, console)
        if limits is None:
            return lint()
        from shapelint.app import isolate

        return isolate.run_isolated(lint, **limits)

    return _guarded(isolated, debug)


def _guarded(fn: Callable[[], int], debug: bool) -> int:
    """``fn()``, every error one ``shapelint: error:`` line and exit 2 (a traceback
    only with ``--debug``); Ctrl-C exit 130."""
    from shapelint.errors import describe

    try:
        return fn()
    except ShapelintError as exc:
        if debug:
            raise
        print(f"shapelint: error: {describe(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("shapelint: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        print(f"shapelint: error: {describe(exc)}", file=sys.stderr)
        return 2


def _isolation(argv: list[str], console: bool) -> dict[str, Any] | None:
    """``run_isolated``'s limits when the lint runs in a child process, else None:
    on by default for the console command where ``fork`` is safe, off with
    ``--no-isolate`` or ``--debug`` (a debugger needs the process); from Python only
    when ``--timeout`` or ``--max-memory`` is given (they need the child)."""
    from shapelint.app import isolate

    args = build_parser().parse_args(argv)  # usage errors: one line, before any fork
    limited = args.timeout is not None or args.max_memory is not None
    if args.no_isolate or args.debug:
        if limited:
            raise ShapelintError("--timeout and --max-memory need the child process (drop --no-isolate/--debug)")
        return None
    if limited and not isolate.available():
        raise ShapelintError("--timeout and --max-memory need os.fork (Linux or another POSIX system but macOS)")
    if not (console or limited) or not isolate.available():
        return None
    return {"timeout": args.timeout, "max_memory": args.max_memory}


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _bytes(text: str) -> int:
    """``8G``, ``512M``, ``1073741824``: a memory size (binary units)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if m is None or int(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive size such as 8G or 512M, got {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def _run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from shapelint import hardware
    from shapelint.app.config import load_config
    from shapelint.check import run as check

    if args.config and args.no_config:
        raise ShapelintError("--config and --no-config exclude each other")
    if args.step and not args.verify:
        raise ShapelintError("--step needs --verify (--verify --step times whole training steps on a CUDA GPU)")
    cfg = load_config(args.config, search=not args.no_config)
    flags = from_args(args)
    given = merged(flags, cfg)
    session = None
    if not args.list_rules:  # before the rules: loading them imports torch, a replay does not
        session = cached.start(args, cfg, flags)
        if session.rc is not None:
            return session.rc
        _check_outputs(args, session.paths, cfg.file)  # a replay writes where a fresh run would, or nowhere
        if session.replay is not None:
            return cached.print_replay(session.replay, args.output)
    all_rules = check.load_rules(args.rules_dir)
    _check_config_codes(cfg, all_rules)
    rules = check.select_rules(all_rules, given.select or [], given.ignore or [])
    if args.list_rules:
        for rule in rules:
            print(f"{rule.code}  {rule.name:32} {rule.summary}")
        return 0
    assert session is not None
    if not session.named:
        raise ShapelintError("no target given (try: shapelint examples/mlp.py, or targets = [...] in the "
                             "configuration)")
    fmt = _or_default(given.format, "format")
    if args.plot:
        from shapelint.report import plot

        plot.check_path(args.plot)
        plot.require_matplotlib()
    # None: each target's own `gpu` setting (YAML), else the config's, else the local GPU, else h100
    cli_hw = hardware.load_profile_file(args.gpu_profile) if args.gpu_profile else (
        hardware.resolve(args.gpu) if args.gpu is not None else None)
    cfg_hw = hardware.resolve(cfg.gpu) if cfg.gpu else None

    from shapelint.app import outputs
    from shapelint.app.config import module_ignored
    from shapelint.locate import suppress
    from shapelint.pipeline.run import with_findings

    paths = session.paths
    graphs = outputs.graph_paths(args.dump_graph, paths) if args.dump_graph else [None] * len(paths)
    known = {r.code for r in all_rules} | {r.name for r in all_rules}
    reader = suppress.LineReader()
    jobs = []
    for path, graph in zip(paths, graphs):
        own = _target_settings(path)
        opts = _options(flags, cfg, own, None if graph is None else str(graph))
        jobs.append((path, opts, cli_hw or (None if "gpu" in own else cfg_hw)))

    def post(r: Result, reader: suppress.LineReader) -> Result:
        findings = [f for f in r.findings if not module_ignored(f, cfg.per_module_ignores)]
        return with_findings(r, suppress.apply(findings, reader))

    results, errors = [], []
    workers = 1 if args.dump_graph or args.debug else args.jobs or parallel.cores()
    for (path, _, _), got in zip(jobs, session.lint_all(jobs, rules, workers, debug=args.debug)):
        if isinstance(got, Exception):
            errors.append(_failed(path, got))
            continue
        r = post(got, reader)
        results.append(r)
        errors += [_failed(path, ShapelintError(str(problem)))
                   for problem in _suppression_problems(r, known, reader)]
    fixing = None
    if args.fix or args.diff:
        from shapelint.app import project
        from shapelint.fix import run as fix
        from shapelint.fix.relint import Relinter

        # the re-lint runs in a fresh process (a module imported here would stay stale),
        # with these options, GPU profiles and rules; edited files are read afresh: a new LineReader
        relinter = Relinter({str(path): (opts, hw) for path, opts, hw in jobs}, tuple(r.code for r in rules),
                            tuple(args.rules_dir))
        fixing = fix.run(results, lambda targets: [post(r, suppress.LineReader()) for r in relinter(targets)],
                         write=args.fix and not args.diff, unsafe=args.unsafe_fixes, root=project.root(cfg))
        results = fixing.results
    if args.verify:
        results = _verify(results, args)
    if args.step:  # shapelint.measure.step: whole training steps, before and after every suggestion
        from shapelint.measure import step as verify_step

        results, failed = verify_step.verify_results(results, verify_step.cli_options(_stderr_console()))
        errors += [_failed(Path(target), ShapelintError(message)) for target, message in failed]
    with session.recording(args.output):
        if args.diff:
            sys.stdout.write(fixing.diff if fixing else "")
        else:
            _write(results, args, fmt, rules, errors)
        if fixing:
            notes_to = sys.stdout if fmt == "text" and not args.output and not args.diff else sys.stderr
            print("\n".join(fixing.notes), file=notes_to)
        if args.statistics:
            from shapelint.report import text

            to_stderr = fmt != "text" and not args.output
            text.statistics(results, sys.stderr if to_stderr else sys.stdout, show_suppressed=args.show_suppressed)
    if args.plot and results:
        from shapelint.report import plot

        plot.render(results, args.plot)
    if errors:
        return 2
    from shapelint.measure.verify import confirmed

    count = sum(1 for r in results for f in r.findings if not f.suppressed and confirmed(f))
    exit_zero = bool(_or_default(given.exit_zero, "exit-zero"))
    return session.done(1 if count and not exit_zero else 0, count, exit_zero)


def _check_outputs(args: argparse.Namespace, paths: list[Path], config_file: str | None) -> None:
    """No output may replace a file the run reads (a target, a builder, the
    configuration, a rule module), before anything is linted."""
    from shapelint.app import outputs

    protected = outputs.protected_paths(paths, config_file, args.rules_dir)
    given: list[tuple[str, str]] = []
    if args.output is not None:
        given.append(("--output", args.output))
    if args.plot is not None:
        given.append(("--plot", args.plot))
    if args.dump_graph is not None:
        outputs.check_file_name(args.dump_graph, "--dump-graph")
        given += [("--dump-graph", str(graph)) for graph in outputs.graph_paths(args.dump_graph, paths)]
    for flag, path in given:
        outputs.check_output_path(path, protected, flag)
    outputs.check_distinct(given)


def _failed(path: Path, exc: Exception) -> TargetError:
    """One target's failure: a one-line message (naming the target), printed now."""
    from shapelint.errors import describe
    from shapelint.pipeline.result import TargetError

    text = describe(exc)
    if str(path) not in text:
        text = f"{path}: {text}"
    print(f"shapelint: error: {text}", file=sys.stderr)
    return TargetError(str(path), text)


def _suppression_problems(r: Result, known: set[str], reader: suppress.LineReader) -> list[suppress.Problem]:
    """Malformed or unknown ``# shapelint: ignore[...]`` comments in the target and
    the files its findings point at (each is an error: it suppresses nothing)."""
    from shapelint.locate import suppress

    files = dict.fromkeys([r.config_file or r.target, *(f.source.file for f in r.findings if f.source)])
    return [problem for file in files if Path(file).suffix.lower() in (".py", ".yaml", ".yml")
            for problem in suppress.problems(file, known, reader)]


def _calibrate(argv: list[str]) -> int:
    args = calibrate_parser().parse_args(argv)
    from shapelint.measure import calibrate

    hw = calibrate.run(args.output)
    print(f"wrote {args.output}: {hw.name}, bf16 {hw.peak_tflops('bf16'):.0f} TFLOP/s, "
          f"{hw.bandwidth / 1e12:.2f} TB/s (use it with --gpu-profile {args.output})")
    return 0


def _clean(argv: list[str]) -> int:
    p = _Parser(prog="shapelint clean",
                description="Delete the result cache (.shapelint_cache at the project root): only a folder shapelint "
                            "made, and in it only the files shapelint wrote.")
    p.add_argument("--cache-dir", metavar="DIR", help="the cache folder to delete instead")
    p.add_argument("--config", metavar="FILE", help="the configuration file that marks the project root")
    args = p.parse_args(argv)
    from shapelint.app import cache, project
    from shapelint.app.config import load_config

    cfg = load_config(args.config)
    folder, named_by = cached.folder(args.cache_dir, cfg)
    why = cache.forbidden(folder, project.root(cfg))
    if why:
        raise ShapelintError(f"{named_by} {folder}: {why}; nothing removed")
    if not folder.exists() and not folder.is_symlink():
        print(f"no cache at {folder}")
        return 0
    if not cache.is_cache(folder):
        raise ShapelintError(f"{folder}: not a shapelint cache (no CACHEDIR.TAG of shapelint's); nothing removed")
    stays = Store(folder).clear()
    if not stays:
        print(f"removed {folder}")
        return 0
    shown = ", ".join(str(p) for p in stays[:3]) + (f" and {len(stays) - 3} more" if len(stays) > 3 else "")
    print(f"removed shapelint's files from {folder}; kept what shapelint did not make: {shown}")
    return 0


def _verify(results: list, args: argparse.Namespace) -> list:
    """--verify: measure each finding on the local GPU; findings measured below the
    reporting threshold are marked not confirmed (and do not fail the run)."""
    import torch
    from rich.progress import Progress

    from shapelint.measure import verify
    from shapelint.pipeline.run import with_findings

    if not torch.cuda.is_available():
        raise ShapelintError("--verify needs a CUDA GPU (torch.cuda.is_available() is False)")
    out = []
    with Progress(console=_stderr_console(), transient=True) as progress:
        for r in results:
            task = progress.add_task(f"verifying {r.target}", total=len(r.findings))

            def step(indices, task=task):  # type: ignore[no-untyped-def]
                for i in indices:
                    yield i
                    progress.advance(task)

            threshold = max(r.policy.min_speedup, 1.0)
            checked = verify.verify(r.findings, r.capture.gemms, r.hardware, threshold, progress=step)
            out.append(with_findings(r, checked))
    return out


def _stderr_console():  # type: ignore[no-untyped-def]
    from rich.console import Console

    return Console(stderr=True)


def _options(flags: Settings, cfg: Config, own: set[str], dump_graph: str | None) -> Options:
    """One target's options: a flag, else the target's own setting (``own``: the keys
    its YAML sets, left None here so that the target's value applies), else the
    configuration file, else the built-in default (applied by ``lint_target``)."""
    from shapelint.pipeline.result import Options
    from shapelint.price import Policy

    fixed = merged(flags, cfg)  # the settings a target cannot set

    def pick(attr: str, setting: str | None = None) -> Any:
        value = getattr(flags, attr)
        if value is not None:
            return value
        return None if (setting or attr) in own else getattr(cfg, attr)

    inference = pick("inference", "training")
    return Options(
        dtype=pick("dtype"),
        training=None if inference is None else not inference,
        batch=pick("batch"),
        seq=pick("seq"),
        tp=pick("tp"),
        compile=pick("compile"),
        optimizer=pick("optimizer"),
        dump_graph=dump_graph,
        allow_builders=tuple(cfg.allow_builders or ()),
        policy=Policy(**{key.replace("-", "_"): _or_default(getattr(fixed, key.replace("-", "_")), key)
                         for key in ("min-loss", "min-speedup", "min-step-share")}),
    )


def _or_default(value: Any, key: str) -> Any:
    return value if value is not None else default(key)


def _check_config_codes(cfg: Config, rules: Sequence[Rule]) -> None:
    """Unknown rule codes in the configuration file: an error naming the file and line."""
    from shapelint.check import run as check

    if cfg.file is None:
        return
    checks = [("select", cfg.select or []), ("ignore", cfg.ignore or [])]
    checks += [("per-module-ignores", codes) for codes in (cfg.per_module_ignores or {}).values()]
    for key, codes in checks:
        try:
            check.select_rules(rules, codes, [])
        except ShapelintError as exc:
            raise ShapelintError(f"{cfg.where(key)}: {key}: {exc}") from None


#: settings a shapelint YAML target can carry, by the configuration key they shadow
_TARGET_SETTINGS = ("dtype", "gpu", "training", "tp", "batch", "seq")


def _target_settings(path: Path) -> set[str]:
    """The settings a YAML target sets itself (they win over the configuration file)."""
    from shapelint.load.documents import read_yaml
    from shapelint.load.targets import YAML_SUFFIXES

    if path.suffix not in YAML_SUFFIXES or not path.is_file():
        return set()
    try:
        doc = read_yaml(path)
    except ShapelintError:
        raise
    except Exception:
        return set()
    return {k for k in _TARGET_SETTINGS if k in doc}


def _write(results: list, args: argparse.Namespace, fmt: str, rules: Sequence[Rule],
           errors: Sequence[TargetError] = ()) -> None:
    """The report: to ``--output`` whole (a temporary file renamed over it), else to
    stdout (a reader that closes the pipe early ends it quietly). The machine formats
    carry the targets that failed (``errors``); the text report leaves them to stderr,
    and when every target failed it writes no ``--output`` file (an earlier report
    there stays whole)."""
    from shapelint.app import outputs

    if fmt == "json":
        from shapelint.report import json_report

        rendered: str | None = json_report.render(results, show_suppressed=args.show_suppressed, errors=errors)
    elif fmt == "sarif":
        from shapelint.report import sarif

        rendered = sarif.render(results, rules, show_suppressed=args.show_suppressed, errors=errors)
    elif fmt == "github":
        from shapelint.report import github

        rendered = github.render(results, errors)
    else:
        rendered = None
    if args.output:
        if rendered is None:
            if not results:  # every target failed (stderr says why): the text report would be empty
                return
            import io

            buffer = io.StringIO()
            _text(results, args, buffer, color=False)
            rendered = buffer.getvalue()
        outputs.write_file(args.output, rendered, "--output")
        return
    with outputs.stdout_guard():
        if rendered is not None:
            sys.stdout.write(rendered)
            return
        try:
            _text(results, args, sys.stdout, color=False if os.environ.get("NO_COLOR") else None)
        except SystemExit:  # rich ends a closed pipe with sys.exit(1): the run's exit code must win
            raise BrokenPipeError from None


def _text(results: list, args: argparse.Namespace, out: IO[str], color: bool | None) -> None:
    from shapelint.report import text

    text.render(results, out, verbose=args.verbose, color=color, show_suppressed=args.show_suppressed)


if __name__ == "__main__":
    sys.exit(main())
