"""What one ``shapelint`` run is asked to do: the command line's flags and the
configuration file, read once into a typed :class:`Request` that the run
(:mod:`shapelint.app.run`), the cache (:mod:`shapelint.app.cached`) and the report
(:mod:`shapelint.app.render`) read instead of argparse's namespace."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from shapelint.app.config import Config, load_config
from shapelint.errors import ShapelintError
from shapelint.pipeline.settings import Settings, from_args, merged, or_default


@dataclass(frozen=True)
class Request:
    """One run: its targets, the settings given as flags (``flags``) and by the
    configuration file (``config``), and the options of the run itself (the flags of
    :func:`shapelint.app.parser.build_parser` that no configuration sets)."""

    targets: tuple[str, ...] = ()
    flags: Settings = field(default_factory=Settings)
    config: Config = field(default_factory=Config)
    gpu_profile: str | None = None
    output: str | None = None
    rules_dirs: tuple[str, ...] = ()
    statistics: bool = False
    show_suppressed: bool = False
    plot: str | None = None
    skip_other_files: bool = False
    verify: bool = False
    step: bool = False
    fix: bool = False
    diff: bool = False
    unsafe_fixes: bool = False
    dump_graph: str | None = None
    list_rules: bool = False
    no_cache: bool = False
    cache_dir: str | None = None
    jobs: int | None = None
    hook: bool = False
    verbose: bool = False
    debug: bool = False
    quiet: bool = False
    color: str = "auto"
    show_settings: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Request:
        """The request of a parsed command line; reads the configuration file (the
        one ``--config`` names, else the one found upwards, none with ``--no-config``)."""
        if args.config and args.no_config:
            raise ShapelintError("--config and --no-config exclude each other")
        if args.step and not args.verify:
            raise ShapelintError("--step needs --verify (--verify --step times whole training steps on a CUDA GPU)")
        cfg = load_config(args.config, search=not args.no_config)
        return cls(
            targets=tuple(args.targets), flags=from_args(args), config=cfg, gpu_profile=args.gpu_profile,
            output=args.output, rules_dirs=tuple(args.rules_dir), statistics=args.statistics,
            show_suppressed=args.show_suppressed, plot=args.plot, skip_other_files=args.skip_other_files,
            verify=args.verify, step=args.step, fix=args.fix, diff=args.diff, unsafe_fixes=args.unsafe_fixes,
            dump_graph=args.dump_graph, list_rules=args.list_rules, no_cache=args.no_cache, cache_dir=args.cache_dir,
            jobs=args.jobs, hook=args.hook, verbose=args.verbose, debug=args.debug, **ruff_options(args),
        )

    @property
    def settings(self) -> Settings:
        """Each setting as a flag gives it, else as the configuration file does (None: neither)."""
        return merged(self.flags, self.config)

    @property
    def format(self) -> str:
        """The report format: the flag, else the configuration, else the default."""
        return str(or_default(self.settings.format, "format"))

    @property
    def exit_zero(self) -> bool:
        return bool(or_default(self.settings.exit_zero, "exit-zero"))

    @property
    def gemms(self) -> bool:
        """The JSON report carries the GEMM records (``--no-gemms``, ``gemms = false``: not)."""
        return bool(or_default(self.settings.gemms, "gemms"))


def ruff_options(args: argparse.Namespace) -> dict[str, Any]:
    """The request's fields of :func:`shapelint.app.parser.add_ruff_flags`' flags."""
    return {"quiet": args.quiet, "color": args.color, "show_settings": args.show_settings}


__all__ = ["Request", "ruff_options"]
