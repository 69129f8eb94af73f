"""The ``shapelint`` command. Exit codes: 0 clean, 1 findings, 2 usage or input error."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import IO, TYPE_CHECKING, Any, NoReturn, Sequence

from shapelint import __version__
from shapelint.config import DTYPES, FORMATS, Config
from shapelint.errors import ShapelintError

if TYPE_CHECKING:
    from shapelint.lint import Options


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ShapelintError(message)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"expected a number at least 0 and below 1, got {text}")
    return value


def _codes(text: str) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()]


def build_parser() -> argparse.ArgumentParser:
    # Every option that a configuration file can also set defaults to None ("not
    # given"), so that the file's value applies unless the flag is on the command line.
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
                        "YAML, or a directory of configs")
    p.add_argument("--gpu", metavar="NAME", help="GPU profile (default: the local CUDA GPU, else h100)")
    p.add_argument("--gpu-profile", metavar="FILE", help="a GPU profile YAML (e.g. from `shapelint calibrate`)")
    p.add_argument("--dtype", choices=DTYPES,
                   help="compute precision of the matmuls, as autocast runs them (default bf16)")
    p.add_argument("--inference", action=argparse.BooleanOptionalAction, default=None,
                   help="forward only (default: forward and backward); --no-inference undoes a config's "
                        "inference = true")
    p.add_argument("--batch", type=_positive, help="batch size for config targets (default 8)")
    p.add_argument("--seq", type=_positive, help="sequence length for config targets (default 1024)")
    p.add_argument("--tp", type=_positive, default=None,
                   help="tensor-parallel degree (Megatron-style sharding; default 1)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="report format: text, json, sarif (GitHub code scanning), github (workflow "
                        "annotations); default text")
    p.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE instead of stdout")
    p.add_argument("--select", type=_codes, default=None, metavar="CODES",
                   help="only these rule codes/prefixes/names, comma-separated")
    p.add_argument("--ignore", type=_codes, default=None, metavar="CODES",
                   help="skip these rule codes/prefixes/names, comma-separated")
    p.add_argument("--min-speedup", type=_positive_float, default=None, metavar="X",
                   help="report findings whose estimated speedup is at least X (default: the linter's built-in "
                        "threshold)")
    p.add_argument("--min-loss", type=_fraction, default=None, metavar="X",
                   help="least estimated loss (fraction of a layer's GEMM time) rules report (default 0.05)")
    p.add_argument("--rules-dir", action="append", default=[], metavar="DIR", help="load extra rule modules")
    p.add_argument("--exit-zero", action=argparse.BooleanOptionalAction, default=None,
                   help="exit 0 even with findings (errors still exit 2)")
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
    p.add_argument("--verbose", "-v", action="store_true", help="add the full GEMM table")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version=f"shapelint {__version__}")
    return p


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
        return _run(argv)
    except ShapelintError as exc:
        if debug:
            raise
        print(f"shapelint: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("shapelint: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - never a traceback without --debug
        if debug:
            raise
        print(f"shapelint: internal error: {type(exc).__name__}: {exc} (rerun with --debug)", file=sys.stderr)
        return 2


def _run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from shapelint import engine, hardware
    from shapelint.config import load_config

    if args.config and args.no_config:
        raise ShapelintError("--config and --no-config exclude each other")
    cfg = load_config(args.config, search=not args.no_config)
    all_rules = engine.load_rules(args.rules_dir)
    _check_config_codes(cfg, all_rules)
    select = args.select if args.select is not None else (cfg.select or [])
    ignore = args.ignore if args.ignore is not None else (cfg.ignore or [])
    rules = engine.select_rules(all_rules, select, ignore)
    if args.list_rules:
        for mod in rules:
            print(f"{mod.CODE}  {mod.NAME:32} {engine.rule_summary(mod)}")
        return 0
    if not args.targets:
        raise ShapelintError("no target given (try: shapelint examples/mlp.py)")
    fmt = args.format or cfg.format or "text"
    if args.plot:
        from shapelint.report import plot

        plot.check_path(args.plot)
        plot.require_matplotlib()
    # None: each target's own `gpu` setting (YAML), else the config's, else the local GPU, else h100
    cli_hw = hardware.load_profile_file(args.gpu_profile) if args.gpu_profile else (
        hardware.resolve(args.gpu) if args.gpu else None)
    cfg_hw = hardware.resolve(cfg.gpu) if cfg.gpu else None

    from shapelint import suppress
    from shapelint.config import module_ignored
    from shapelint.lint import lint_target, with_findings
    from shapelint.load import discover

    paths = discover(args.targets)
    if args.skip_other_files:
        paths = [p for p in paths if _looks_like_target(p)]
    reader = suppress.LineReader()
    results = []
    for path in paths:
        own = _target_settings(path)
        opts = _options(args, cfg, own)
        hw = cli_hw or (None if "gpu" in own else cfg_hw)
        r = lint_target(path, opts, hw, rules)
        findings = [f for f in r.findings if not module_ignored(f, cfg.per_module_ignores)]
        results.append(with_findings(r, suppress.apply(findings, reader)))
    if args.verify:
        results = _verify(results, args)
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
    exit_zero = args.exit_zero if args.exit_zero is not None else bool(cfg.exit_zero)
    return 1 if count and not exit_zero else 0


def _calibrate(argv: list[str]) -> int:
    args = calibrate_parser().parse_args(argv)
    from shapelint import calibrate

    hw = calibrate.run(args.output)
    print(f"wrote {args.output}: {hw.name}, bf16 {hw.peak_tflops('bf16'):.0f} TFLOP/s, "
          f"{hw.bandwidth / 1e12:.2f} TB/s (use it with --gpu-profile {args.output})")
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

            threshold = max(r.min_speedup, 1.0)
            checked = verify.verify(r.findings, r.capture.gemms, r.hardware, threshold, progress=step)
            out.append(with_findings(r, checked))
    return out


def _stderr_console():  # type: ignore[no-untyped-def]
    from rich.console import Console

    return Console(stderr=True)


def _options(args: argparse.Namespace, cfg: Config, own: set[str]) -> Options:
    """One target's options: a flag, else the target's own setting (``own``: the keys
    its YAML sets, left None here so that the target's value applies), else the
    configuration file, else the built-in default."""

    def pick(flag: Any, key: str, setting: str | None = None) -> Any:
        if flag is not None:
            return flag
        return None if (setting or key) in own else getattr(cfg, key)

    from shapelint.lint import Options

    inference = pick(args.inference, "inference", "training")
    defaults = Options()
    return Options(
        dtype=pick(args.dtype, "dtype"),
        training=None if inference is None else not inference,
        batch=pick(args.batch, "batch"),
        seq=pick(args.seq, "seq"),
        tp=pick(args.tp, "tp") or 1,
        dump_graph=args.dump_graph,
        min_loss=next(v for v in (args.min_loss, cfg.min_loss, defaults.min_loss) if v is not None),
        min_speedup=next(v for v in (args.min_speedup, cfg.min_speedup, defaults.min_speedup) if v is not None),
    )


def _check_config_codes(cfg: Config, rules: Sequence[ModuleType]) -> None:
    """Unknown rule codes in the configuration file: an error naming the file and line."""
    from shapelint import engine

    if cfg.file is None:
        return
    checks = [("select", cfg.select or []), ("ignore", cfg.ignore or [])]
    checks += [("per-module-ignores", codes) for codes in cfg.per_module_ignores.values()]
    for key, codes in checks:
        try:
            engine.select_rules(rules, codes, [])
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
    except Exception:  # noqa: BLE001 - lint_target reports unreadable targets
        return set()
    return {k for k in _TARGET_SETTINGS if k in doc}


_PY_TARGET = re.compile(
    r"^\s*(?:async\s+)?def\s+shapelint_model\b|^\s*shapelint_model\s*=|^\s*from\s+\S+\s+import\b.*\bshapelint_model\b",
    re.MULTILINE)
_YAML_TARGET = re.compile(r"^[\"']?(?:model|hf_config)[\"']?\s*:", re.MULTILINE)


def _looks_like_target(path: Path) -> bool:
    """For --skip-other-files: could this file be a shapelint target? (read, never imported)"""
    if path.is_dir():
        return True
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True  # let the loader report it
    if path.suffix == ".py":
        return _PY_TARGET.search(text) is not None
    if path.suffix == ".json":
        return path.name == "config.json" or '"model_type"' in text
    if path.suffix in (".yaml", ".yml"):
        return _YAML_TARGET.search(text) is not None
    return False


def _write(results: list, args: argparse.Namespace, fmt: str, rules: Sequence[ModuleType]) -> None:
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
