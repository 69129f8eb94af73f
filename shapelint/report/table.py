"""One target's findings as a table, for the Python API: a rich ``Table`` (a terminal,
``rich.print(report)``) and an HTML table (a Jupyter cell, ``Report._repr_html_``).
Both are built from the same rows."""

from __future__ import annotations

from html import escape

from rich.console import Group
from rich.table import Table
from rich.text import Text

from shapelint.model.records import Finding
from shapelint.pipeline.result import Result
from shapelint.report.text import SEVERITY_STYLE, gemm_count_line, step_line

#: the table's columns, in order
COLUMNS = ("code", "severity", "module", "source", "suggestion", "saves per step", "message")


def headline(r: Result) -> str:
    mode = "training" if r.training else "inference"
    return (f"{r.target}: GPU {r.hardware.name} ({r.hardware.key}), {r.precision}, {mode}; {gemm_count_line(r)}; "
            f"{step_line(r)}")


def row(f: Finding) -> tuple[str, ...]:
    speedup = "" if f.step_ms_saved is None or f.step_share is None else \
        f"{f.step_ms_saved:.2f} ms ({100 * f.step_share:.1f}%)"
    module = f.module if len(f.modules) <= 1 else f"{f.module} ({len(f.modules)} modules)"
    return (f.code, f.severity, module, str(f.source or ""), str(f.suggestion or ""), speedup, f.message)


def shown(r: Result) -> list[Finding]:
    return [f for f in r.findings if not f.suppressed]


def rich_table(r: Result) -> Group:
    table = Table(*COLUMNS, show_lines=True)
    for f in shown(r):
        cells = list(row(f))
        table.add_row(cells[0], Text(cells[1], style=SEVERITY_STYLE.get(f.severity, "")), *cells[2:])
    verdict = f"{len(shown(r))} findings" if shown(r) else "no findings"
    return Group(Text(headline(r), style="bold"), table if shown(r) else Text(verdict))


#: Jupyter's stylesheet right-aligns table cells: a long message then reads ragged on the left
CELL_STYLE = "text-align:left;vertical-align:top"
#: the columns that hold a number, kept right-aligned so that their digits line up
NUMERIC = frozenset({"saves per step"})


def _cell(tag: str, column: str, text: str) -> str:
    align = "text-align:right;vertical-align:top" if column in NUMERIC else CELL_STYLE
    return f"<{tag} style=\"{align}\">{escape(text)}</{tag}>"


def html(r: Result) -> str:
    head = "".join(_cell("th", c, c) for c in COLUMNS)
    body = "".join("<tr>" + "".join(_cell("td", c, cell) for c, cell in zip(COLUMNS, row(f))) + "</tr>"
                   for f in shown(r))
    table = (f"<table class=\"shapelint\"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
             if body else "<p>no findings</p>")
    return f"<div class=\"shapelint\"><p><b>{escape(headline(r))}</b></p>{table}</div>"
