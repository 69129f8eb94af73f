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
    format = "text"              # text | json | sarif | github
    exit-zero = false
    inference = false

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
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Iterable, Sequence

from shapelint.errors import ShapelintError
from shapelint.files import parse_json, parse_toml, parse_yaml, read_text

#: compute precisions a user may ask for (``--dtype`` and the ``dtype`` key)
DTYPES = ("bf16", "fp16", "fp32", "tf32")
#: report formats (``--format`` and the ``format`` key)
FORMATS = ("text", "json", "sarif", "github")

YAML_NAMES = (".shapelint.yaml", ".shapelint.yml")
PYPROJECT = "pyproject.toml"

#: key -> kind of value; the canonical spelling uses hyphens
KEYS: dict[str, str] = {
    "gpu": "str",
    "dtype": "dtype",
    "batch": "positive",
    "seq": "positive",
    "tp": "positive",
    "select": "codes",
    "ignore": "codes",
    "per-module-ignores": "per-module",
    "min-speedup": "speedup",
    "min-loss": "fraction",
    "format": "format",
    "exit-zero": "bool",
    "inference": "bool",
}


@dataclass
class Config:
    """Settings read from a configuration file (None: the file does not set it)."""

    file: str | None = None
    gpu: str | None = None
    dtype: str | None = None
    batch: int | None = None
    seq: int | None = None
    tp: int | None = None
    select: list[str] | None = None
    ignore: list[str] | None = None
    per_module_ignores: dict[str, list[str]] = field(default_factory=dict)
    min_speedup: float | None = None
    min_loss: float | None = None
    format: str | None = None
    exit_zero: bool | None = None
    inference: bool | None = None
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
            out.setdefault(_canonical(m.group(1)), no)
    return out


def _yaml_key_lines(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for no, line in enumerate(text.splitlines(), start=1):
        m = re.match(r'^["\']?([A-Za-z0-9_-]+)["\']?\s*:', line)
        if m:
            out.setdefault(_canonical(m.group(1)), no)
    return out


def _canonical(key: str) -> str:
    return key.replace("_", "-")


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
        raise ShapelintError(f"{where}: expected a mapping of settings, got {_kind(table)}")
    return validate(table, where, lines)


def load_config(explicit: str | None = None, *, search: bool = True, start: Path | None = None) -> Config:
    """The explicit file, else the one found from ``start`` upwards, else defaults."""
    if explicit is not None:
        return read_config(Path(explicit))
    if not search:
        return Config()
    found = find_config(start)
    return read_config(found) if found is not None else Config()


# -- validating -----------------------------------------------------------------


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _codes(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        items: list[Any] = [c for c in value.split(",")]
    elif isinstance(value, list):
        items = value
    else:
        raise ShapelintError(f"{where}: expected a list of rule codes, got {_kind(value)}")
    out = []
    for item in items:
        if not isinstance(item, str):
            raise ShapelintError(f"{where}: expected rule codes (strings), got {_kind(item)}")
        if item.strip():
            out.append(item.strip())
    return out


def validate(table: dict[Any, Any], where: str, lines: dict[str, int] | None = None) -> Config:
    """Check every key and value of a settings mapping; raise on the first problem."""
    cfg = Config(file=where, lines=dict(lines or {}))
    seen: dict[str, Any] = {}
    for raw_key, value in table.items():
        if not isinstance(raw_key, str):
            raise ShapelintError(f"{where}: setting names must be strings, got {_kind(raw_key)}")
        key = _canonical(raw_key)
        if key not in KEYS:
            raise ShapelintError(
                f"{cfg.where(key)}: unknown key {raw_key!r} (known: {', '.join(KEYS)})")
        if key in seen:
            raise ShapelintError(f"{cfg.where(key)}: {key} is set twice")
        seen[key] = value
        _set(cfg, key, value, f"{cfg.where(key)}: {key}")
    return cfg


def _set(cfg: Config, key: str, value: Any, where: str) -> None:
    kind = KEYS[key]
    attr = key.replace("-", "_")
    if kind == "str":
        if not isinstance(value, str) or not value.strip():
            raise ShapelintError(f"{where}: expected a GPU name, got {_kind(value)}")
        from shapelint import hardware

        try:
            hardware.resolve(value)
        except ShapelintError as exc:
            raise ShapelintError(f"{where}: {exc}") from None
        setattr(cfg, attr, value.strip())
    elif kind in ("dtype", "format"):
        choices = DTYPES if kind == "dtype" else FORMATS
        if not isinstance(value, str) or value not in choices:
            raise ShapelintError(f"{where}: expected one of {', '.join(choices)}, got {_kind(value)}")
        setattr(cfg, attr, value)
    elif kind == "positive":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ShapelintError(f"{where}: expected a positive integer, got {_kind(value)}")
        if value <= 0:
            raise ShapelintError(f"{where}: must be a positive integer, got {value}")
        setattr(cfg, attr, value)
    elif kind == "bool":
        if not isinstance(value, bool):
            raise ShapelintError(f"{where}: expected true or false, got {_kind(value)}")
        setattr(cfg, attr, value)
    elif kind in ("speedup", "fraction"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ShapelintError(f"{where}: expected a number, got {_kind(value)}")
        x = float(value)
        if kind == "speedup" and not (0 < x < float("inf")):
            raise ShapelintError(f"{where}: must be a positive number, got {value}")
        if kind == "fraction" and not (0 <= x < 1):
            raise ShapelintError(f"{where}: must be at least 0 and below 1, got {value}")
        setattr(cfg, attr, x)
    elif kind == "codes":
        setattr(cfg, attr, _codes(value, where))
    elif kind == "per-module":
        if not isinstance(value, dict):
            raise ShapelintError(f"{where}: expected a mapping of module glob → rule codes, got {_kind(value)}")
        out: dict[str, list[str]] = {}
        for pattern, codes in value.items():
            if not isinstance(pattern, str) or not pattern:
                raise ShapelintError(f"{where}: module globs must be non-empty strings, got {_kind(pattern)}")
            out[pattern] = _codes(codes, f"{where}.{pattern}")
        cfg.per_module_ignores = out
    else:  # pragma: no cover - KEYS and _set go together
        raise AssertionError(kind)


# -- using it -------------------------------------------------------------------


def _matches(code: str, name: str, codes: Iterable[str]) -> bool:
    return any(code.startswith(c) or name == c for c in codes)


def module_ignored(finding: Any, per_module_ignores: dict[str, list[str]]) -> bool:
    """True when a ``per-module-ignores`` glob covers this finding for its rule: the
    glob matches the finding's module (as reported, e.g. ``h.*.mlp``) or every
    module the finding groups."""
    modules: Sequence[str] = finding.modules or (finding.module,)
    for pattern, codes in per_module_ignores.items():
        if not _matches(finding.code, finding.name, codes):
            continue
        if fnmatchcase(finding.module, pattern) or all(fnmatchcase(m, pattern) for m in modules):
            return True
    return False


__all__ = ["Config", "DTYPES", "FORMATS", "find_config", "load_config", "module_ignored", "read_config", "validate"]
