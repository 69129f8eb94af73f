"""The package layout is the architecture (issue 25): stage folders in the order data
flows, each importing only its own folder and the folders below it; no import circle;
small modules and simple functions. Every import counts, a lazy one inside a function
included: a lazy import is still a dependency."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "shapelint"
RULES = ROOT / "rules"

#: the layers, lowest first: a module may import its own layer and the layers before it.
#: ``capture`` is below ``load``: a loader builds models under capture's recording fake
#: mode and tells it where the host reads a value; at run time data still flows
#: load → capture → check → price → locate (the pipeline calls them in that order).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("shapelint.errors", "shapelint.files", "shapelint.padding", "shapelint.version"),
    ("shapelint.model",),
    ("shapelint.hardware",),
    ("shapelint.physics",),
    ("shapelint.capture",),
    ("shapelint.load",),
    ("shapelint.check", "shapelint.rules"),
    ("shapelint.price",),
    ("shapelint.locate",),
    ("shapelint.pipeline",),
    ("shapelint.report",),
    ("shapelint.fix",),
    ("shapelint.measure",),
    ("shapelint.app", "shapelint", "shapelint.__main__"),
)
MAX_LINES = 500
MAX_COMPLEXITY = 15
RULE_MAX_LINES = 150


def modules() -> dict[str, Path]:
    """Every module of the package (``rules/`` installed as ``shapelint.rules``)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    for path in sorted(RULES.glob("*.py")):
        out["shapelint.rules" + ("" if path.stem == "__init__" else f".{path.stem}")] = path
    return out


MODULES = modules()


def layer(module: str) -> int:
    """The index of the layer ``module`` belongs to (its longest matching prefix)."""
    best, index = "", -1
    for i, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > len(best):
                best, index = name, i
    assert index >= 0, f"{module} is in no layer: add its folder to LAYERS"
    return index


def imports(path: Path, name: str) -> Iterator[str]:
    """The shapelint modules ``path`` imports (a name imported from a package counts as
    the submodule when there is one)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("shapelint"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            if not base.startswith("shapelint"):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield sub if sub in MODULES else base


def graph() -> dict[str, set[str]]:
    return {name: {m for m in imports(path, name) if m in MODULES and m != name} for name, path in MODULES.items()}


def test_every_import_runs_down_the_layers() -> None:
    upward = [f"{name} (layer {layer(name)}) imports {dep} (layer {layer(dep)})"
              for name, deps in graph().items() for dep in sorted(deps) if layer(dep) > layer(name)]
    assert upward == []


def test_no_import_circle() -> None:
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    assert circles == []


def test_rules_are_one_small_module_each_and_import_no_rule_or_pricer() -> None:
    for name, path in MODULES.items():
        if not name.startswith("shapelint.rules."):
            continue
        assert len(path.read_text().splitlines()) < RULE_MAX_LINES, name
        deps = set(imports(path, name))
        assert not any(d.startswith(("shapelint.rules", "shapelint.price")) for d in deps), (name, deps)
def test_no_module_over_500_lines() -> None:
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_no_function_above_complexity_15() -> None:
    """radon's cyclomatic complexity (every branch, boolean operator and comprehension
    counts) of every function, method and closure."""
    from radon.complexity import cc_visit

    def blocks(items: list) -> Iterator:  # type: ignore[type-arg]
        for item in items:
            yield item
            yield from blocks(getattr(item, "methods", []) + getattr(item, "closures", []))

    complex_ = [f"{name}.{b.name}: {b.complexity}" for name, path in MODULES.items()
                for b in blocks(cc_visit(path.read_text())) if b.complexity > MAX_COMPLEXITY]
    assert complex_ == []
