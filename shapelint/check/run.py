"""Check: discover the rules (``rules/`` and ``--rules-dir``), select them, and run
them over the captured GEMM records. Each rule returns proposals; pricing them is
``shapelint.price``'s job."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Iterable, Sequence
from pathlib import Path

from shapelint.check import selection
from shapelint.check.rule_api import Rule, RuleContext
from shapelint.errors import ShapelintError, one_line
from shapelint.hardware import Hardware
from shapelint.load.usercode import import_user_file, run_user_rule
from shapelint.model.records import Gemm, Proposal

#: the package name ``--rules-dir`` modules are imported under (their rules run as user code)
USER_RULES = "shapelint_user_rules"


@functools.cache
def builtin_rules() -> tuple[Rule, ...]:
    import shapelint.rules as pkg

    mods = [importlib.import_module(f"{pkg.__name__}.{m.name}") for m in pkgutil.iter_modules(pkg.__path__)]
    return _validated([Rule.from_module(m) for m in mods])


def load_rules(rules_dirs: Sequence[str] = ()) -> tuple[Rule, ...]:
    rules = list(builtin_rules())
    for folder in rules_dirs:
        path = Path(folder)
        if not path.is_dir():
            raise ShapelintError(f"--rules-dir {folder}: no such directory")
        for file in sorted(path.glob("*.py")):
            if file.name.startswith("_"):
                continue
            # a rule module is user code: behind the one boundary (sys.exit, prints, bytecode)
            mod = import_user_file(file, "importing it", name=f"{USER_RULES}.{file.stem}")
            rules.append(Rule.from_module(mod))
    return _validated(rules)


def _validated(rules: list[Rule]) -> tuple[Rule, ...]:
    by_code: dict[str, str] = {}
    for rule in rules:
        if rule.code in by_code:
            raise ShapelintError(f"duplicate rule code {rule.code}: {by_code[rule.code]} and {rule.module.__name__}")
        by_code[rule.code] = rule.module.__name__
    return tuple(sorted(rules, key=lambda r: r.code))


def select_rules(rules: Sequence[Rule], select: Sequence[str], ignore: Sequence[str]) -> list[Rule]:
    """ruff-style selection: a code or a code prefix (``SL1``), or a rule name
    (:func:`shapelint.check.selection.select`, the one the command uses)."""
    return selection.select(rules, select=select or None, ignore=ignore)


def run_rules(rules: Iterable[Rule], gemms: Sequence[Gemm], hw: Hardware, ctx: RuleContext) -> list[Proposal]:
    out: list[Proposal] = []
    for rule in rules:
        if rule.module.__name__.startswith(f"{USER_RULES}."):
            out.extend(run_user_rule(rule.check, rule.module.__file__ or rule.module.__name__, rule.code,
                                     gemms, hw, ctx))
            continue
        try:
            proposals = list(rule.check(gemms, hw, ctx))
        except ShapelintError:
            raise
        except Exception as exc:
            raise ShapelintError(f"rule {rule.code} ({rule.module.__name__}) failed: {one_line(exc)}") from exc
        out.extend(proposals)
    return out
