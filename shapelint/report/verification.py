"""The text report's lines for what ``--verify`` measured of a finding
(``Finding.verification``) and what ``--verify --step`` measured of a target's step
(``Result.step_verification``), both written by :mod:`shapelint.measure`."""

from __future__ import annotations

from rich.text import Text

from shapelint.model.step_verification import AppliedFinding, StepComparison, StepVerification
from shapelint.model.verification import FindingVerification

#: how ``per_finding`` says the findings were measured one by one (or needed not be)
PER_FINDING_DONE = ("measured", "the only finding: all at once")


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


def _verdict(c: StepComparison) -> str:
    return ": confirmed" if c.confirmed else f": not confirmed (below {c.threshold:.3f}×, the blocks' noise)"


def _headline(v: StepVerification) -> str:
    head = f"step verified on {v.device} ({v.mode}): "
    c = v.comparison
    if c is None:
        return head + (f"est. {v.est_ms:.1f} ms, measured {v.measured_ms:.1f} ms "
                       f"(estimate {100 * (v.est_error or 0):+.0f}%); no suggestion applied")
    return head + (f"est. {v.est_ms:.1f} → {v.est_ms_after:.1f} ms ({v.est_speedup:.2f}×), "
                   f"measured {c.before_ms:.1f} → {c.after_ms:.1f} ms ({c.speedup:.2f}×){_verdict(c)}")


def _finding_line(e: AppliedFinding) -> str:
    c = e.comparison
    if c is None:
        return f"  {e.finding}: est. {e.est_speedup:.3f}×, not measured alone" + (f" ({e.error})" if e.error else "")
    return (f"  {e.finding}: est. {e.est_speedup:.3f}×, measured {c.speedup:.3f}× "
            f"({c.before_ms:.1f} → {c.after_ms:.1f} ms){_verdict(c)}")


def _graphs_line(v: StepVerification) -> list[str]:
    """Where torch.compile broke the forward into several graphs: what the estimate priced."""
    graphs = v.before.graphs
    if not graphs or graphs <= 1:  # the first model compiles every graph of its step; later ones reuse some
        return []
    probed = v.probed_graphs
    priced = (f"the estimate prices the {probed.forward_graphs} + {probed.backward_graphs} graph calls "
              f"a step makes and {probed.eager_ops} eager ops, as shapelint's probe found them"
              if probed else "shapelint did not probe this model's graphs: priced as one graph")
    return [f"  torch.compile broke the forward into {graphs} graphs ({priced})"]


def report_lines(v: StepVerification) -> list[str]:
    """The text report's lines for one target's ``step_verification``."""
    lines = [_headline(v)]
    lines += [_finding_line(e) for e in v.findings] if len(v.findings) > 1 else []
    lines += _graphs_line(v)
    if v.per_finding not in PER_FINDING_DONE:
        lines.append(f"  per finding: {v.per_finding}")
    lines += [f"  not applied: {n.finding}: {n.reason}" for n in v.not_applied]
    return lines


__all__ = ["finding_line", "report_lines"]
