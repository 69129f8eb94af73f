"""``--plot FILE.png|svg``: each target's GEMMs on the GPU's roofline.

The roof is ``min(peak, bandwidth × intensity)`` with the profile's peak for the
target's precision (``Hardware.peak_tflops``) and its memory bandwidth. Each GEMM is
a point at (arithmetic intensity, achieved FLOP/s = useful FLOPs / estimated time),
its size the GEMM's share of the step's GEMM time. GEMMs that a finding covers get a
second point, after the suggested change (same useful FLOPs over the estimated time
after it), joined to the first by an arrow.

Needs matplotlib (``pip install 'shapelint[plot]'``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shapelint.errors import ShapelintError
from shapelint.pipeline.result import Result

SUFFIXES = (".png", ".svg")
INSTALL_HINT = "pip install 'shapelint[plot]'"


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
    """One entry per GEMM: intensity, FLOP/s before and (if a finding covers it) after, share."""
    before = {g.index: est.seconds for g, est in zip(r.capture.gemms, r.gemm_times)}
    after: dict[int, float] = {}
    for f in r.findings:
        if f.suppressed:
            continue
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
            "intensity": g.intensity,
            "flops_s": g.flops / t if t > 0 else 0.0,
            "flops_s_after": g.flops / after[g.index] if g.index in after and after[g.index] < t else None,
            "share": t / total,
        })
    return out


def render(results: Sequence[Result], path: str) -> None:
    check_path(path)
    require_matplotlib()
    from matplotlib.figure import Figure

    n = max(1, len(results))
    fig = Figure(figsize=(8, 5.5 * n), layout="constrained")
    axes = fig.subplots(n, 1, squeeze=False)[:, 0]
    for ax, r in zip(axes, results):
        _roofline(ax, r)
    try:
        fig.savefig(path, dpi=120)
    except OSError as exc:
        raise ShapelintError(f"--plot {path}: {exc.strerror or exc}") from exc


def _roofline(ax: Any, r: Result) -> None:
    hw = r.hardware
    peak = hw.peak_tflops(r.precision) * 1e12
    bw = hw.bandwidth
    pts = points(r)
    xs = [p["intensity"] for p in pts] or [1.0]
    lo = min(min(xs) / 4, peak / bw / 20)
    hi = max(max(xs) * 4, peak / bw * 20)
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    tf = 1e12
    ax.plot(grid, [min(peak, bw * x) / tf for x in grid], color="black", lw=1.5,
            label=f"roofline: {peak / tf:.0f} TFLOP/s {r.precision}, {bw / 1e12:.2f} TB/s")
    ax.axvline(peak / bw, color="grey", lw=0.8, ls=":")
    sizes = [20 + 600 * p["share"] for p in pts]
    ax.scatter([p["intensity"] for p in pts], [p["flops_s"] / tf for p in pts], s=sizes,
               color="tab:red", alpha=0.55, edgecolors="black", linewidths=0.5, label="GEMM (est.)")
    _after(ax, [p for p in pts if p["flops_s_after"] is not None], tf)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved TFLOP/s (useful FLOPs / est. time)")
    mode = "training" if r.training else "inference"
    ax.set_title(f"{r.target}: {len(pts)} GEMMs, {hw.name}, {mode}", fontsize=10)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(loc="lower right", fontsize=8)


def _after(ax: Any, moved: Sequence[dict[str, Any]], tf: float) -> None:
    """The GEMMs a finding covers, after its change, each joined to where it was by an arrow."""
    if not moved:
        return
    ax.scatter([p["intensity"] for p in moved], [p["flops_s_after"] / tf for p in moved],
               s=[20 + 600 * p["share"] for p in moved], color="tab:green", alpha=0.55,
               edgecolors="black", linewidths=0.5, label="after the suggestions")
    for p in moved:
        ax.annotate("", xy=(p["intensity"], p["flops_s_after"] / tf), xytext=(p["intensity"], p["flops_s"] / tf),
                    arrowprops={"arrowstyle": "->", "color": "tab:green", "lw": 0.8})
