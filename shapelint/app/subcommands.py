"""The commands that lint nothing: ``shapelint calibrate`` (measure the local GPU into a
profile for ``--gpu-profile``), ``shapelint clean`` (delete the result cache) and
``shapelint rule`` (a rule's documentation, read without importing torch)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from shapelint.app import rule_index
from shapelint.app.parser import calibrate_parser, clean_parser, rule_parser
from shapelint.errors import ShapelintError


def calibrate(argv: Sequence[str]) -> int:
    """``shapelint calibrate``: write the local CUDA GPU's profile."""
    args = calibrate_parser().parse_args(argv)
    from shapelint.measure import calibrate as measure

    which = "skip" if args.no_collectives else "only" if args.collectives_only else "measure"
    done = measure.run(args.output, collectives=which, world_size=args.world_size)
    hw = done.hardware
    measured = f", collectives on {done.collectives.world} GPUs" if done.collectives is not None else ""
    print(f"wrote {args.output}: {hw.name}, bf16 {hw.peak_tflops('bf16'):.0f} TFLOP/s, "
          f"{hw.bandwidth / 1e12:.2f} TB/s{measured} (use it with --gpu-profile {args.output})")
    return 0


def clean(argv: Sequence[str]) -> int:
    """``shapelint clean``: delete the cache folder, only if shapelint made it, and in
    it only the files shapelint wrote (what else it holds stays, and is named)."""
    args = clean_parser().parse_args(argv)
    from shapelint.app import cache, cached, project
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
    stays = cache.Store(folder).clear()
    if not stays:
        print(f"removed {folder}")
        return 0
    shown = ", ".join(str(p) for p in stays[:3]) + (f" and {len(stays) - 3} more" if len(stays) > 3 else "")
    print(f"removed shapelint's files from {folder}; kept what shapelint did not make: {shown}")
    return 0


def rule(argv: Sequence[str]) -> int:
    """``shapelint rule CODE`` / ``shapelint rule --all``: the rule's documentation, as
    ``ruff rule`` prints it (a heading, then the rule module's docstring)."""


    args = rule_parser().parse_args(argv)
    if bool(args.code) == args.all:
        raise ShapelintError("shapelint rule: give a rule code (shapelint rule SL501) or --all")
    every = rule_index.rules(args.rules_dir)
    if args.all:
        chosen = every
    else:
        found = rule_index.find(every, args.code)
        if found is None:
            raise ShapelintError(f"unknown rule {args.code!r} (known: {', '.join(r.code for r in every)})")
        chosen = [found]
    if args.output_format == "json":
        docs = [{"code": r.code, "name": r.name, "severity": r.severity, "summary": r.summary,
                 "explanation": _body(r.doc), "preview": False, "opt_in": r.opt_in} for r in chosen]
        sys.stdout.write(json.dumps(docs if args.all else docs[0], indent=2) + "\n")
        return 0
    sys.stdout.write("\n\n".join(page(r) for r in chosen))
    return 0


def page(r: rule_index.RuleInfo) -> str:
    """``# vocab-padding (SL501)``, the severity, then the documentation."""
    opt = "; off unless selected (--extend-select " + r.code + ")" if r.opt_in else ""
    return f"# {r.name} ({r.code})\n\nSeverity: {r.severity}{opt}\n\n{r.summary}\n\n{_body(r.doc)}\n"


def _body(doc: str) -> str:
    """The docstring below its summary line, dedented."""
    import inspect

    lines = inspect.cleandoc(doc).splitlines()
    return "\n".join(lines[1:]).strip()


__all__ = ["calibrate", "clean", "page", "rule"]
