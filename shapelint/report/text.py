"""``--format text``: the terminal report (rich; colour only on a terminal)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import IO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from shapelint.model.locations import ConfigLocation
from shapelint.model.records import Finding
from shapelint.physics.kernels import scan_note
from shapelint.pipeline.result import Result
from shapelint.report.parallel import communication_lines, layout_text, not_sharded_line
from shapelint.report.verification import finding_line

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def gemm_count_line(r: Result) -> str:
    fwd, bwd = r.capture.forward, r.capture.backward
    line = f"{fwd} forward + {bwd} backward = {fwd + bwd} GEMMs"
    if r.training and bwd == 2 * fwd - 1 and fwd > 0:
        line += f" (3n−1 for n = {fwd})"
    elif r.training and bwd == 2 * fwd and fwd > 0:
        line += f" (3n for n = {fwd})"
    return line


def _header(console: Console, r: Result) -> None:
    mode = "training" if r.training else "inference"
    tokens = f", {r.tokens} tokens/step" if r.tokens else ""
    tokens += layout_text(r)
    console.print(Text(r.target, style="bold"))
    console.print(f"  GPU {r.hardware.name} ({r.hardware.key}), {r.precision}, {mode}{tokens}")
    console.print(f"  {gemm_count_line(r)}")
    whole = not_sharded_line(r)
    if whole:
        console.print(f"  {whole}", highlight=False)


def step_line(r: Result) -> str:
    """``training step (est., h100-sxm, eager): 63.4 ms → 52.1 ms (1.22×)``."""
    before, after = r.step_time, r.step_time_after
    if before is None or after is None:
        return f"GEMM time per step (est., {r.hardware.key}): {r.step.ms:.3f} ms (GEMMs only)"
    what = "training step" if r.training else "inference step"
    bound = ", host-bound" if before.bound == "host" else ""
    speedup = before.ms / after.ms if after.ms else 1.0
    hosts = host_range(*before.ms_range, before.ms)
    return (f"{what} (est., {r.hardware.key}, {before.mode}{bound}): {before.ms:.1f} ms{hosts} → "
            f"{after.ms:.1f} ms ({speedup:.2f}×); GEMMs {100 * before.gemm_share:.0f}% of it")


def host_range(low: float, high: float, ms: float) -> str:
    """`` (41.2–79.5 ms by host)``: where the host bounds the step on some measured
    host, the step from the fastest to the slowest; nothing where the GPU bounds it."""
    if high - low < 0.005 * ms:
        return ""
    return f" ({low:.1f}–{high:.1f} ms by host)"


def graphs_line(r: Result) -> str | None:
    """Under ``--compile``, where dynamo splits the step into more graphs than one
    forward and one backward (``shapelint.load.compile_probe``), what that costs."""
    graphs = r.step_model.step.graphs if r.step_model is not None and r.step_model.mode == "compile" else None
    training = r.training
    if graphs is None or (graphs.extra_graphs(training) == 0 and graphs.forward_graphs > 0):
        return None
    host_ms = r.step_time.graphs_host_ms if r.step_time is not None else 0.0
    why = f" ({'; '.join(dict.fromkeys(graphs.reasons))})" if graphs.reasons else ""
    split = (f"{graphs.forward_graphs} forward + {graphs.backward_graphs} backward graphs" if training
             else f"{graphs.forward_graphs} graphs")
    return (f"torch.compile splits this step into {split}{why}, with {graphs.step_eager_ops(training)} ops run "
            f"eagerly between them: "
            f"est. {host_ms:.1f} ms of host time per step, in the estimate")


#: host reads listed one by one; more are counted
SHOWN_HOST_READS = 5


def trace_note_lines(r: Result) -> list[str]:
    """What the trace assumed: the host reads it answered (``shapelint.capture.host_reads``)
    and what it changed to run the step."""
    reads = r.capture.host_reads
    lines = [f"note: {read.describe()}" for read in reads[:SHOWN_HOST_READS]]
    if len(reads) > SHOWN_HOST_READS:
        lines.append(f"note: {len(reads) - SHOWN_HOST_READS} more host reads answered (--format json lists them)")
    return lines + [f"note: {note}" for note in r.capture.notes]


def gemm_line(r: Result) -> str:
    return (f"GEMMs alone (est.): {r.step.ms:.3f} ms → {r.step.ms_after:.3f} ms per step "
            f"({r.step.speedup:.2f}× on the GEMMs, not the step)")


def config_context(f: Finding) -> list[str]:
    """For a finding located in a config (``shapelint.locate.config_keys``): the keys that give
    the size when it is derived, or why no key does, and the library line of the layer."""
    loc = f.location
    out = _key_lines(loc) if loc is not None else []
    if f.pretrained is not None:
        out.append(f"pretrained checkpoint ({f.pretrained.why}): do not edit its config, "
                   + (f.pretrained.recipe or "its sizes are the ones its weights were trained at"))
    lib = loc.library_source if loc is not None else None
    if lib is not None:
        param = loc.code_parameter if loc is not None else None
        file = re.split(r"[/\\](?:site|dist)-packages[/\\]", lib.file)[-1]
        out.append(f"library line: {file}:{lib.line}" + (f" ({param})" if param and param != "size" else ""))
    return out


def _key_lines(loc: ConfigLocation) -> list[str]:
    """The keys a derived size is computed from, the keys edited with it, the keys of the
    same value, or why no key gives it."""
    out = []
    if loc.key is not None and loc.formula and (len(loc.keys) > 1 or " / tp" in loc.formula):
        values = ", ".join(f"{k.key} = {k.value} (line {k.line})" for k in loc.keys)
        out.append(f"set by {loc.formula}: {values}")
    if loc.together:
        out.append("with " + ", ".join(f"{k.key} (line {k.line})" for k in loc.together)
                   + ": the same vocabulary, changed with it")
    if loc.also:
        out.append("as are (same value): " + ", ".join(f"{k.key} (line {k.line})" for k in loc.also))
    if loc.note:
        out.append(f"no config key: {loc.note}")
    return out


def _finding(console: Console, f: Finding) -> None:
    console.print(_head(f))
    console.print(f"      {f.message}", highlight=False)
    if f.suggestion:
        console.print(Text.assemble("      fix: ", (str(f.suggestion), "green")), highlight=False)
    for line in config_context(f):
        console.print(f"      {line}", style="dim", highlight=False)
    if f.est_speedup is not None:
        console.print(f"      {_speedup_line(f, f.est_speedup)}", highlight=False)
    if f.step_ms_saved is not None and f.step_share is not None:
        console.print(f"      saves {f.step_ms_saved:.2f} ms per training step ({100 * f.step_share:.1f}% of it, "
                      f"est. {f.step_speedup or 1.0:.3f}× per step)", highlight=False)
        if f.step_note:
            console.print(f"      {f.step_note}", style="dim", highlight=False)
    for alt in f.alternatives:
        console.print(Text.assemble("      or: ", (str(alt.suggestion), "green"),
                                    f" ({alt.note}): est. {alt.est_speedup:.2f}×"), highlight=False)
    measured = finding_line(f.verification)
    if measured is not None:
        console.print(measured, highlight=False)
    if len(f.modules) > 1:
        console.print(f"      in {len(f.modules)} modules: {f.module}", style="dim", highlight=False)


def _head(f: Finding) -> Text:
    """``SL101 error   misaligned-leading-dim model.py:12``."""
    where = f" {f.source}" if f.source else ""
    sev = Text(f"{f.severity:7}", style=SEVERITY_STYLE.get(f.severity, ""))
    head = Text.assemble("  ", (f.code, "bold"), " ", sev, " ", (f.name, "dim"), where)
    if f.suppressed:
        head.append("  (suppressed)", style="dim")
    return head


def _speedup_line(f: Finding, speedup: float) -> str:
    """``est. 1.30× on these GEMMs (…)``, with the speedup ``--verify`` measured."""
    measured = f", measured {f.measured_speedup:.2f}×" if f.measured_speedup is not None else ""
    if f.gain == "throughput":
        what = "work per second on these GEMMs"
    else:
        what = f"on these GEMMs ({f.est_ms:.3f} ms → {f.est_ms_after:.3f} ms per step)"
    return f"est. {speedup:.2f}× {what}{measured}"


def gemm_table(r: Result) -> Table:
    total = sum(g.flops for g in r.capture.gemms) or 1
    t = Table(title=f"GEMMs of {r.target}", show_lines=False)
    for col in ("#", "module", "op", "phase", "m×n×k", "batch", "dtype", "FLOPs %", "est µs"):
        t.add_column(col, justify="right" if col in ("#", "batch", "FLOPs %", "est µs") else "left")
    for g, est in zip(r.capture.gemms, r.gemm_times):
        t.add_row(
            str(g.index), g.module, g.op, g.phase, f"{g.m}×{g.n}×{g.k}", str(g.batch), g.dtype,
            f"{100 * g.flops / total:.1f}", f"{est.seconds * 1e6:.1f}",
        )
    return t


def render(results: Sequence[Result], out: IO[str], *, verbose: bool = False, color: bool | None = None,
           show_suppressed: bool = False, quiet: bool = False) -> None:
    """The report; ``quiet``: the findings alone (no header, summary or blank lines)."""
    console = Console(file=out, force_terminal=color, no_color=color is False, width=None if color else 120,
                      highlight=False, soft_wrap=True)
    for r in results:
        if not quiet:
            _header(console, r)
        if verbose:
            console.print(gemm_table(r))
        _findings(console, [f for f in r.findings if show_suppressed or not f.suppressed])
        if not quiet:
            _footer(console, r)
            console.print()


def _findings(console: Console, shown: Sequence[Finding]) -> None:
    """The findings, under the module each is in, modules in order of their first finding."""
    by_module: dict[str, list[Finding]] = {}
    for f in shown:
        by_module.setdefault(f.module, []).append(f)
    for module, fs in by_module.items():
        console.print(Text.assemble("  module ", (module, "bold cyan")))
        for f in fs:
            _finding(console, f)


def _footer(console: Console, r: Result) -> None:
    """The count of findings and the step's estimate (and what ``--verify --step`` measured)."""
    n = sum(1 for f in r.findings if not f.suppressed)
    verdict = f"{n} finding{'s' if n != 1 else ''}" if n else "no findings"
    console.print(f"  {verdict}; {step_line(r)}", highlight=False)
    for line in communication_lines(r):
        console.print(f"  {line}", highlight=False)
    graphs = graphs_line(r)
    if graphs:
        console.print(f"  {graphs}", style="dim", highlight=False)
    if r.step_time is not None and r.step_time.note:
        console.print(f"  {r.step_time.note}", style="dim", highlight=False)
    scans = scan_note(op.name for op in r.capture.ops)
    if scans:
        console.print(f"  {scans}", style="dim", highlight=False)
    console.print(f"  {gemm_line(r)}", style="dim", highlight=False)
    for line in trace_note_lines(r):
        console.print(f"  {line}", style="dim", highlight=False, markup=False)  # source text has [...]
    if r.step_verification is not None:
        from shapelint.report.verification import report_lines

        for line in report_lines(r.step_verification):
            console.print(f"  {line}", highlight=False)


def statistics(results: Sequence[Result], out: IO[str], *, show_suppressed: bool = False) -> None:
    """``--statistics``: findings per rule code, most frequent first (like ruff and flake8)."""
    counts: dict[str, list] = {}  # code -> [count, name]
    suppressed: dict[str, int] = {}
    for r in results:
        for f in r.findings:
            if f.suppressed:
                suppressed[f.code] = suppressed.get(f.code, 0) + 1
                if show_suppressed:
                    counts.setdefault(f.code, [0, f.name])
            else:
                counts.setdefault(f.code, [0, f.name])[0] += 1
    rows = sorted(counts.items(), key=lambda kv: (-kv[1][0], kv[0]))
    width = max([len("count")] + [len(str(n)) for _, (n, _) in rows])
    out.write(f"{'count':>{width}}  code   name\n")
    for code, (n, name) in rows:
        extra = f"  ({suppressed[code]} suppressed)" if show_suppressed and suppressed.get(code) else ""
        out.write(f"{n:>{width}}  {code:<6} {name}{extra}\n")
    total = sum(n for _, (n, _) in rows)
    hidden = sum(suppressed.values())
    tail = f", {hidden} suppressed" if hidden else ""
    out.write(f"{total:>{width}}  total{tail}\n")
