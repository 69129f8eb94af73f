"""Generate docs/rules.md from the rule modules (their docstrings and examples):
one fact in one place.

    python -m shapelint.docs > docs/rules.md
"""

from __future__ import annotations

import sys

from shapelint.check import builtin_rules


def render() -> str:
    rules = builtin_rules()
    out = ["# shapelint rules", "",
           "Generated from the rule modules in `rules/` by `python -m shapelint.docs`; do not edit by hand.", "",
           "| code | name | severity | summary |", "|---|---|---|---|"]
    for r in rules:
        out.append(f"| [{r.code}](#{r.code.lower()}-{r.name}) | `{r.name}` | {r.severity} | {r.summary} |")
    for r in rules:
        doc = r.doc.strip().splitlines()
        out += ["", f"## {r.code} {r.name}", "", doc[0], ""]
        body = "\n".join(doc[1:]).strip().replace("\n## ", "\n### ")
        out += [body.replace("## ", "### ", 1) if body.startswith("## ") else body, ""]
        out += ["### Examples the tests run", "", "| | model | inputs | dtype | GPU | expected suggestion |",
                "|---|---|---|---|---|---|"]
        for kind, examples in (("flagged", r.bad), ("clean", r.good)):
            for e in examples:
                expect = ", ".join(f"{k}={v}" for k, v in e.expect.items()) if e.expect else ""
                model = e.model.replace("|", "\\|")
                out.append(f"| {kind} | `{model}` | `{e.inputs}` | {e.dtype} | {e.gpu} | {expect} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
