"""``--format github``: GitHub Actions workflow commands, one annotation per finding::

    ::error file=model.py,line=23,title=SL101 misaligned-leading-dim::in_features = 1023 is ...

The level follows the severity (error → ``error``, warning → ``warning``, info →
``notice``). Escaping is GitHub's (``@actions/core``): in the message ``%``, CR
and LF become ``%25``, ``%0D``, ``%0A``; in property values ``:`` and ``,`` also
become ``%3A`` and ``%2C``. Paths are relative to the repository root, as the
annotations need. Suppressed findings are never annotated.
"""

from __future__ import annotations

from collections.abc import Sequence

from shapelint.pipeline import Result
from shapelint.report.sarif import location, message, relative_path

LEVELS = {"error": "error", "warning": "warning", "info": "notice"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(level: str, message_text: str, **props: object) -> str:
    """One workflow command: ``::level key=value,...::message``."""
    body = ",".join(f"{k}={escape_property(str(v))}" for k, v in props.items() if v is not None)
    return f"::{level}{' ' + body if body else ''}::{escape_data(message_text)}"


def render(results: Sequence[Result]) -> str:
    lines = []
    for r in results:
        for f in r.findings:
            if f.suppressed:
                continue
            file, line = location(f, r)
            lines.append(annotation(
                LEVELS.get(f.severity, "warning"),
                message(f),
                file=relative_path(file) or file,
                line=line,
                title=f"{f.code} {f.name}",
            ))
    return "".join(line + "\n" for line in lines)
