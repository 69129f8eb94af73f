"""The column a finding points at on its line, one rule for every format that carries
one (concise ``path:line:col``, SARIF ``region.startColumn``, GitHub ``col=``).

The value ``--fix`` edits, where its fix edits one on the finding's line (the reader's
cursor lands on the number to change); else the column the locator found
(``Source.column``: the keyword that sets the size, ``vocab_size=50257`` in a config
class call); else none (a format then names the line only).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shapelint.model.records import Finding


def column(f: Finding, fix: Mapping[str, Any] | None = None) -> int | None:
    """The 1-based column (characters, as ``--fix``'s edits count them) of ``f`` on its
    source line, or None where neither its fix nor its location knows one."""
    if f.source is None:
        return None
    edited = next((e["location"]["column"] for e in (fix or {}).get("edits", ())
                   if e["file"] == f.source.file and e["location"]["row"] == f.source.line), None)
    return edited if edited is not None else f.source.column


__all__ = ["column"]
