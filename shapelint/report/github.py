"""``--format github``: GitHub Actions workflow commands, one annotation per finding::

    ::error file=model.py,line=23,col=27,title=SL101 misaligned-leading-dim::in_features = 1023 is ...

The level follows the severity (error → ``error``, warning → ``warning``, info →
``notice``). Escaping is GitHub's (``@actions/core``): in the message ``%``, CR
and LF become ``%25``, ``%0D``, ``%0A``; in property values ``:`` and ``,`` also
become ``%3A`` and ``%2C``. Paths are relative to the repository root, as the
annotations need. Suppressed findings are never annotated.

A target that could not be linted is an ``error`` annotation too, at the target's file
(and at the line its message names, ``model.py:6: ...``), titled
``shapelint: cannot lint this target``, so a failing check says why on the diff::

    ::error file=t.yaml,title=shapelint%3A cannot lint this target::t.yaml: model: shutil is not ...
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shapelint.pipeline.result import Result, TargetError
from shapelint.report.columns import column
from shapelint.report.sarif import located_at_source, location, message, relative_path

LEVELS = {"error": "error", "warning": "warning", "info": "notice"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, message_text: str, **props: object) -> str:
    """One workflow command: ``::level key=value,...::message``."""
    body = ",".join(f"{k}={escape_property(str(v))}" for k, v in props.items() if v is not None)
    return f"::{level}{' ' + body if body else ''}::{escape_data(message_text)}"


#: the title of a target that could not be linted
ERROR_TITLE = "shapelint: cannot lint this target"


def error_annotation(e: TargetError) -> str:
    """A target that could not be linted: an ``error`` at its file (a directory
    target: its ``config.json``), at the line its message starts with, if any."""
    file = e.target
    if Path(file).is_dir() and (Path(file) / "config.json").is_file():
        file = str(Path(file) / "config.json")
    m = re.match(rf"{re.escape(e.target)}:(\d+):", e.message)
    return annotation("error", e.message, file=relative_path(file) or file,
                      line=int(m.group(1)) if m else None, title=ERROR_TITLE)


def render(results: Sequence[Result], errors: Sequence[TargetError] = (),
           fixes: Mapping[tuple[str, int], dict[str, Any]] | None = None) -> str:
    """One annotation per finding (suppressed ones left out), then one per target
    that could not be linted. ``col`` where the finding is at its own line and a column
    is known there (``fixes``: each fixable finding's fix, by (target, index in
    ``Result.findings``), whose edit's column comes first: :mod:`shapelint.report.columns`)."""
    lines = []
    for r in results:
        for i, f in enumerate(r.findings):
            if f.suppressed:
                continue
            file, line = location(f, r)
            col = column(f, (fixes or {}).get((r.target, i))) if located_at_source(f, r) else None
            lines.append(annotation(
                LEVELS.get(f.severity, "warning"),
                message(f),
                file=relative_path(file) or file,
                line=line,
                col=col,
                title=f"{f.code} {f.name}",
            ))
    lines += [error_annotation(e) for e in errors]
    return "".join(line + "\n" for line in lines)
