"""The rules as the commands that lint nothing need them (``--list-rules``, ``shapelint
rule``, ``--show-settings``): each rule module's ``CODE``, ``NAME``, ``SEVERITY`` and
docstring, read from its source without importing it.

Importing a rule module imports torch (2-3 s); reading four constants from its syntax
tree takes milliseconds, so these commands answer as fast as ``--help``. The rule
module stays the one place its code, name and documentation live: a test checks that
this index agrees with the rules :mod:`shapelint.check.run` imports. A rule whose
constants are not plain string literals (a ``--rules-dir`` module may compute them) is
read by importing the rules instead (:func:`rules`).

Besides the rule modules, the index holds the checks the application makes itself
(:data:`META`): ``SL900`` (unused suppression comments), off unless selected by its code.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RuleInfo:
    """One rule's code, name, severity and documentation (its module's docstring);
    ``opt_in``: off unless ``select``/``extend-select`` names it (by its code or name,
    or a prefix longer than ``SL``)."""

    code: str
    name: str
    severity: str
    doc: str
    opt_in: bool = False

    @property
    def summary(self) -> str:
        return self.doc.strip().splitlines()[0] if self.doc.strip() else self.name


UNUSED_SUPPRESSION = RuleInfo(
    "SL900", "unused-suppression", "warning",
    """A `# shapelint: ignore[...]` comment suppresses nothing.

## What it does
Reports each `# shapelint: ignore` comment in a linted file (the target, and the files
its findings point at) that no finding of this run used, and each code in one whose rule
found nothing on that line. Off by default: enable it with `--extend-select SL900` (or
`extend-select = ["SL900"]` in the configuration), as ruff's `RUF100` is.

## Why is this bad?
A suppression outlives the reason it was written: after the layer was padded, or the
rule changed, the comment hides nothing today but will hide the next real finding on
that line. Only the rules that ran are judged: a code of a rule that was not selected is
left alone.

## Example
```python
self.proj = nn.Linear(768, 3072)  # shapelint: ignore[SL101]
```

## Use instead
```python
self.proj = nn.Linear(768, 3072)
```
""", opt_in=True)

#: the checks the application makes itself, not rule modules over GEMM records
META: tuple[RuleInfo, ...] = (UNUSED_SUPPRESSION,)

#: the module-level constants a rule's index entry is read from
_CONSTANTS = ("CODE", "NAME", "SEVERITY")


def rules_folder() -> Path:
    """The folder of the installed ``shapelint.rules`` package (found, not imported)."""
    spec = importlib.util.find_spec("shapelint.rules")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("shapelint.rules is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def read_module(path: Path) -> RuleInfo | None:
    """A rule module's entry from its syntax tree; None when a constant is not a string
    literal (or the file is no rule module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: dict[str, str] = {}
    for node in tree.body:
        target, value = _assignment(node)
        if target in _CONSTANTS and isinstance(value, ast.Constant) and isinstance(value.value, str):
            found[target] = value.value
    if set(found) != set(_CONSTANTS):
        return None
    return RuleInfo(found["CODE"], found["NAME"], found["SEVERITY"], ast.get_docstring(tree, clean=False) or "")


def _assignment(node: ast.stmt) -> tuple[str | None, ast.expr | None]:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id, node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id, node.value
    return None, None


def builtin() -> list[RuleInfo]:
    """The shipped rules, by code, read from their sources."""
    out = []
    for path in sorted(rules_folder().glob("*.py")):
        if path.name.startswith("_"):
            continue
        info = read_module(path)
        if info is None:
            raise RuntimeError(f"{path}: CODE, NAME and SEVERITY must be string literals")
        out.append(info)
    return sorted(out, key=lambda r: r.code)


def rules(rules_dirs: Sequence[str] = ()) -> list[RuleInfo]:
    """Every rule a run could select, by code, and the :data:`META` checks; the rules of
    ``rules_dirs`` are imported (user code, behind its boundary) when given."""
    if not rules_dirs:
        found = builtin()
    else:
        from shapelint.check import run as check

        found = [RuleInfo(r.code, r.name, r.severity, r.doc) for r in check.load_rules(rules_dirs)]
    return sorted([*found, *META], key=lambda r: r.code)


def find(rules_list: Sequence[RuleInfo], wanted: str) -> RuleInfo | None:
    """The rule named ``wanted`` (its code, any case, or its name)."""
    return next((r for r in rules_list if wanted.upper() == r.code or wanted == r.name), None)


__all__ = ["META", "UNUSED_SUPPRESSION", "RuleInfo", "builtin", "find", "read_module", "rules", "rules_folder"]
