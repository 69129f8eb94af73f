"""The ``shapelint`` command. Exit codes: 0 clean, 1 findings, 2 usage or input error."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn

from shapelint import __version__, cached, parallel
from shapelint.cache import Store
from shapelint.errors import ShapelintError
from shapelint.settings import Settings, add_flags, default, from_args, merged

if TYPE_CHECKING:
    from shapelint.config import Config
    from shapelint.lint import Options
    from shapelint.rule_api import Rule


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
    add_flags(p)  # every setting a configuration file can also set (shapelint.settings)
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
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version=f"shapelint {__version__}")
    return p


def _jobs(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def calibrate_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="shapelint calibrate",
                description="Measure the local CUDA GPU (GEMM peaks per dtype, copy bandwidth, misalignment "
                            "penalties, a wave sweep) and write a GPU profile for --gpu-profile.")
    p.add_argument("--output", "-o", metavar="FILE", default="gpu-profile.yaml",
                   help="where to write the profile (default gpu-profile.yaml)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        if argv[:1] == ["calibrate"]:
            return _calibrate(argv[1:])
        if argv[:1] == ["clean"]:
            return _clean(argv[1:])
        return _run(argv)
    except ShapelintError as exc:
        if debug:
            raise
        print(f"shapelint: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("shapelint: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        print(f"shapelint: internal error: {type(exc).__name__}: {exc} (rerun with --debug)", file=sys.stderr)
        return 2


def _run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from shapelint import check, hardware
    from shapelint.config import load_config

    if args.config and args.no_config:
        raise ShapelintError("--config and --no-config exclude each other")
    cfg = load_config(args.config, search=not args.no_config)
    flags = from_args(args)
    given = merged(flags, cfg)
    session = None
    if not args.list_rules:  # before the rules: loading them imports torch, a replay does not
        session = cached.start(args, cfg, flags)
        if session.rc is not None:
            return session.rc
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

    from shapelint import suppress
    from shapelint.config import module_ignored
    from shapelint.lint import with_findings

    reader = suppress.LineReader()
    results = []
    jobs = []
    for path in session.paths:
        own = _target_settings(path)
        opts = _options(flags, cfg, own, args.dump_graph)
        jobs.append((path, opts, cli_hw or (None if "gpu" in own else cfg_hw)))
    for r in session.lint_all(jobs, rules, 1 if args.dump_graph else args.jobs or parallel.cores()):
        findings = [f for f in r.findings if not module_ignored(f, cfg.per_module_ignores)]
        results.append(with_findings(r, suppress.apply(findings, reader)))
    if args.verify:
        results = _verify(results, args)
    with session.recording(args.output):
        _write(results, args, fmt, rules)
        if args.statistics:
            from shapelint.report import text

            to_stderr = fmt != "text" and not args.output
            text.statistics(results, sys.stderr if to_stderr else sys.stdout, show_suppressed=args.show_suppressed)
    if args.plot and results:
        from shapelint.report import plot

        plot.render(results, args.plot)
    from shapelint.verify import confirmed

    count = sum(1 for r in results for f in r.findings if not f.suppressed and confirmed(f))
    exit_zero = _or_default(given.exit_zero, "exit-zero")
    return session.done(1 if count and not exit_zero else 0)


def _calibrate(argv: list[str]) -> int:
    args = calibrate_parser().parse_args(argv)
    from shapelint import calibrate

    hw = calibrate.run(args.output)
    print(f"wrote {args.output}: {hw.name}, bf16 {hw.peak_tflops('bf16'):.0f} TFLOP/s, "
          f"{hw.bandwidth / 1e12:.2f} TB/s (use it with --gpu-profile {args.output})")
    return 0


def _clean(argv: list[str]) -> int:
    p = _Parser(prog="shapelint clean", description="Delete the result cache (.shapelint_cache at the project root).")
    p.add_argument("--cache-dir", metavar="DIR", help="the cache folder to delete instead")
    p.add_argument("--config", metavar="FILE", help="the configuration file that marks the project root")
    args = p.parse_args(argv)
    from shapelint.config import load_config

    folder = cached.folder(args.cache_dir, load_config(args.config))
    print(f"removed {folder}" if Store(folder).clear() else f"no cache at {folder}")
    return 0


def _verify(results: list, args: argparse.Namespace) -> list:
    """--verify: measure each finding on the local GPU; findings measured below the
    reporting threshold are marked not confirmed (and do not fail the run)."""
    import torch
    from rich.progress import Progress

    from shapelint import verify
    from shapelint.lint import with_findings

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
    from shapelint.lint import Options
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
        policy=Policy(**{key.replace("-", "_"): _or_default(getattr(fixed, key.replace("-", "_")), key)
                         for key in ("min-loss", "min-speedup", "min-step-share")}),
    )


def _or_default(value: Any, key: str) -> Any:
    return value if value is not None else default(key)


def _check_config_codes(cfg: Config, rules: Sequence[Rule]) -> None:
    """Unknown rule codes in the configuration file: an error naming the file and line."""
    from shapelint import check

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
    from shapelint.load import YAML_SUFFIXES, read_yaml

    if path.suffix not in YAML_SUFFIXES or not path.is_file():
        return set()
    try:
        doc = read_yaml(path)
    except ShapelintError:
        raise
    except Exception:
        return set()
    return {k for k in _TARGET_SETTINGS if k in doc}


def _write(results: list, args: argparse.Namespace, fmt: str, rules: Sequence[Rule]) -> None:
    if fmt == "json":
        from shapelint.report import json_report

        rendered: str | None = json_report.render(results, show_suppressed=args.show_suppressed)
    elif fmt == "sarif":
        from shapelint.report import sarif

        rendered = sarif.render(results, rules, show_suppressed=args.show_suppressed)
    elif fmt == "github":
        from shapelint.report import github

        rendered = github.render(results)
    else:
        rendered = None
    out: IO[str]
    if args.output:
        try:
            out = open(args.output, "w", encoding="utf-8")
        except OSError as exc:
            raise ShapelintError(f"--output {args.output}: {exc.strerror}") from exc
    else:
        out = sys.stdout
    try:
        if rendered is not None:
            out.write(rendered)
        else:
            from shapelint.report import text

            color = None if out is sys.stdout and not os.environ.get("NO_COLOR") else False
            text.render(results, out, verbose=args.verbose, color=color, show_suppressed=args.show_suppressed)
    finally:
        if out is not sys.stdout:
            out.close()


if __name__ == "__main__":
    sys.exit(main())
