"""Check: discover the rules, run them over the GEMM records, then place each
finding (module glob, source line or config key) and total the step estimate."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
import re
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable, Sequence

from shapelint.errors import ShapelintError
from shapelint.estimate import gemm_time
from shapelint.hardware import Hardware
from shapelint.records import Finding, Gemm, Source, Suggestion
from shapelint.rule_api import RuleContext

_RULE_ATTRS = ("CODE", "NAME", "SEVERITY", "BAD", "GOOD", "check")


@functools.lru_cache(maxsize=None)
def builtin_rules() -> tuple[ModuleType, ...]:
    import shapelint.rules as pkg

    mods = [importlib.import_module(f"{pkg.__name__}.{m.name}") for m in pkgutil.iter_modules(pkg.__path__)]
    return _validated(mods)


def load_rules(rules_dirs: Sequence[str] = ()) -> tuple[ModuleType, ...]:
    mods = list(builtin_rules())
    for folder in rules_dirs:
        path = Path(folder)
        if not path.is_dir():
            raise ShapelintError(f"--rules-dir {folder}: no such directory")
        for file in sorted(path.glob("*.py")):
            if file.name.startswith("_"):
                continue
            spec = importlib.util.spec_from_file_location(f"shapelint_user_rules.{file.stem}", file)
            assert spec and spec.loader
            mod = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(mod)
            except Exception as exc:  # noqa: BLE001
                raise ShapelintError(f"{file}: cannot load rule: {type(exc).__name__}: {exc}") from exc
            mods.append(mod)
    return _validated(mods)


def _validated(mods: list[ModuleType]) -> tuple[ModuleType, ...]:
    by_code: dict[str, str] = {}
    for mod in mods:
        missing = [a for a in _RULE_ATTRS if not hasattr(mod, a)]
        if missing:
            raise ShapelintError(f"rule module {mod.__name__} lacks {', '.join(missing)}")
        if mod.CODE in by_code:
            raise ShapelintError(f"duplicate rule code {mod.CODE}: {by_code[mod.CODE]} and {mod.__name__}")
        by_code[mod.CODE] = mod.__name__
    return tuple(sorted(mods, key=lambda m: m.CODE))


def rule_summary(mod: ModuleType) -> str:
    return (mod.__doc__ or "").strip().splitlines()[0] if mod.__doc__ else mod.NAME


def select_rules(rules: Sequence[ModuleType], select: Sequence[str], ignore: Sequence[str]) -> list[ModuleType]:
    """ruff-style selection: a code or a code prefix (``SL1``), or a rule name."""
    known = {m.CODE for m in rules} | {m.NAME for m in rules}
    for code in [*select, *ignore]:
        if not any(k.startswith(code) for k in known if k.startswith("SL")) and code not in known:
            raise ShapelintError(f"unknown rule code {code!r} (known: {', '.join(sorted(m.CODE for m in rules))})")

    def match(mod: ModuleType, codes: Sequence[str]) -> bool:
        return any(mod.CODE.startswith(c) or mod.NAME == c for c in codes)

    return [m for m in rules if (not select or match(m, select)) and not match(m, ignore)]


def run_rules(rules: Iterable[ModuleType], gemms: Sequence[Gemm], hw: Hardware, ctx: RuleContext) -> list[Finding]:
    out: list[Finding] = []
    for rule in rules:
        out.extend(rule.check(gemms, hw, ctx))
    return out


# -- grouping and locating ------------------------------------------------------

_INDEX = re.compile(r"(?:(?<=\.)|^)\d+(?=\.|$)")


def module_glob(paths: Sequence[str]) -> str:
    """``transformer.h.0.mlp`` + ``transformer.h.1.mlp`` → ``transformer.h.*.mlp``."""
    if len(paths) == 1:
        return paths[0]
    globbed = {_INDEX.sub("*", p) for p in paths}
    return globbed.pop() if len(globbed) == 1 else paths[0]


def group(findings: Sequence[Finding]) -> list[Finding]:
    """One finding per (rule, suggestion, location, message shape): repeated layers
    (every block of a transformer) become one finding listing their modules."""
    groups: dict[Any, list[Finding]] = {}
    for f in findings:
        key = (f.code, f.suggestion, f.source, _INDEX.sub("*", f.module), f.message)
        groups.setdefault(key, []).append(f)
    out = []
    for members in groups.values():
        first = members[0]
        if len(members) == 1:
            out.append(replace(first, modules=(first.module,)))
            continue
        modules = tuple(dict.fromkeys(m.module for m in members))
        est = sum(m.est_ms or 0.0 for m in members)
        after = sum(m.est_ms_after or 0.0 for m in members)
        after_each = tuple(x for m in members for x in m.detail("gemm_ms_after", ()))  # type: ignore[union-attr]
        details = dict(first.details)
        details["gemm_ms_after"] = after_each
        out.append(replace(
            first,
            module=module_glob(modules),
            modules=modules,
            gemms=tuple(i for m in members for i in m.gemms),
            after=tuple(a for m in members for a in m.after),
            est_ms=est,
            est_ms_after=after,
            est_speedup=est / after if after else None,
            details=tuple(details.items()),
        ))
    return out


#: config keys that name a layer size, preferred when several keys share a value
CONFIG_SIZE_KEYS = (
    "vocab_size", "intermediate_size", "hidden_size", "n_embd", "n_inner", "d_model", "d_ff",
    "ffn_dim", "num_attention_heads", "n_head", "num_key_value_heads", "head_dim", "moe_intermediate_size",
)


#: suggestions that change how the model is run, not a size in its config
NOT_CONFIG_KEYS = frozenset({"batch", "dtype", "memory_format", "attention"})


def locate_in_config(f: Finding, config_keys: dict[str, tuple[int, int]], config_file: str) -> Finding:
    """Point a finding at the config key whose value its suggestion changes."""
    s = f.suggestion
    if s is None or not isinstance(s.from_, int) or s.parameter in NOT_CONFIG_KEYS:
        return f
    keys = [k for k, (v, _) in config_keys.items() if v == s.from_]
    if not keys:
        return f
    leaf = {k.rsplit(".", 1)[-1]: k for k in keys}
    key = next((leaf[k] for k in CONFIG_SIZE_KEYS if k in leaf), keys[0])
    line = config_keys[key][1]
    return replace(
        f,
        suggestion=Suggestion(key.rsplit(".", 1)[-1], s.from_, s.to),
        source=Source(config_file, line),
        details=f.details + (("code_parameter", s.parameter),),
    )


@dataclass(frozen=True)
class StepEstimate:
    """GEMM time of one step (forward + backward), before and after every suggestion."""

    ms: float
    ms_after: float

    @property
    def speedup(self) -> float:
        return self.ms / self.ms_after if self.ms_after else 1.0


def step_estimate(gemms: Sequence[Gemm], findings: Sequence[Finding], hw: Hardware) -> StepEstimate:
    """Each GEMM counts once, at the best time any finding covering it promises."""
    before = {g.index: gemm_time(g, hw).seconds * 1e3 for g in gemms}
    best = dict(before)
    for f in findings:
        if f.suppressed:
            continue
        after = f.detail("gemm_ms_after", ())
        for idx, ms in zip(f.gemms, after):  # type: ignore[call-overload]
            if idx in best:
                best[idx] = min(best[idx], float(ms))
    return StepEstimate(sum(before.values()), sum(best.values()))

