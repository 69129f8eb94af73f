"""``--format sarif``: SARIF 2.1.0 for GitHub code scanning (``upload-sarif``).

One run; ``tool.driver.rules`` lists the rules that ran (from their docstrings),
each result points at the line the finding names (the layer's constructor, or the
config key), or at line 1 of the target when it has no line (or its line lies outside
the repository, e.g. in a library). Paths are relative to
the repository root (the nearest folder upwards holding ``.git``), else to the
current directory, with forward slashes.

Targets that could not be linted are ``invocations[0].toolExecutionNotifications``
(level ``error``, at the target's file) with ``executionSuccessful`` false.

``partialFingerprints["shapelintFinding/v1"]`` is a SHA-256 of the file, rule code,
module path and the suggested parameter and its current value: stable across runs
and line moves, so code scanning keeps tracking the same alert.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from shapelint.model.records import Finding
from shapelint.pipeline.result import Result, TargetError
from shapelint.report.columns import column
from shapelint.report.json_report import Fixes
from shapelint.version import __version__

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
INFORMATION_URI = "https://pypi.org/project/shapelint/"
FINGERPRINT_KEY = "shapelintFinding/v1"

LEVELS = {"info": "note", "warning": "warning", "error": "error"}


# -- paths ----------------------------------------------------------------------


def repo_root(start: Path | None = None) -> Path | None:
    """The nearest folder from ``start`` (the current directory) upwards with ``.git``."""
    folder = (start or Path.cwd()).resolve()
    for d in (folder, *folder.parents):
        if (d / ".git").exists():
            return d
    return None


def relative_path(file: str, base: Path | None = None) -> str | None:
    """``file`` relative to ``base`` (default: the repository root, else the current
    directory), with forward slashes; None when it lies outside."""
    base = (base or repo_root() or Path.cwd()).resolve()
    path = Path(os.path.abspath(file))
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        try:
            return path.resolve().relative_to(base).as_posix()
        except ValueError:
            return None


def artifact_location(file: str, base: Path | None = None) -> dict[str, Any]:
    rel = relative_path(file, base)
    if rel is None:
        return {"uri": Path(os.path.abspath(file)).as_uri()}
    return {"uri": quote(rel, safe="/"), "uriBaseId": "%SRCROOT%"}


def target_file(r: Result) -> str:
    """The file a finding without a source line points at."""
    if r.config_file:
        return r.config_file
    if Path(r.target).is_dir() and (Path(r.target) / "config.json").is_file():
        return str(Path(r.target) / "config.json")
    return r.target


def location(f: Finding, r: Result) -> tuple[str, int]:
    """(file, line) a finding is reported at: its source line, else line 1 of the
    target. A source outside the repository (a library's modeling code, for a
    Hugging Face config whose key could not be located) also falls back to the
    target, which the repository does hold."""
    target = target_file(r)
    if f.source is not None and f.source.line >= 1:
        if relative_path(f.source.file) is not None or relative_path(target) is None:
            return f.source.file, f.source.line
    return target, 1


def region(f: Finding, r: Result, fix: dict[str, Any] | None = None) -> dict[str, int]:
    """The SARIF region of :func:`location`: its line, and its ``startColumn`` where the
    finding is reported at its own line and a column is known there
    (:func:`shapelint.report.columns.column`)."""
    _, line = location(f, r)
    col = column(f, fix) if located_at_source(f, r) else None
    return {"startLine": max(1, line), **({"startColumn": col} if col else {})}


def located_at_source(f: Finding, r: Result) -> bool:
    """Whether :func:`location` reports ``f`` at its own source line (not the target's first)."""
    return f.source is not None and location(f, r) == (f.source.file, f.source.line)


# -- rules ----------------------------------------------------------------------


def _section(doc: str, heading: str) -> str:
    m = re.search(rf"^##\s*{re.escape(heading)}\s*$(.*?)(?=^##\s|\Z)", doc, re.MULTILINE | re.DOTALL)
    return " ".join(m.group(1).split()) if m else ""


class Documented(Protocol):
    """What a rule descriptor is made of: a rule module's :class:`Rule`, or an
    application check's ``RuleInfo`` (``SL900``)."""

    @property
    def code(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def severity(self) -> str: ...

    @property
    def doc(self) -> str: ...

    @property
    def summary(self) -> str: ...


def rule_descriptor(rule: Documented) -> dict[str, Any]:
    doc = rule.doc.strip()
    summary = rule.summary
    full = _section(doc, "What it does") or summary
    why = _section(doc, "Why is this bad?")
    if why:
        full = f"{full} {why}"
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": summary},
        "fullDescription": {"text": full},
        "help": {"text": doc or summary, "markdown": doc or summary},
        "defaultConfiguration": {"level": LEVELS.get(rule.severity, "warning")},
        "properties": {"tags": ["performance", "gpu"], "precision": "high"},
    }


# -- results --------------------------------------------------------------------


def message(f: Finding) -> str:
    """The finding's message with its suggestion and estimated speedup."""
    text = f.message.rstrip()
    if text and text[-1] not in ".!?":
        text += "."
    if f.suggestion is not None:
        text += f" Fix: {f.suggestion.parameter} {f.suggestion.from_} → {f.suggestion.to}."
    if f.est_speedup is not None:
        text += (f" Estimated {f.est_speedup:.2f}× on these GEMMs "
                 f"({f.est_ms:.3f} ms → {f.est_ms_after:.3f} ms per step).")
    if len(f.modules) > 1:
        text += f" In {len(f.modules)} modules: {f.module}."
    return text


def fingerprint(f: Finding, file_uri: str) -> str:
    s = f.suggestion
    key = "\x1f".join([
        file_uri, f.code, f.module,
        s.parameter if s else "", str(s.from_) if s else "",
    ])
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def sarif_fix(fix: dict[str, Any]) -> dict[str, Any]:
    """A fix (``shapelint.fix.preview.Fix.to_json``) as SARIF's ``fix``: one
    ``artifactChange`` per file, a ``replacement`` per edit (end column exclusive)."""
    by_file: dict[str, list[dict[str, Any]]] = {}
    for e in fix["edits"]:
        start, end = e["location"], e["end_location"]
        by_file.setdefault(e["file"], []).append({
            "deletedRegion": {"startLine": start["row"], "startColumn": start["column"],
                              "endLine": end["row"], "endColumn": end["column"]},
            "insertedContent": {"text": e["content"]},
        })
    return {"description": {"text": fix["message"]},
            "artifactChanges": [{"artifactLocation": artifact_location(file), "replacements": replacements}
                                for file, replacements in by_file.items()]}


def _result(f: Finding, r: Result, rule_index: int, seen: dict[str, int],
            fix: dict[str, Any] | None = None) -> dict[str, Any]:
    file, line = location(f, r)
    art = artifact_location(file)
    fp = fingerprint(f, art["uri"])
    seen[fp] = seen.get(fp, 0) + 1
    if seen[fp] > 1:  # the same shape twice in one file: keep fingerprints unique
        fp = f"{fp}:{seen[fp]}"
    out: dict[str, Any] = {
        "ruleId": f.code,
        "ruleIndex": rule_index,
        "level": LEVELS.get(f.severity, "warning"),
        "message": {"text": message(f)},
        "locations": [{
            "physicalLocation": {"artifactLocation": art, "region": region(f, r, fix)},
            "logicalLocations": [{"fullyQualifiedName": f.module, "kind": "module"}],
        }],
        "partialFingerprints": {FINGERPRINT_KEY: fp},
        "properties": {
            "target": r.target,
            "gpu": r.hardware.key,
            "dtype": r.precision,
            "modules": list(f.modules) or [f.module],
            "suggestion": f.suggestion.to_json() if f.suggestion else None,
            "estSpeedup": None if f.est_speedup is None else round(f.est_speedup, 4),
            "estMs": round(f.est_ms, 4),
            "estMsAfter": round(f.est_ms_after, 4),
        },
    }
    if f.suppressed:
        out["suppressions"] = [{"kind": "inSource"}]
    if fix is not None:
        out["fixes"] = [sarif_fix(fix)]
    return out


def invocation(errors: Sequence[TargetError]) -> dict[str, Any]:
    """The run's invocation: whether every target was linted, and why not."""
    return {
        "executionSuccessful": not errors,
        "toolExecutionNotifications": [{
            "level": "error",
            "message": {"text": e.message},
            "locations": [{"physicalLocation": {"artifactLocation": artifact_location(e.target)}}],
        } for e in errors],
    }


def document(results: Sequence[Result], rules: Sequence[Documented], *, show_suppressed: bool = False,
             errors: Sequence[TargetError] = (), fixes: Fixes | None = None) -> dict[str, Any]:
    """The SARIF log; with ``fixes`` (by target and index in ``Result.findings``), each
    fixable result carries its ``fixes``."""
    descriptors = [rule_descriptor(r) for r in rules]
    index = {d["id"]: i for i, d in enumerate(descriptors)}
    out: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for r in results:
        for i, f in enumerate(r.findings):
            if f.suppressed and not show_suppressed:
                continue
            if f.code not in index:  # a rule that ran but was not passed in
                index[f.code] = len(descriptors)
                descriptors.append({
                    "id": f.code, "name": f.name, "shortDescription": {"text": f.name},
                    "defaultConfiguration": {"level": LEVELS.get(f.severity, "warning")},
                })
            out.append(_result(f, r, index[f.code], seen, (fixes or {}).get((r.target, i))))
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "shapelint",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": INFORMATION_URI,
                "rules": descriptors,
            }},
            "invocations": [invocation(errors)],
            "results": out,
            "columnKind": "unicodeCodePoints",
        }],
    }


def render(results: Sequence[Result], rules: Sequence[Documented], *, show_suppressed: bool = False,
           errors: Sequence[TargetError] = (), fixes: Fixes | None = None) -> str:
    doc = document(results, rules, show_suppressed=show_suppressed, errors=errors, fixes=fixes)
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
