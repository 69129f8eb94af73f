"""``--show-settings``: what a run would use, and where each value comes from, as ruff's
``--show-settings`` prints it; the run stops there (no target is linted, no torch is
imported). Each setting is the flag's value, else the configuration file's, else the
built-in default (a YAML target's own ``gpu``, ``dtype``... still win over the last two
when it is linted; ``--show-settings`` names no target)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import IO, Any

from shapelint.app.request import Request
from shapelint.pipeline.settings import SETTINGS


def lines(request: Request, rules: Sequence[Any]) -> list[str]:
    """The report: the configuration file, each setting with its source, the selected rules."""
    cfg = request.config
    out = [f"configuration file: {cfg.file or '(none)'}", ""]
    for s in SETTINGS:
        value, source = _value(request, s.attr, s.key)
        out.append(f"{s.key} = {json.dumps(value)}  # {source}")
    run_only = {"gpu-profile": request.gpu_profile, "rules-dir": list(request.rules_dirs),
                "cache-dir": request.cache_dir, "quiet": request.quiet}
    out += [f"{key} = {json.dumps(value)}  # command line" for key, value in run_only.items()
            if value not in (None, [], False)]
    if request.color != "auto":
        out.append(f"color = {json.dumps(request.color)}  # command line")
    out += ["", f"rules ({len(rules)} selected):"]
    out += [f"  {r.code}  {r.name}" for r in rules]
    return out


def _value(request: Request, attr: str, key: str) -> tuple[Any, str]:
    from shapelint.pipeline.settings import default

    flag, configured = getattr(request.flags, attr), getattr(request.config, attr)
    if flag is not None:
        return flag, "command line"
    if configured is not None:
        return configured, request.config.where(key)
    value = default(key)
    return value, "default" if value is not None else "default: decided when the target is linted"


def render(request: Request, rules: Sequence[Any], out: IO[str]) -> None:
    out.write("\n".join(lines(request, rules)) + "\n")


__all__ = ["lines", "render"]
