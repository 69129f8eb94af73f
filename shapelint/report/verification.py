"""The text report's lines for what ``--verify`` measured of a finding
(``Finding.verification``) and what ``--verify --step`` measured of a target's step
(``Result.step_verification``), both written by :mod:`shapelint.measure`."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from shapelint.model.verification import FindingVerification


def finding_line(v: FindingVerification | None) -> Text | None:
    """A finding's ``--verify`` line: the status, the covered work's time before and
    after, and each GEMM's share of the peak; None when it was not verified."""
    if v is None or not v.ran:
        return None
    fractions = [(g.before_peak_fraction, g.after_peak_fraction) for g in v.gemms
                 if g.before_peak_fraction is not None and g.after_peak_fraction is not None]
    peak = "; % of peak before → after: " + ", ".join(f"{100 * b:.0f}→{100 * a:.0f}" for b, a in fractions) \
        if fractions else ""
    style = "green" if v.status == "confirmed" else "yellow"
    return Text.assemble("      ", (v.status, style), f": {v.before_ms:.3f} ms → {v.after_ms:.3f} ms measured{peak}")


def _verdict(confirmed: bool | None, threshold: float | None) -> str:
    if confirmed is None:
        return ""
    return ": confirmed" if confirmed else f": not confirmed (below {threshold:.3f}×, the blocks' noise)"


def report_lines(v: dict[str, Any]) -> list[str]:
    """The text report's lines for one target's ``step_verification``."""
    head = f"step verified on {v['device']} ({v['mode']}): "
    if v.get("measured_ms_after") is None:
        lines = [head + f"est. {v['est_ms']:.1f} ms, measured {v['measured_ms']:.1f} ms "
                        f"(estimate {100 * (v['est_error'] or 0):+.0f}%); no suggestion applied"]
    else:
        lines = [head + f"est. {v['est_ms']:.1f} → {v['est_ms_after']:.1f} ms ({v['est_speedup']:.2f}×), "
                        f"measured {v['measured_ms']:.1f} → {v['measured_ms_after']:.1f} ms "
                        f"({v['measured_speedup']:.2f}×){_verdict(v['confirmed'], v['threshold'])}"]
    for e in v["findings"] if len(v["findings"]) > 1 else ():
        s = e["suggestion"]
        what = f"{e['code']} {s['parameter']}: {s['from']} → {s['to']}" if s else e["code"]
        if e.get("measured"):
            lines.append(f"  {what}: est. {e['est_speedup']:.3f}×, measured {e['measured_speedup']:.3f}× "
                         f"({e['measured_ms']:.1f} → {e['measured_ms_after']:.1f} ms)"
                         f"{_verdict(e['confirmed'], e['threshold'])}")
        else:
            lines.append(f"  {what}: est. {e['est_speedup']:.3f}×, not measured alone"
                         + (f" ({e['error']})" if e.get("error") else ""))
    graphs = (v.get("graphs") or {}).get("before")
    if graphs and graphs > 1:  # the first model compiles every graph of its step; later ones reuse some
        probed = v.get("probed_graphs")
        priced = (f"the estimate prices the {probed['forward_graphs']} + {probed['backward_graphs']} graph calls "
                  f"a step makes and {probed['eager_ops']} eager ops, as shapelint's probe found them"
                  if probed else "shapelint did not probe this model's graphs: priced as one graph")
        lines.append(f"  torch.compile broke the forward into {graphs} graphs ({priced})")
    if v["per_finding"] not in ("measured", "the only finding: all at once"):
        lines.append(f"  per finding: {v['per_finding']}")
    for n in v["not_applied"]:
        s = n["suggestion"]
        what = f"{n['code']} {s['parameter']}: {s['from']} → {s['to']}" if s else n["code"]
        lines.append(f"  not applied: {what}: {n['reason']}")
    return lines


__all__ = ["finding_line", "report_lines"]
