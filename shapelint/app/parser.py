"""The command line's grammar: the parsers of ``shapelint``, ``shapelint calibrate``
and ``shapelint clean``, and the value types of their flags.

Every setting a configuration file can also set gets its flag from ``SETTINGS``
(:func:`shapelint.pipeline.settings.add_flags`); the flags here belong to one run
only. A usage error is one ``shapelint: error:`` line and exit 2, like every other
error, not argparse's usage text (:class:`Parser`).
"""

from __future__ import annotations

import argparse
import re
from typing import NoReturn

from shapelint.errors import ShapelintError
from shapelint.pipeline.settings import add_flags
from shapelint.version import __version__


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are :class:`ShapelintError`."""

    def error(self, message: str) -> NoReturn:
        raise ShapelintError(message)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``shapelint [TARGET ...]``."""
    p = Parser(
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
    p.add_argument("--jobs", "-j", type=positive_count, metavar="N",
                   help="lint up to N targets at once, in worker processes (default: the available cores)")
    p.add_argument("--hook", action="store_true",
                   help="pre-commit mode: the TARGETs are changed files; lint the configured targets whose "
                        "recorded dependencies include one of them (or never linted here), and the changed "
                        "files that are targets")
    p.add_argument("--verbose", "-v", action="store_true", help="add the full GEMM table")
    p.add_argument("--timeout", type=seconds, metavar="SECONDS",
                   help="stop the lint after SECONDS and exit 2 (runs it in a child process)")
    p.add_argument("--max-memory", type=memory_size, metavar="SIZE",
                   help="cap the lint's memory (address space) at SIZE, e.g. 8G (runs it in a child process)")
    p.add_argument("--no-isolate", action="store_true",
                   help="lint in this process, not in a forked child (the default for the shapelint command on "
                        "Linux: it turns os._exit, crashes and runaway memory in user code into one error line)")
    p.add_argument("--debug", action="store_true", help="show tracebacks (and lint in this process)")
    p.add_argument("--version", action="version", version=f"shapelint {__version__}")
    add_ruff_flags(p)
    return p


def add_ruff_flags(p: argparse.ArgumentParser) -> None:
    """The flags a ruff user reaches for, where they mean what they mean in ruff
    (``--output-format`` is ``--format``: both stay, the formats are a public contract)."""
    from shapelint.pipeline.settings import FORMATS

    p.add_argument("--output-format", dest="format", choices=FORMATS, default=None,
                   help="the same as --format (ruff's spelling)")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="print the findings and errors only: no per-target header or summary, no --fix notes")
    p.add_argument("--color", choices=COLOR_CHOICES, default="auto",
                   help="colour the text report: auto (on a terminal, unless NO_COLOR is set), always or never")
    p.add_argument("--show-settings", action="store_true",
                   help="print the settings this run would use (and where each comes from), the configuration "
                        "file and the selected rules, and exit")


#: ``--color``'s values, as ruff spells them
COLOR_CHOICES = ("auto", "always", "never")


def rule_parser() -> argparse.ArgumentParser:
    """The parser of ``shapelint rule``."""
    p = Parser(prog="shapelint rule",
               description="Print a rule's documentation (what it finds, why it is slow, with the measured "
                           "number, an example and the fix), as `ruff rule` does.")
    p.add_argument("code", nargs="?", metavar="CODE", help="a rule code (SL501) or name (vocab-padding)")
    p.add_argument("--all", action="store_true", help="every rule's documentation, one after the other")
    p.add_argument("--output-format", choices=("text", "json"), default="text",
                   help="text (the default) or json (code, name, severity, summary, explanation)")
    p.add_argument("--rules-dir", action="append", default=[], metavar="DIR", help="load extra rule modules")
    return p


def calibrate_parser() -> argparse.ArgumentParser:
    """The parser of ``shapelint calibrate``."""
    p = Parser(prog="shapelint calibrate",
               description="Measure the local CUDA GPU (GEMM peaks per dtype, copy bandwidth, misalignment "
                           "penalties, a wave sweep, the training-step table) and, on a machine with 2 GPUs or "
                           "more, the NCCL collectives between them (all-reduce, all-gather, reduce-scatter) and "
                           "how fast this host runs the DDP, FSDP2 and DTensor engines' host work, and write a GPU "
                           "profile for --gpu-profile.")
    p.add_argument("--output", "-o", metavar="FILE", default="gpu-profile.yaml",
                   help="where to write the profile (default gpu-profile.yaml)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--no-collectives", action="store_true",
                       help="measure one GPU only, not the collectives between GPUs nor the engines' host speed")
    which.add_argument("--collectives-only", action="store_true",
                       help="measure only the collectives and the engines' host speed, into the profile FILE of "
                            "--output when it exists (its other values kept), else into the closest shipped profile")
    p.add_argument("--world-size", type=positive_count, metavar="N",
                   help="measure the collectives and the engines on N GPUs of this machine (default: every GPU "
                        "visible)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def clean_parser() -> argparse.ArgumentParser:
    """The parser of ``shapelint clean``."""
    p = Parser(prog="shapelint clean",
               description="Delete the result cache (.shapelint_cache at the project root): only a folder shapelint "
                           "made, and in it only the files shapelint wrote.")
    p.add_argument("--cache-dir", metavar="DIR", help="the cache folder to delete instead")
    p.add_argument("--config", metavar="FILE", help="the configuration file that marks the project root")
    return p


# -- value types ---------------------------------------------------------------------


def positive_count(text: str) -> int:
    """``--jobs N``: a positive integer."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def seconds(text: str) -> float:
    """``--timeout SECONDS``: a positive, finite number."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


#: binary units of a memory size
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def memory_size(text: str) -> int:
    """``8G``, ``512M``, ``1073741824``: a memory size (binary units)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if m is None or int(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive size such as 8G or 512M, got {text!r}")
    return int(m.group(1)) * UNITS[m.group(2).upper()]


__all__ = ["COLOR_CHOICES", "Parser", "add_ruff_flags", "build_parser", "calibrate_parser", "clean_parser", "memory_size",
           "positive_count", "rule_parser", "seconds"]
