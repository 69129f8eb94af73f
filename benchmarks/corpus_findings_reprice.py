"""Today's estimates of the corpus findings against speedups measured on a GPU before,
on the CPU (issue 26: per-finding estimates within 25% of the measured speedup).

Each model of a stored ``benchmarks/corpus_findings_gpu.py`` result is linted again as
that script lints it (every built-in rule, the default policy, the stored --batch/--seq,
the stored GPU profile); each finding is matched to the stored one by rule and module,
and its estimated speedup now is set beside the speedup measured then. A pricing change
is checked against the measurements without a GPU; a finding that is new, or gone, is
listed as such.

    python benchmarks/corpus_findings_reprice.py docs/data/corpus_findings_h100_2026-11-26_kernels.json
    python benchmarks/corpus_findings_reprice.py RESULTS.json --models wavlm-base-plus speecht5-asr --json out.json
    python benchmarks/corpus_findings_reprice.py docs/data/real_corpus_findings_h100_2026-11-26.json --code SL302
        # the real corpus (--corpus real: model.py targets need their packages), SL302's findings only
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from corpus_findings_gpu import WITHIN, target_of  # noqa: E402  (the corpora and targets it measures)


def relint(model: str, stored: dict[str, Any], gpu: str) -> dict[tuple[str, str], float | None]:
    """(rule, module) -> estimated speedup, for ``model`` linted as the stored run linted it."""
    from shapelint import hardware
    from shapelint.check import run as check
    from shapelint.pipeline.result import Options
    from shapelint.pipeline.run import lint_target

    args = stored.get("args", {})
    r = lint_target(target_of(model, args.get("corpus") or "tests"),
                    Options(batch=args.get("batch"), seq=args.get("seq")), hardware.resolve(gpu), check.load_rules(()))
    return {(f.code, f.module): f.est_speedup for f in r.findings}


def rows_of(doc: dict[str, Any], models: list[str] | None, code: str | None = None) -> list[dict[str, Any]]:
    gpu = doc.get("gpu_profile") or "h100"
    rows: list[dict[str, Any]] = []
    for m in doc["models"]:
        stored = [f for f in m.get("findings", []) if f.get("measured_speedup") and (code is None or f["code"] == code)]
        if models and m["model"] not in models or not stored and not models:
            continue
        start = time.perf_counter()
        try:
            now = relint(m["model"], doc, gpu)
        except Exception as exc:  # a model that no longer lints: say so, go on
            rows.append({"model": m["model"], "error": f"{type(exc).__name__}: {exc}"[:200]})
            continue
        for f in stored:
            est = now.pop((f["code"], f["module"]), None)
            measured = f["measured_speedup"]
            rows.append({"model": m["model"], "code": f["code"], "module": f["module"], "measured": measured,
                         "est_then": f.get("est_speedup"), "est_now": est,
                         "error_now": None if est is None else est / measured - 1})
        rows += [{"model": m["model"], "code": c, "module": module, "measured": None, "est_then": None,
                  "est_now": est, "error_now": None, "new": True} for (c, module), est in now.items()
                 if code is None or c == code]
        print(f"{m['model']}: linted in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    def x(v: Any, fmt: str = ".2f") -> str:
        return "-" if v is None else format(v, fmt)

    lines = [f"{'model':24} {'rule':5} {'module':44} {'measured':>8} {'est then':>8} {'est now':>8} {'error':>7}  "
             "within 25%"]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['model'][:24]:24} lint error: {r['error']}")
            continue
        within = "-" if r["error_now"] is None else "yes" if abs(r["error_now"]) <= WITHIN else "NO"
        note = "  (new finding)" if r.get("new") else "  (gone)" if r["est_now"] is None else ""
        lines.append(f"{r['model'][:24]:24} {r['code']:5} {r['module'][-44:]:44} {x(r['measured']):>8} "
                     f"{x(r['est_then']):>8} {x(r['est_now']):>8} {x(r['error_now'], '+.0%'):>7}  {within}{note}")
    paired = [r for r in rows if r.get("error_now") is not None]
    good = sum(abs(r["error_now"]) <= WITHIN for r in paired)
    lines.append(f"within 25% of the measured speedup now: {good}/{len(paired)}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path, help="a corpus_findings_gpu.py JSON with measured speedups")
    p.add_argument("--models", nargs="*", help="only these corpus models")
    p.add_argument("--json", type=Path, help="write the rows here")
    p.add_argument("--code", help="only this rule's findings (SL302)")
    args = p.parse_args()
    if not args.results.is_file():
        sys.exit(f"corpus_findings_reprice: no such file: {args.results}")
    rows = rows_of(json.loads(args.results.read_text()), args.models, args.code)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps({"results": str(args.results), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
