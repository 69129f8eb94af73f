"""``--plot FILE.png|svg``: each target's GEMMs on the GPU's roofline, one panel each.

The roof is ``min(peak, bandwidth × intensity)`` with the profile's peak for the
target's precision (``Hardware.peak_tflops``) and its memory bandwidth. Each GEMM is
a grey point at (arithmetic intensity, achieved FLOP/s = useful FLOPs / estimated time),
its area the GEMM's share of the step's GEMM time; the biggest are labelled with their
module and phase, so that the LM head can be told from a projection.

Each finding has a colour of its own: its GEMMs are drawn in it, and an arrow runs
from where its GEMMs are together (their FLOPs over their estimated time, at their
joint intensity) to where the suggestion puts them (the same useful FLOPs, the
estimated speedup faster), labelled with the module; the legend names the finding,
its change and its estimate. The "after" point is the finding's own estimate, so every
finding has one, also one whose GEMMs change kernel or vanish (a per-GEMM "after"
needs each GEMM's time after the change, which not every finding has).

Needs matplotlib (``pip install 'shapelint[plot]'``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shapelint.errors import ShapelintError
from shapelint.model.records import Finding
from shapelint.pipeline.result import Result

SUFFIXES = (".png", ".svg")
INSTALL_HINT = "pip install 'shapelint[plot]'"
#: how many of the biggest GEMMs (by share of the GEMM time) get a label of their own
LABELLED = 4
#: a group of GEMMs below this share of the GEMM time gets no label
MIN_LABELLED_SHARE = 0.01
#: one colour per finding, in the order the report lists them (matplotlib's tab10 without grey and red)
FINDING_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:pink", "tab:olive",
                   "tab:cyan")
TERA = 1e12


def check_path(path: str) -> None:
    if Path(path).suffix.lower() not in SUFFIXES:
        raise ShapelintError(f"--plot {path}: the file name must end in .png or .svg")


def require_matplotlib() -> Any:
    try:
        import matplotlib
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError:
        raise ShapelintError(f"--plot needs matplotlib: {INSTALL_HINT}") from None
    return matplotlib


def points(r: Result) -> list[dict[str, Any]]:
    """One entry per GEMM: intensity, FLOP/s before and (if a finding covers it and its
    time after is known) after, share of the GEMM time, and the first reported finding
    that covers it (its index in ``r.findings``, None: none)."""
    before = {g.index: est.seconds for g, est in zip(r.capture.gemms, r.gemm_times)}
    after: dict[int, float] = {}
    owner: dict[int, int] = {}
    for i, f in enumerate(r.findings):
        if f.suppressed:
            continue
        for idx in f.gemms:
            owner.setdefault(idx, i)
        for idx, ms in zip(f.gemms, f.gemm_ms_after):
            s = float(ms) * 1e-3
            if idx in before and s > 0:
                after[idx] = min(after.get(idx, s), s)
    total = sum(before.values()) or 1.0
    out = []
    for g in r.capture.gemms:
        t = before[g.index]
        out.append({
            "gemm": g.index,
            "module": g.module,
            "phase": g.phase,
            "intensity": g.intensity,
            "flops_s": g.flops / t if t > 0 else 0.0,
            "flops_s_after": g.flops / after[g.index] if g.index in after and after[g.index] < t else None,
            "share": t / total,
            "finding": owner.get(g.index),
        })
    return out


@dataclass(frozen=True)
class Move:
    """A finding on the roofline: its GEMMs together before, and after its suggestion."""

    finding: Finding
    intensity: float
    flops_s: float
    flops_s_after: float

    @property
    def label(self) -> str:
        f = self.finding
        change = f" {f.suggestion}" if f.suggestion is not None else ""
        est = f"est. {f.est_speedup:.2f}×" if f.est_speedup is not None else ""
        step = f", {f.step_speedup:.3f}× per step" if f.step_speedup is not None else ""
        return f"{f.code} {f.module}:{change} ({est}{step})" if est else f"{f.code} {f.module}:{change}"


def moves(r: Result) -> list[Move]:
    """Each reported finding whose GEMMs were timed: where they are, where they go."""
    by_index = {g.index: (g, est.seconds) for g, est in zip(r.capture.gemms, r.gemm_times)}
    out = []
    for f in r.findings:
        covered = [by_index[i] for i in f.gemms if i in by_index]
        flops = sum(g.flops for g, _ in covered)
        seconds = sum(s for _, s in covered)
        moved = sum(g.min_bytes for g, _ in covered)
        if f.suppressed or not covered or seconds <= 0 or not flops:
            continue
        speedup = f.est_speedup or 1.0
        out.append(Move(f, flops / max(1, moved), flops / seconds, flops / seconds * speedup))
    return out


def render(results: Sequence[Result], path: str) -> None:
    check_path(path)
    matplotlib = require_matplotlib()
    from matplotlib.figure import Figure

    n = max(1, len(results))
    fig = Figure(figsize=(10, 7 * n), layout="constrained")
    axes = fig.subplots(n, 1, squeeze=False)[:, 0]
    for ax, r in zip(axes, results):
        _roofline(ax, r)
    try:
        with matplotlib.rc_context({"svg.fonttype": "none"}):  # an SVG's labels stay text: searchable, selectable
            fig.savefig(path, dpi=120)
    except OSError as exc:
        raise ShapelintError(f"--plot {path}: {exc.strerror or exc}") from exc


def _roofline(ax: Any, r: Result) -> None:
    hw = r.hardware
    peak, bw = hw.peak_tflops(r.precision) * TERA, hw.bandwidth
    pts, found = points(r), moves(r)
    xs = [p["intensity"] for p in pts if p["intensity"] > 0] or [1.0]
    lo, hi = min(min(xs) / 3, peak / bw / 10), max(max(xs) * 3, peak / bw * 10)
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(grid, [min(peak, bw * x) / TERA for x in grid], color="black", lw=1.5,
            label=f"roofline: {peak / TERA:.0f} TFLOP/s {r.precision}, {bw / 1e12:.2f} TB/s")
    ax.axvline(peak / bw, color="grey", lw=0.8, ls=":")
    colour = {id(m.finding): FINDING_COLOURS[i % len(FINDING_COLOURS)] for i, m in enumerate(found)}
    ax.scatter([p["intensity"] for p in pts], [p["flops_s"] / TERA for p in pts], s=[15 + 500 * p["share"] for p in pts],
               color=[_point_colour(r, p, colour) for p in pts], alpha=0.6, edgecolors="black", linewidths=0.4,
               label="a GEMM (area: its share of the GEMM time)", zorder=2)
    _label_biggest(ax, pts)
    for i, m in enumerate(found):
        _arrow(ax, m, colour[id(m.finding)], i)
    _axes(ax, r, len(pts), lo, hi)


def _point_colour(r: Result, p: dict[str, Any], colour: dict[int, str]) -> str:
    i = p["finding"]
    return colour.get(id(r.findings[i]), "tab:gray") if i is not None else "tab:gray"


def groups(pts: Sequence[dict[str, Any]]) -> list[tuple[str, float, dict[str, Any]]]:
    """The GEMMs by module (a repeated layer's blocks as one: ``h.*.mlp.c_fc``) and phase,
    biggest share first: (label, their share, their biggest point)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for p in pts:
        name = ".".join("*" if part.isdigit() else part for part in (p["module"] or "(model)").split("."))
        by.setdefault(f"{name} {p['phase']}", []).append(p)
    out = [(label, sum(p["share"] for p in ps), max(ps, key=lambda p: p["share"])) for label, ps in by.items()]
    return sorted(out, key=lambda g: -g[1])


def _label_biggest(ax: Any, pts: Sequence[dict[str, Any]]) -> None:
    """The biggest groups of GEMMs not in a finding (those are labelled by their arrow):
    a number beside the point, and in the legend what it is and its share of the GEMM
    time (names beside points as close as a transformer's overlap and cross the roof)."""
    from matplotlib.lines import Line2D

    shown = [g for g in groups(pts) if g[2]["finding"] is None and g[1] >= MIN_LABELLED_SHARE][:LABELLED]
    for n, (label, share, p) in enumerate(shown, start=1):
        ax.annotate(str(n), xy=(p["intensity"], p["flops_s"] / TERA), xytext=(-22 - 8 * (n % 2), -10 - 13 * (n - 1)),
                    textcoords="offset points", fontsize=9, fontweight="bold", color="dimgray", ha="center",
                    arrowprops={"arrowstyle": "-", "color": "silver", "lw": 0.6, "shrinkB": 3})
        ax.add_line(Line2D([], [], ls="", marker=f"${n}$", color="dimgray", label=f"{label}: {100 * share:.0f}% of the "
                                                                                 "GEMM time"))


def _arrow(ax: Any, m: Move, colour: str, i: int) -> None:
    """A finding's before → after arrow, its end labelled with the module (the ``i``-th
    finding's label to the right or the left, and lower, so that neighbours do not collide)."""
    x, y0, y1 = m.intensity, m.flops_s / TERA, m.flops_s_after / TERA
    ax.scatter([x], [y0], marker="D", s=60, facecolors="white", edgecolors=colour, linewidths=1.5, zorder=3)
    ax.scatter([x], [y1], marker="*", s=220, color=colour, edgecolors="black", linewidths=0.5, zorder=4, label=m.label)
    ax.annotate("", xy=(x, y1), xytext=(x, y0), zorder=3,
                arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 1.8, "shrinkA": 4, "shrinkB": 6})
    right = i % 2 == 0
    ax.annotate(m.finding.module, xy=(x, y1), xytext=(12 if right else -12, -12 * (i // 2)), textcoords="offset points",
                fontsize=9, color=colour, fontweight="bold", va="center", ha="left" if right else "right")


def _axes(ax: Any, r: Result, count: int, lo: float, hi: float) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(top=r.hardware.peak_tflops(r.precision) * 1.5)  # room above the roof for the arrows' ends
    plain = FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(plain)
        axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.tick_params(labelsize=9)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved TFLOP/s (useful FLOPs / est. time)")
    mode = "training" if r.training else "inference"
    ax.set_title(f"{r.target}: {count} GEMMs, {r.hardware.name}, {r.precision}, {mode}", fontsize=10)
    ax.grid(True, which="major", lw=0.4, alpha=0.6)
    handles, labels = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], marker="D", ls="-", color="black", markerfacecolor="white", markersize=6))
    labels.append("a finding: its GEMMs now → after its change (★)")
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.1), fontsize=8, ncol=1, frameon=False)


__all__ = ["Move", "check_path", "groups", "moves", "points", "render", "require_matplotlib"]
