"""Which rules a run selects, as ruff selects them: ``select`` replaces the default set
(every rule but the opt-in ones), ``extend-select`` adds to whichever set is in force,
``ignore`` and ``extend-ignore`` take away (an ignore wins over a select).

A selector is a rule code (``SL101``), a code prefix (``SL1``) or a rule name
(``misaligned-leading-dim``). An opt-in rule (``SL900``, unused suppressions) is
selected only by its code, its name or a prefix longer than ``SL``: ``select = ["SL"]``
means "every rule" as it always did, not "and report my ignore comments".

This module imports nothing heavy: ``--list-rules`` and ``--show-settings`` select
rules without importing them (:mod:`shapelint.app.rule_index`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from shapelint.errors import ShapelintError

#: the prefix every built-in code starts with; selecting it alone selects no opt-in rule
FAMILY = "SL"


class Named(Protocol):
    """What selection reads of a rule."""

    @property
    def code(self) -> str: ...

    @property
    def name(self) -> str: ...


R = TypeVar("R", bound=Named)


def check_codes(rules: Sequence[Named], codes: Sequence[str]) -> None:
    """An unknown code, prefix or name: one error listing the known codes."""
    known = {r.code for r in rules} | {r.name for r in rules}
    for code in codes:
        if code not in known and not any(k.startswith(code) for k in known if k.startswith(FAMILY)):
            raise ShapelintError(f"unknown rule code {code!r} (known: {', '.join(sorted(r.code for r in rules))})")


def matches(rule: Named, selectors: Sequence[str], opt_in: bool = False) -> bool:
    """``rule`` is named by one of ``selectors`` (for an opt-in rule: not by ``SL`` alone)."""
    return any(rule.name == s or (rule.code.startswith(s) and not (opt_in and len(s) <= len(FAMILY)))
               for s in selectors)


def select(rules: Sequence[R], *, select: Sequence[str] | None = None, ignore: Sequence[str] = (),
           extend_select: Sequence[str] = (), extend_ignore: Sequence[str] = (),
           opt_in: frozenset[str] = frozenset()) -> list[R]:
    """The selected rules, in the order given (``opt_in``: the codes off by default)."""
    check_codes(rules, [*(select or ()), *ignore, *extend_select, *extend_ignore])
    removed = [*ignore, *extend_ignore]

    def chosen(rule: R) -> bool:
        off = rule.code in opt_in
        base = matches(rule, select, off) if select else not off
        return (base or matches(rule, extend_select, off)) and not matches(rule, removed)

    return [r for r in rules if chosen(r)]


__all__ = ["FAMILY", "check_codes", "matches", "select"]
