"""Reading the text files users hand us (targets, configs): every failure becomes a
one-line ShapelintError naming the file and, where the parser knows it, the line."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from shapelint.errors import ShapelintError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def read_text(path: Path, where: str | None = None) -> str:
    where = where or str(path)
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ShapelintError(f"{where}: cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ShapelintError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


_TOML_AT = re.compile(r"\s*\(at line (\d+), column \d+\)\s*$")


def parse_toml(text: str, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        line = getattr(exc, "lineno", None)
        m = _TOML_AT.search(msg)
        if m:
            line = line or int(m.group(1))
            msg = msg[: m.start()]
        if msg.endswith("(at end of document)"):
            line = line or max(1, len(text.splitlines()))
            msg = msg[: -len("(at end of document)")]
        msg = msg.strip() or "invalid TOML"
        raise ShapelintError(f"{where}{f':{line}' if line else ''}: TOML syntax error: {msg}") from exc
    except RecursionError as exc:
        raise ShapelintError(f"{where}: TOML syntax error: nested too deeply") from exc


def parse_yaml(text: str, where: str) -> Any:
    import yaml

    try:
        # the pure-Python safe loader: the C one is faster but overflows the C stack
        # (a crash, not an error) on deeply nested input
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["invalid YAML"])[0]
        raise ShapelintError(f"{where}{line}: YAML syntax error: {problem}") from exc
    except RecursionError as exc:
        raise ShapelintError(f"{where}: YAML syntax error: nested too deeply") from exc
    except (ValueError, TypeError, OverflowError) as exc:
        # PyYAML builds timestamps with datetime, which rejects e.g. 2024-13-01
        raise ShapelintError(f"{where}: YAML value error: {exc}") from exc


def parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ShapelintError(f"{where}:{exc.lineno}: JSON syntax error: {exc.msg}") from exc
    except RecursionError as exc:
        raise ShapelintError(f"{where}: JSON syntax error: nested too deeply") from exc
