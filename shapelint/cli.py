"""The ``shapelint`` command. Exit codes: 0 clean, 1 findings, 2 usage or input error."""

from __future__ import annotations

import argparse
import os
import sys
from typing import IO, NoReturn, Sequence

from shapelint import __version__
from shapelint.errors import ShapelintError

FORMATS = ("text", "json")


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


def _codes(text: str) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="shapelint",
        description="Find the layer shapes that waste your GPU: every GEMM of the forward and backward "
        "pass, traced on fake tensors, checked against a GPU profile.",
    )
    p.add_argument("targets", nargs="*", metavar="TARGET",
                   help="model.py (defining shapelint_model()), a Hugging Face config.json, a shapelint "
                        "YAML, or a directory of configs")
    p.add_argument("--gpu", metavar="NAME", help="GPU profile (default: the local CUDA GPU, else h100)")
    p.add_argument("--gpu-profile", metavar="FILE", help="a GPU profile YAML (e.g. from `shapelint calibrate`)")
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32", "tf32"),
                   help="compute precision of the matmuls, as autocast runs them (default bf16)")
    p.add_argument("--inference", action="store_true", help="forward only (default: forward and backward)")
    p.add_argument("--batch", type=_positive, help="batch size for config targets (default 8)")
    p.add_argument("--seq", type=_positive, help="sequence length for config targets (default 1024)")
    p.add_argument("--tp", type=_positive, default=1, help="tensor-parallel degree (Megatron-style sharding)")
    p.add_argument("--format", choices=FORMATS, default="text", help="output format (default text)")
    p.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE instead of stdout")
    p.add_argument("--select", type=_codes, default=[], metavar="CODES", help="only these rule codes/prefixes")
    p.add_argument("--ignore", type=_codes, default=[], metavar="CODES", help="skip these rule codes/prefixes")
    p.add_argument("--min-speedup", type=float, default=None, metavar="X",
                   help="report findings whose estimated speedup is at least X (default 1.0)")
    p.add_argument("--rules-dir", action="append", default=[], metavar="DIR", help="load extra rule modules")
    p.add_argument("--exit-zero", action="store_true", help="exit 0 even with findings")
    p.add_argument("--dump-graph", metavar="FILE", help="write the joint forward+backward FX graph's code")
    p.add_argument("--list-rules", action="store_true", help="list the rules and exit")
    p.add_argument("--verbose", "-v", action="store_true", help="add the full GEMM table")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version=f"shapelint {__version__}")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
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

    rules = engine.select_rules(engine.load_rules(args.rules_dir), args.select, args.ignore)
    if args.list_rules:
        for mod in rules:
            print(f"{mod.CODE}  {mod.NAME:32} {engine.rule_summary(mod)}")
        return 0
    if not args.targets:
        raise ShapelintError("no target given (try: shapelint examples/mlp.py)")
    # None: each target's own `gpu` setting (YAML), else the local GPU, else h100
    hw = hardware.load_profile_file(args.gpu_profile) if args.gpu_profile else (
        hardware.resolve(args.gpu) if args.gpu else None)

    from shapelint.lint import Options, lint_target
    from shapelint.load import discover

    opts = Options(
        dtype=args.dtype,
        training=False if args.inference else None,
        batch=args.batch,
        seq=args.seq,
        tp=args.tp,
        dump_graph=args.dump_graph,
        min_speedup=args.min_speedup if args.min_speedup is not None else 1.0,
    )
    results = [lint_target(path, opts, hw, rules) for path in discover(args.targets)]
    _write(results, args)
    findings = sum(1 for r in results for f in r.findings if not f.suppressed)
    return 1 if findings and not args.exit_zero else 0


def _write(results: list, args: argparse.Namespace) -> None:
    out: IO[str]
    if args.output:
        try:
            out = open(args.output, "w", encoding="utf-8")
        except OSError as exc:
            raise ShapelintError(f"--output {args.output}: {exc.strerror}") from exc
    else:
        out = sys.stdout
    try:
        if args.format == "json":
            from shapelint.report import json_report

            out.write(json_report.render(results))
        else:
            from shapelint.report import text

            color = None if out is sys.stdout and not os.environ.get("NO_COLOR") else False
            text.render(results, out, verbose=args.verbose, color=color)
    finally:
        if out is not sys.stdout:
            out.close()


if __name__ == "__main__":
    sys.exit(main())
