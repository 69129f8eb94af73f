"""Generate the reference pages of the documentation from the code, so that each
fact lives in one place:

    python -m shapelint.app.docs rules > docs/rules.md         # the rule modules (docstrings, examples)
    python -m shapelint.app.docs settings > docs/settings.md   # SETTINGS and the command's other options

``python -m shapelint.app.docs`` alone prints the rules page, as it always has.
``tests/test_docs.py`` fails when a committed page differs from what this prints.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from shapelint.check.run import builtin_rules
from shapelint.pipeline.settings import CHOICES, METAVARS, SETTINGS, Setting


def render() -> str:
    """docs/rules.md."""
    from shapelint.app.rule_index import META

    rules = builtin_rules()
    out = ["# shapelint rules", "",
           "Generated from the rule modules in `rules/` by `python -m shapelint.app.docs`; do not edit by hand.", "",
           "| code | name | severity | summary |", "|---|---|---|---|"]
    listed: list[Any] = [*rules, *META]
    for r in listed:
        out.append(f"| [{r.code}](#{r.code.lower()}-{r.name}) | `{r.name}` | {r.severity} | {r.summary} |")
    for r in rules:
        doc = r.doc.strip().splitlines()
        out += ["", f"## {r.code} {r.name}", "", doc[0], ""]
        body = "\n".join(doc[1:]).strip().replace("\n## ", "\n### ")
        out += [body.replace("## ", "### ", 1) if body.startswith("## ") else body, ""]
        out += ["### Examples the tests run", "", "| | model | inputs | dtype | GPU | expected suggestion |",
                "|---|---|---|---|---|---|"]
        for kind, examples in (("flagged", r.bad), ("clean", r.good)):
            for e in examples:
                expect = ", ".join(f"{k}={v}" for k, v in e.expect.items()) if e.expect else ""
                model = e.model.replace("|", "\\|")
                layout = "".join(f", --{flag} {n}" for flag, n in (("tp", e.tp), ("fsdp", e.fsdp)) if n > 1)
                out.append(f"| {kind} | `{model}` | `{e.inputs}` | {e.dtype} | {e.gpu}{layout} | {expect} |")
    for m in META:  # the application's own checks: no GEMM examples, off unless selected
        doc = m.doc.strip().splitlines()
        out += ["", f"## {m.code} {m.name}", "", doc[0], "", "\n".join(doc[1:]).strip().replace("## ", "### "), ""]
    return "\n".join(out) + "\n"


#: what each kind of setting accepts, in a configuration file (a flag's text is converted first)
KIND_TYPES: dict[str, str] = {
    "gpu": "a GPU profile name",
    "dtype": "one of " + ", ".join(f"`{c}`" for c in CHOICES["dtype"]),
    "fsdp-dtype": "one of " + ", ".join(f"`{c}`" for c in CHOICES["fsdp-dtype"]),
    "format": "one of " + ", ".join(f"`{c}`" for c in CHOICES["format"]),
    "optimizer": "one of " + ", ".join(f"`{c}`" for c in CHOICES["optimizer"]),
    "positive": "a positive integer",
    "number": "a positive number",
    "fraction": "a number, 0 ≤ x < 1",
    "bool": "`true` or `false`",
    "codes": "rule codes, code prefixes or rule names: a list, or one comma-separated string",
    "per-module": "a mapping: module-path glob → rule codes",
    "modules": "a list of dotted package names",
    "paths": "a list of files, directories and globs",
}

def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _flag(s: Setting) -> str:
    if not s.flag:
        return "(configuration only)"
    if s.kind == "bool":
        return f"`--{s.key}` / `--no-{s.key}`"
    if s.kind in CHOICES:
        return f"`--{s.key} {{{','.join(CHOICES[s.kind])}}}`"
    return f"`--{s.key} {METAVARS.get(s.kind, 'N')}`"


def _default(s: Setting) -> str:
    if s.default is None:
        return "decided at run time"
    if isinstance(s.default, bool):
        return f"`{str(s.default).lower()}`"
    if s.default in ([], {}):
        return "none"
    return f"`{s.default}`"


def _option(action: argparse.Action) -> str:
    names = []
    for opt in action.option_strings:
        takes = action.nargs != 0 and not isinstance(action, argparse.BooleanOptionalAction)
        names.append(f"`{opt} {action.metavar}`" if takes and action.metavar else f"`{opt}`")
    return ", ".join(names)


def _options(parser: argparse.ArgumentParser, skip: Callable[[argparse.Action], bool]) -> list[str]:
    rows = ["| option | what it does |", "|---|---|"]
    for action in parser._actions:
        if not action.option_strings or action.help == argparse.SUPPRESS or skip(action):
            continue
        text = "show this help and exit" if isinstance(action, argparse._HelpAction) else (action.help or "")
        if isinstance(action, argparse._VersionAction):
            text = "print the version and exit"
        rows.append(f"| {_option(action)} | {_cell(text)} |")
    return rows


def render_settings() -> str:
    """docs/settings.md: every setting of ``SETTINGS``, then the command's options that
    are not settings (from the argument parsers the command itself uses)."""
    from shapelint.app.parser import build_parser, calibrate_parser

    out = ["# Settings and options reference", "",
           "Generated from `SETTINGS` and the command's argument parser by `python -m shapelint.app.docs settings`; "
           "do not edit by hand.", "",
           "## Settings", "",
           "Each setting is read from the command line, from `[tool.shapelint]` in `pyproject.toml` and from "
           "`.shapelint.yaml` (keys may be written with `-` or `_`). A flag wins over a target's own setting, "
           "which wins over the configuration file, which wins over the default: see "
           "[Configuration](configuration.md).", "",
           "| key | flag | type | default | what it does |", "|---|---|---|---|---|"]
    for s in SETTINGS:
        out.append(f"| `{s.key}` | {_flag(s)} | {KIND_TYPES[s.kind]} | {_default(s)} | {_cell(s.help)} |")
    attrs = {s.attr for s in SETTINGS if s.flag}
    out += ["", "## Other options of `shapelint`", "",
            "Options of one run, with no configuration key.", ""]
    out += _options(build_parser(), lambda a: a.dest in attrs)
    calibrate = calibrate_parser()
    out += ["", "## `shapelint calibrate`", "", _cell(calibrate.description or ""), ""]
    out += _options(calibrate, lambda a: False)
    out += ["", "## `shapelint clean`", "",
            "Deletes the result cache (see [The result cache](cache.md)); `--cache-dir DIR` deletes another "
            "cache folder, `--config FILE` names the configuration file that marks the project root.", ""]
    return "\n".join(out)


PAGES: dict[str, Callable[[], str]] = {"rules": render, "settings": render_settings}


def main(argv: list[str]) -> int:
    page = argv[0] if argv else "rules"
    if page not in PAGES or len(argv) > 1:
        sys.stderr.write(f"usage: python -m shapelint.app.docs [{'|'.join(PAGES)}]\n")
        return 2
    sys.stdout.write(PAGES[page]())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
