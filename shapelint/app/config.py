"""Project configuration: ``[tool.shapelint]`` in ``pyproject.toml`` or ``.shapelint.yaml``.

Where it comes from
- ``--config FILE`` names the file (``pyproject.toml``: its ``[tool.shapelint]`` table;
  any other ``.toml``: its ``[tool.shapelint]`` table if it has one, else its top
  level; ``.yaml``/``.yml``/``.json``: the top-level mapping);
- otherwise shapelint searches from the current directory upwards; the first
  directory holding a ``pyproject.toml`` with a ``[tool.shapelint]`` table or a
  ``.shapelint.yaml`` (``.shapelint.yml``) wins. When one directory has both,
  ``pyproject.toml`` is used and a note on stderr says the YAML file was ignored.
  A ``pyproject.toml`` without a ``[tool.shapelint]`` table does not stop the search.
- ``--no-config`` skips all of this.

Precedence: a command-line flag > the target's own setting (a shapelint YAML target's
``gpu``, ``dtype``, ``batch``, ``seq``, ``tp``, ``training``) > this file > the
built-in default.

Keys (``min-speedup`` may also be spelled ``min_speedup``, and so on)::

    gpu = "h100"                 # GPU profile name
    dtype = "bf16"               # bf16 | fp16 | fp32 | tf32
    batch = 8                    # positive integers
    seq = 1024
    tp = 1
    select = ["SL1"]             # rule codes, prefixes or names
    ignore = ["SL102"]
    min-speedup = 1.05           # > 0
    min-loss = 0.05              # 0 <= x < 1
    min-step-share = 0.01        # 0 <= x < 1
    format = "text"              # text | json | sarif | github
    exit-zero = false
    inference = false
    allow-builders = ["mypkg.models"]  # packages a YAML target's model: may name

    [tool.shapelint.per-module-ignores]
    "lm_head" = ["SL101"]        # fnmatch glob on the finding's module path(s)
    "transformer.h.*.attn" = ["SL1"]

Every error is a :class:`ShapelintError` naming the file (and, for TOML/YAML/JSON
syntax errors, the line): ``pyproject.toml:12: TOML syntax error: ...``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from shapelint.errors import ShapelintError
from shapelint.files import parse_json, parse_toml, parse_yaml, read_text
from shapelint.pipeline.settings import (
    BY_KEY,
    Settings,
    canonical,
    describe,
    validate,
)

YAML_NAMES = (".shapelint.yaml", ".shapelint.yml")
PYPROJECT = "pyproject.toml"


@dataclass(frozen=True)
class Config(Settings):
    """Settings read from a configuration file (None: the file does not set it)."""

    file: str | None = None
    #: where each key was set (for error messages): key -> line, when known
    lines: dict[str, int] = field(default_factory=dict)

    def where(self, key: str) -> str:
        """``file:line`` (or ``file``) of a key, for messages."""
        line = self.lines.get(key)
        return f"{self.file}:{line}" if line else str(self.file)


# -- finding the file -----------------------------------------------------------


def _display(path: Path) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel


def _mentions_table(pyproject: Path) -> bool:
    """Cheap test before parsing: unrelated (even broken) pyproject files are skipped."""
    try:
        text = pyproject.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return re.search(r"^\s*\[\s*tool\s*\.\s*shapelint\s*[\].]", text, re.MULTILINE) is not None or \
        re.search(r"^\s*tool\s*\.\s*shapelint\s*[.=]", text, re.MULTILINE) is not None


def find_config(start: Path | None = None) -> Path | None:
    """The configuration file for ``start`` (default: the current directory)."""
    folder = (start or Path.cwd()).resolve()
    for d in (folder, *folder.parents):
        pyproject = d / PYPROJECT
        yaml_file = next((d / n for n in YAML_NAMES if (d / n).is_file()), None)
        has_pyproject = pyproject.is_file() and _mentions_table(pyproject)
        if has_pyproject and yaml_file is not None:
            print(f"shapelint: note: using {_display(pyproject)} [tool.shapelint]; "
                  f"ignoring {_display(yaml_file)}", file=sys.stderr)
        if has_pyproject:
            return pyproject
        if yaml_file is not None:
            return yaml_file
    return None


# -- reading --------------------------------------------------------------------


def _toml_key_lines(text: str) -> dict[str, int]:
    """key -> line of ``key = ...`` inside the ``[tool.shapelint]`` table (best effort)."""
    out: dict[str, int] = {}
    inside = False
    for no, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if s.startswith("["):
            inside = re.match(r"\[\s*tool\s*\.\s*shapelint\s*\]", s) is not None
            if re.match(r"\[\s*tool\s*\.\s*shapelint\s*\.\s*\"?per[-_]module[-_]ignores", s):
                out.setdefault("per-module-ignores", no)
            continue
        m = re.match(r'^"?([A-Za-z0-9_-]+)"?\s*=', s)
        if inside and m:
            out.setdefault(canonical(m.group(1)), no)
    return out


def _yaml_key_lines(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for no, line in enumerate(text.splitlines(), start=1):
        m = re.match(r'^["\']?([A-Za-z0-9_-]+)["\']?\s*:', line)
        if m:
            out.setdefault(canonical(m.group(1)), no)
    return out


def read_config(path: Path) -> Config:
    """Read and validate one configuration file (any of the kinds above)."""
    where = _display(path)
    if not path.is_file():
        raise ShapelintError(f"--config {where}: no such file")
    text = read_text(path, _display(path))
    if path.suffix == ".toml":
        doc = parse_toml(text, where)
        tool = doc.get("tool")
        table = tool.get("shapelint") if isinstance(tool, dict) else None
        if table is None:
            if path.name == PYPROJECT:
                raise ShapelintError(f"{where}: no [tool.shapelint] table")
            table = doc
        lines = _toml_key_lines(text)
        if table is doc:
            lines = {**_toml_key_lines("[tool.shapelint]\n" + text)}
            lines = {k: v - 1 for k, v in lines.items()}
    elif path.suffix in (".yaml", ".yml"):
        table = parse_yaml(text, where)
        if table is None:
            table = {}
        lines = _yaml_key_lines(text)
    elif path.suffix == ".json":
        table = parse_json(text, where)
        lines = {}
    else:
        raise ShapelintError(f"{where}: a configuration file must be .toml, .yaml, .yml or .json")
    if not isinstance(table, dict):
        raise ShapelintError(f"{where}: expected a mapping of settings, got {describe(table)}")
    return validate_table(table, where, lines)


def load_config(explicit: str | None = None, *, search: bool = True, start: Path | None = None) -> Config:
    """The explicit file, else the one found from ``start`` upwards, else defaults."""
    if explicit is not None:
        return read_config(Path(explicit))
    if not search:
        return Config()
    found = find_config(start)
    return read_config(found) if found is not None else Config()


# -- validating -----------------------------------------------------------------


def validate_table(table: dict[Any, Any], where: str, lines: dict[str, int] | None = None) -> Config:
    """Check every key and value of a settings mapping; raise on the first problem."""
    lines = dict(lines or {})
    cfg = Config(file=where, lines=lines)
    values: dict[str, Any] = {}
    for raw_key, value in table.items():
        if not isinstance(raw_key, str):
            raise ShapelintError(f"{where}: setting names must be strings, got {describe(raw_key)}")
        key = canonical(raw_key)
        if key not in BY_KEY:
            raise ShapelintError(f"{cfg.where(key)}: unknown key {raw_key!r} (known: {', '.join(BY_KEY)})")
        setting = BY_KEY[key]
        if setting.attr in values:
            raise ShapelintError(f"{cfg.where(key)}: {key} is set twice")
        values[setting.attr] = validate(setting, value, f"{cfg.where(key)}: {key}")
    return Config(file=where, lines=lines, **values)


# -- using it -------------------------------------------------------------------


def _matches(code: str, name: str, codes: Iterable[str]) -> bool:
    return any(code.startswith(c) or name == c for c in codes)


def module_ignored(finding: Any, per_module_ignores: dict[str, list[str]] | None) -> bool:
    """True when a ``per-module-ignores`` glob covers this finding for its rule: the
    glob matches the finding's module (as reported, e.g. ``h.*.mlp``) or every
    module the finding groups."""
    modules: Sequence[str] = finding.modules or (finding.module,)
    for pattern, codes in (per_module_ignores or {}).items():
        if not _matches(finding.code, finding.name, codes):
            continue
        if fnmatchcase(finding.module, pattern) or all(fnmatchcase(m, pattern) for m in modules):
            return True
    return False


__all__ = [
    "Config",
    "find_config",
    "load_config",
    "module_ignored",
    "read_config",
    "validate_table",
]
