"""Precision and recall of shapelint's findings on the real-model corpus, measured on a GPU (issue 9).

For every target of a corpus, as a user lints it (every built-in rule, the default
reporting policy, --batch/--seq): ``--corpus tests`` (default) the Hugging Face configs
under tests/corpus/*/config.json; ``--corpus real`` the issue-26 corpus under
benchmarks/real_corpus/ (each folder's model.py, where it has one, else its config.json:
timm, torchvision, diffusers and third-party model code need those packages installed).

- **precision**: each finding's premise is timed on the GPU with shapelint.measure.verify's
  machinery (the GEMMs it names, before and after its suggestion, with the recorded
  operand layouts; hand-written attention against the fused kernel as one block). A
  finding is *confirmed* when it measures at least the policy's min-speedup (what
  ``--verify`` requires), a *false alarm* when it does not, *not measured* when it
  carries no shapes to time. Its estimated speedup is within 25% of the measured one
  when |est / measured - 1| <= 0.25. A fused block (SL302's) is also timed as CUDA
  graphs on a GPU (``graph_speedup``, ``graph_within_25``): its GPU time, which the
  estimate prices; timed as issued, a block of small kernels runs at the host's pace.
- **recall**: every captured GEMM whose operands break the alignment rule
  (shapelint.physics.alignment) is timed as recorded and padded to the aligned size;
  the saving, over every GEMM sharing the misaligned leading dimensions, is a share of
  the model's estimated step (summary ``step_ms``). A misalignment whose saving on
  GEMMs no finding covers is >= 1% of the step is a *miss*, unless no knob the user
  owns aligns it (shapelint.locate.knobs.misalignment_without_knob: a view's row stride
  the algorithm sets, such as Longformer's 3w+1; a sequence or position size of GEMMs
  between activations, such as SpeechT5's 1023 frames): that is *no knob*, counted and
  shown on its own, with its reason. Recall is over the misalignments a knob aligns;
  ``recall_all`` counts the no-knob ones as missed too. Convolutions are left out
  (their channel alignment is SL401's, with its own measured table).

    python benchmarks/corpus_findings_gpu.py --out $OUT/corpus_findings.json [--budget-s 1500] [MODEL ...]
    python benchmarks/corpus_findings_gpu.py --corpus real --out $OUT/real_findings.json [MODEL ...]
    python benchmarks/corpus_findings_gpu.py --device cpu --tiny --out /tmp/smoke.json bert-base-uncased
    python benchmarks/corpus_findings_gpu.py --table $OUT/corpus_findings.json
    python benchmarks/corpus_findings_gpu.py --reclassify docs/data/corpus_findings_h100_*_kernels.json --out /tmp/r.json
        # saved runs' misalignments classified on the CPU as the script does now (timings kept)

Results are written after every model (a timeout keeps what was done). Needs torch,
transformers, pyyaml (and tomli on Python < 3.11); run from the repository root.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPORA = {"tests": ROOT / "tests" / "corpus", "real": ROOT / "benchmarks" / "real_corpus"}
#: modules shapelint needs here, and why (checked before anything is imported)
NEEDS = {"torch": "torch", "transformers": "transformers (builds the configs)", "yaml": "pyyaml (GPU profiles)",
         **({"tomli": "tomli (Python < 3.11)"} if sys.version_info < (3, 11) else {})}
DEPTH_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers", "encoder_layers", "decoder_layers")
MISS_SHARE = 0.01  # a misalignment costing this share of the step must be found
WITHIN = 0.25  # estimated vs measured speedup


class OutOfTime(Exception):
    pass


def check_deps() -> None:
    missing = [why for mod, why in NEEDS.items() if importlib.util.find_spec(mod) is None]
    if missing:
        sys.exit(f"corpus_findings_gpu: missing Python packages: {', '.join(missing)}; "
                 "install them (or run where they are), from the shapelint repository root")


def write(path: Path, doc: dict[str, Any]) -> None:
    doc["totals"] = totals(doc)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)


def corpus_targets(corpus: Path) -> dict[str, Path]:
    """Each folder of ``corpus`` that holds a target, by name: its model.py, else its config.json."""
    found = {folder.name: folder_target(folder) for folder in sorted(p for p in corpus.iterdir() if p.is_dir())}
    return {name: target for name, target in found.items() if target is not None}


def folder_target(folder: Path) -> Path | None:
    """The target a corpus folder holds: its model.py, else its config.json (None: neither)."""
    return next((folder / name for name in ("model.py", "config.json") if (folder / name).is_file()), None)


def target_of(model: str, corpus: str = "tests") -> Path:
    """The target this script lints for ``model`` of ``corpus`` (a name of :data:`CORPORA`)."""
    target = folder_target(CORPORA[corpus] / model)
    if target is None:
        raise FileNotFoundError(f"no target named {model} in {CORPORA[corpus]}")
    return target


def shrink(config: Path, folder: Path) -> Path:
    """--tiny: the config at 2 layers (each depth key), in ``folder``."""
    def small(d: Any) -> Any:
        if isinstance(d, dict):
            return {k: (min(v, 2) if k in DEPTH_KEYS and isinstance(v, int) else
                        [1] * len(v) if k == "depths" else
                        [[v[0][0], 1]] if k == "attention_types" else
                        v[:2] if k == "attention_window" and isinstance(v, list) else small(v)) for k, v in d.items()}
        return d
    out = folder / config.parent.name / "config.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(small(json.loads(config.read_text())), indent=2))
    return out


class Bench:
    """What one run measures with: the GPU profile, rules, timer and kernel runners."""

    def __init__(self, args: argparse.Namespace, deadline: float):
        from shapelint import hardware
        from shapelint.check import run as check
        from shapelint.measure import kernels, timer

        self.args, self.deadline = args, deadline
        cuda = args.device == "cuda"
        self.hw = hardware.resolve(args.gpu) if args.gpu else (hardware.default_gpu() if cuda else
                                                                hardware.resolve("h100"))
        self.rules = check.load_rules(())
        # CPU: a smoke test, timings mean nothing
        self.timer = timer.cuda_timer() if cuda else timer.wall_timer(reps=1, warmup=1)
        self.runner = kernels.gpu_runner(args.device)
        self.block_runner = kernels.gpu_block_runner(args.device)
        # the same blocks captured as CUDA graphs: their GPU time, which the estimate prices
        self.graph_runner = kernels.gpu_block_runner(args.device, graph=True) if cuda else None
        self.cache: dict[Any, float | None] = {}  # kernel key -> median ms

    def left(self) -> None:
        if time.monotonic() > self.deadline:
            raise OutOfTime

    def ms(self, g: Any) -> float | None:
        """Median time of the kernel ``g`` runs (0 for a part of a fused kernel timed with its first GEMM)."""
        from shapelint.measure.kernels import kernel_key
        from shapelint.measure.timer import Timing

        key = kernel_key(g)
        if key is None:
            return 0.0
        if key not in self.cache:
            self.left()
            fn = self.runner(g)
            self.cache[key] = Timing(tuple(self.timer(fn))).median if fn is not None else None
        return self.cache[key]


def aligned(g: Any, hw: Any) -> Any:
    """``g`` padded to the alignment rule (shapelint.physics.alignment.padded_to_alignment)."""
    from shapelint.physics.alignment import padded_to_alignment

    return padded_to_alignment(g, hw)


def findings_of(r: Any, bench: Bench, rows: list[dict[str, Any]]) -> None:
    """Each finding timed, appended to ``rows`` as it is done (what was done survives OutOfTime)."""
    from shapelint.measure import verify

    threshold = max(r.policy.min_speedup, 1.0)
    for f in r.findings:
        bench.left()
        row: dict[str, Any] = {
            "code": f.code, "module": f.module, "severity": f.severity,
            "suggestion": f.suggestion.to_json() if f.suggestion else None,
            "source": f.source.to_json() if f.source else None, "est_speedup": f.est_speedup,
            "est_ms": f.est_ms, "est_ms_after": f.est_ms_after, "est_step_share": f.step_share, "gain": f.gain}
        try:
            c = verify.check_finding(f, r.capture.gemms, r.hardware, bench.timer, bench.runner, bench.block_runner)
        except OutOfTime:
            raise
        except Exception as exc:  # a kernel that cannot run here: say so, go on
            c, row["error"] = None, f"{type(exc).__name__}: {exc}"[:300]
        if c is None or c.measured_speedup is None:
            row["status"] = "not measured"
        else:
            m = c.measured_speedup
            row.update(status="confirmed" if c.confirmed(threshold) else "false alarm", measured_speedup=m,
                       measured_ms=c.before_ms, measured_ms_after=c.after_ms,
                       within_25=None if f.est_speedup is None else abs(f.est_speedup / m - 1) <= WITHIN,
                       gemms=[{"index": x.index, "op": x.op, "phase": x.phase,
                               "before_ms": x.before.median if x.before else None,
                               "after_ms": x.after.median if x.after else None} for x in c.gemms])
            if not c.gemms and bench.graph_runner is not None:  # a fused block: its GPU time too
                row.update(graph_timed(f, r, bench))
        rows.append(row)


def graph_timed(f: Any, r: Any, bench: Bench) -> dict[str, Any]:
    """A fused block's before and after timed as CUDA graphs (``gpu_block_runner(graph=True)``):
    the GPU's time without the host's pace, which a block of small kernels timed as issued
    includes; where capture fails, the error."""
    from shapelint.measure import verify

    try:
        g = verify.check_finding(f, r.capture.gemms, r.hardware, bench.timer, bench.runner, bench.graph_runner)
    except OutOfTime:
        raise
    except Exception as exc:
        return {"graph_error": f"{type(exc).__name__}: {exc}"[:300]}
    if g is None or g.measured_speedup is None:
        return {}
    return {"graph_speedup": g.measured_speedup, "graph_ms": g.before_ms, "graph_ms_after": g.after_ms,
            "graph_within_25": None if f.est_speedup is None else abs(f.est_speedup / g.measured_speedup - 1) <= WITHIN}


def fixes(after: Any, before: Any, hw: Any) -> bool:
    """A finding's suggested shape aligns ``before`` (or removes one of its misaligned
    leading dimensions): the finding covers that GEMM's misalignment. A finding that
    names the GEMM for another reason (SL201's batch) does not."""
    from shapelint.physics.alignment import is_aligned, misaligned_leading_dims

    if is_aligned(before, hw):
        return False
    return is_aligned(after, hw) or misaligned_leading_dims(after, hw) < misaligned_leading_dims(before, hw)


def misalignments(r: Any, bench: Bench, step_ms: float) -> list[dict[str, Any]]:
    """Every misaligned leading dimension (grouped by the set of misaligned values, or
    ``offset`` when only an offset or batch stride breaks the rule), timed before and
    after padding, with the part of the saving on GEMMs no finding covers."""
    by_index = {g.index: g for g in r.capture.gemms}
    covered = {i for f in r.findings for i, after in zip(f.gemms, f.after) if fixes(after, by_index[i], r.hardware)}
    groups: dict[str, dict[str, Any]] = {}
    members = misaligned_groups(r.capture.gemms, r.hardware)
    for key, g in ((k, g) for k, gs in members.items() for g in gs):
        grp = groups.setdefault(key, {"leading_dims": key, "gemms": 0, "modules": [], "saving_ms": 0.0,
                                      "uncovered_ms": 0.0, "untimed": 0, "before_ms": 0.0})
        grp["gemms"] += 1
        if g.module not in grp["modules"] and len(grp["modules"]) < 4:
            grp["modules"].append(g.module)
        try:
            before, after = bench.ms(g), bench.ms(aligned(g, r.hardware))
        except OutOfTime:
            raise
        except Exception:
            before = after = None
        if before is None or after is None:
            grp["untimed"] += 1
            continue
        grp["before_ms"] += before
        grp["saving_ms"] += before - after
        if g.index not in covered:
            grp["uncovered_ms"] += before - after
    for key, grp in groups.items():
        grp["share"] = grp["saving_ms"] / step_ms if step_ms else None
        grp["uncovered_share"] = grp["uncovered_ms"] / step_ms if step_ms else None
        classify(grp, no_knob(key, members[key]))
    return sorted(groups.values(), key=lambda x: -x["saving_ms"])


def misaligned_groups(gemms: Any, hw: Any) -> dict[str, list[Any]]:
    """The misaligned GEMMs by key (shapelint.physics.alignment.misaligned_groups)."""
    from shapelint.physics.alignment import misaligned_groups as groups

    return groups(gemms, hw)


def classify(grp: dict[str, Any], reason: str | None) -> None:
    """A timed group's class: costly (>= MISS_SHARE of the step), and where that much of
    it is uncovered, a miss or (``reason``: why no knob aligns it) no knob."""
    grp["no_knob"] = reason
    grp["costly"] = bool(grp["share"] is not None and grp["share"] >= MISS_SHARE)
    uncovered = bool(grp["uncovered_share"] is not None and grp["uncovered_share"] >= MISS_SHARE)
    grp["miss"] = uncovered and reason is None
    grp["no_knob_uncovered"] = uncovered and reason is not None


def no_knob(key: str, gemms: list[Any]) -> str | None:
    """Why no knob aligns the misaligned leading dimensions ``key`` of ``gemms`` (each
    value's reason, where every value has one), or None: a layer size sets one of them."""
    from shapelint.locate.knobs import misalignment_without_knob

    if key == "offset":
        return None
    layer_dims = {d for g in gemms if g.phase == "grad_weight" for d in (g.m, g.n)}  # the weights' sizes
    reasons = [misalignment_without_knob(int(v), [g for g in gemms if int(v) in {g.a.ld, g.b.ld, g.out.ld}],
                                         layer_dims) for v in key.split(",")]
    return None if any(r is None for r in reasons) else "; ".join(dict.fromkeys(r for r in reasons if r))


def run_model(name: str, config: Path, bench: Bench) -> dict[str, Any]:
    from shapelint.pipeline.result import Options
    from shapelint.pipeline.run import lint_target

    start = time.perf_counter()
    model: dict[str, Any] = {"model": name, "config": str(config)}
    try:
        r = lint_target(config, Options(batch=bench.args.batch, seq=bench.args.seq), bench.hw, bench.rules)
    except Exception as exc:
        return {**model, "status": "lint error", "error": f"{type(exc).__name__}: {exc}"[:500]}
    step_ms = r.step_time.ms if r.step_time else r.step.ms
    model.update(lint_s=round(time.perf_counter() - start, 2), step_ms=step_ms,
                 gpu_ms=r.step_time.gpu_ms if r.step_time else None, gemm_count=len(r.capture.gemms),
                 tokens=r.tokens, gpu=r.hardware.key, status="partial", findings=[], misalignments=[])
    bench.cache.clear()
    try:
        findings_of(r, bench, model["findings"])
        model["misalignments"] = misalignments(r, bench, step_ms)
        model["status"] = "done"
    except OutOfTime:
        model["status"] = "out of time"
    if bench.args.device == "cuda":
        import torch

        torch.cuda.empty_cache()
    model["time_s"] = round(time.perf_counter() - start, 2)
    return model


def totals(doc: dict[str, Any]) -> dict[str, Any]:
    fs = [f for m in doc["models"] for f in m.get("findings", [])]
    return {"models": len(doc["models"]), "done": sum(m.get("status") == "done" for m in doc["models"]),
            **finding_totals(fs), **recall_totals(doc)}


def finding_totals(fs: list[dict[str, Any]]) -> dict[str, Any]:
    """Precision and the estimates against the measured speedups (as issued, and as CUDA graphs)."""
    conf = sum(f["status"] == "confirmed" for f in fs)
    false = sum(f["status"] == "false alarm" for f in fs)
    paired = [f for f in fs if f.get("within_25") is not None]
    return {"findings": len(fs), "confirmed": conf, "false_alarms": false,
            "not_measured": sum(f["status"] == "not measured" for f in fs),
            "precision": conf / (conf + false) if conf + false else None,
            "within_25": sum(bool(f["within_25"]) for f in paired), "compared": len(paired),
            "graph_within_25": sum(bool(f.get("graph_within_25")) for f in fs),
            "graph_compared": sum(f.get("graph_within_25") is not None for f in fs)}


def recall_totals(doc: dict[str, Any]) -> dict[str, Any]:
    """The costly misalignments, the misses and those no knob aligns."""
    costly = [x for m in doc["models"] if m.get("status") == "done" for x in m["misalignments"] if x["costly"]]
    misses = sum(x["miss"] for x in costly)
    # results saved before the no-knob class have no such key: all their misses had a knob
    without = sum(bool(x.get("no_knob_uncovered")) for x in costly)
    knob = len(costly) - without
    return {"costly_misalignments": len(costly), "misses": misses, "no_knob": without,
            "recall": (knob - misses) / knob if knob else None,
            "recall_all": (len(costly) - misses - without) / len(costly) if costly else None}


def reclassify(files: list[str], hw_key: str | None) -> dict[str, Any]:
    """Saved runs (a later file's model replaces an earlier one's) with the no-knob class
    added on the CPU: each done model re-linted at the run's batch and seq, each saved
    misalignment group classified by its key against the GEMMs of that lint (the GPU's
    timings kept). A key the lint no longer has keeps its saved class (``reclassified``
    False)."""
    from shapelint import hardware
    from shapelint.check import run as check
    from shapelint.pipeline.result import Options
    from shapelint.pipeline.run import lint_target

    docs = [json.loads(Path(f).read_text()) for f in files]
    doc = {**docs[0], "models": []}
    models: dict[str, dict[str, Any]] = {}
    for d in docs:
        models.update({m["model"]: m for m in d["models"]})
    hw = hardware.resolve(hw_key or doc["gpu_profile"])
    args = doc.get("args", {})
    targets = corpus_targets(CORPORA[args.get("corpus", "tests")])  # saved before --corpus: tests
    for name, m in models.items():
        if m.get("status") == "done" and name not in targets:  # a target since removed: kept as saved
            m["reclassified"] = False
        elif m.get("status") == "done":
            r = lint_target(targets[name], Options(batch=args.get("batch"), seq=args.get("seq")), hw,
                            check.load_rules(()))
            members = misaligned_groups(r.capture.gemms, hw)
            for grp in m["misalignments"]:
                key = grp["leading_dims"]
                grp["reclassified"] = key in members
                if key in members:
                    classify(grp, no_knob(key, members[key]))
        doc["models"].append(m)
    doc["reclassified"] = {"from": files, "env": environment(argparse.Namespace(device="cpu"))}
    doc["totals"] = totals(doc)
    return doc


def table(doc: dict[str, Any]) -> str:
    def x(v: Any, fmt: str = ".2f") -> str:
        return "-" if v is None else format(v, fmt)

    lines = [f"{'model':30} {'findings':>8} {'confirmed':>9} {'false':>5} {'misses':>6} {'step ms':>8}  status"]
    for m in doc["models"]:
        fs = m.get("findings", [])
        lines.append(f"{m['model'][:30]:30} {len(fs):>8} {sum(f['status'] == 'confirmed' for f in fs):>9} "
                     f"{sum(f['status'] == 'false alarm' for f in fs):>5} "
                     f"{sum(g['miss'] for g in m.get('misalignments', [])):>6} {x(m.get('step_ms'), '.1f'):>8}  "
                     f"{m['status']}{': ' + m['error'][:60] if m.get('error') else ''}")
        for f in fs:
            s = f["suggestion"]
            fix = f"{s['parameter']} {s['from']}→{s['to']}" if s else ""
            within = {True: "yes", False: "NO", None: "-"}[f.get("within_25")]
            graph = f" (as a CUDA graph {x(f['graph_speedup'])}×)" if f.get("graph_speedup") else ""
            lines.append(f"    {f['code']} {f['module'][:34]:34} {fix[:30]:30} est {x(f['est_speedup'])}× "
                         f"measured {x(f.get('measured_speedup'))}×{graph} within 25%: {within:3} {f['status']}")
        for g in m.get("misalignments", []):
            if g["miss"] or g.get("no_knob_uncovered"):
                what = "MISS" if g["miss"] else "NO KNOB"
                lines.append(f"    {what} ld {g['leading_dims']} ({g['modules'][0]}, {g['gemms']} GEMMs): "
                             f"{100 * g['uncovered_share']:.1f}% of the step uncovered"
                             + (f" ({g['uncovered_ms']:.2f} ms): {g['no_knob']}" if g.get("no_knob_uncovered") else ""))
    t = totals(doc)
    lines.append(f"precision {x(t['precision'], '.0%')} ({t['confirmed']} confirmed, {t['false_alarms']} false alarms, "
                 f"{t['not_measured']} not measured); recall {x(t['recall'], '.0%')} ({t['misses']} missed of "
                 f"{t['costly_misalignments'] - t['no_knob']} misalignments >= {MISS_SHARE:.0%} of a step that a knob "
                 f"aligns; {t['no_knob']} more no knob aligns, recall counting them {x(t['recall_all'], '.0%')}); "
                 "est within 25% of "
                 f"measured: {t['within_25']}/{t['compared']} (fused blocks as CUDA graphs: "
                 f"{t.get('graph_within_25', 0)}/{t.get('graph_compared', 0)}); {t['done']}/{t['models']} models done")
    return "\n".join(lines)


def environment(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import transformers

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    cuda = args.device == "cuda" and torch.cuda.is_available()
    return {"torch": torch.__version__, "transformers": transformers.__version__, "commit": commit,
            "device": torch.cuda.get_device_name() if cuda else "cpu", "python": sys.version.split()[0]}


def run_corpus(doc: dict[str, Any], targets: list[tuple[str, Path]], bench: Bench, out: Path) -> None:
    """Each target linted and measured in turn, ``doc`` written after each (a model past
    the budget is listed as out of time)."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, target in targets:
            if time.monotonic() > bench.deadline:
                doc["models"].append({"model": name, "status": "out of time"})
                continue
            config = shrink(target, Path(tmp)) if bench.args.tiny and target.name == "config.json" else target
            m = run_model(name, config, bench)
            doc["models"].append(m)
            write(out, doc)
            fs = m.get("findings", [])
            print(f"{name}: {m['status']}, {len(fs)} findings, "
                  f"{sum(g['miss'] for g in m.get('misalignments', []))} misses, {m.get('time_s', 0)} s", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", help="corpus folder names (default: all)")
    p.add_argument("--out", help="JSON results file (written after every model)")
    p.add_argument("--table", metavar="FILE", help="print the table of a saved results file and exit")
    p.add_argument("--corpus", choices=sorted(CORPORA), default="tests",
                   help="tests: tests/corpus's HF configs; real: benchmarks/real_corpus's targets")
    p.add_argument("--budget-s", type=float, default=3000.0, help="stop starting work after this many seconds")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--gpu", help="GPU profile to lint for (default: the local GPU's; on --device cpu, h100)")
    p.add_argument("--batch", type=int)
    p.add_argument("--seq", type=int)
    p.add_argument("--tiny", action="store_true",
                   help="smoke test: 2 layers (a config.json; a model.py builds as written), batch 1 x seq 64 "
                        "(unless given)")
    p.add_argument("--reclassify", nargs="+", metavar="FILE",
                   help="saved results (a later file's model replaces an earlier one's): re-lint each done model on "
                        "the CPU, classify its misalignments (no knob, miss), write --out and print the table")
    args = p.parse_args()
    if args.reclassify:
        if not args.out:
            p.error("--reclassify needs --out FILE")
        check_deps()
        sys.path.insert(0, str(ROOT))
        doc = reclassify(args.reclassify, args.gpu)
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
        print(table(doc))
        print(f"wrote {args.out}")
        return 0
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return 0
    if not args.out:
        p.error("--out FILE is required (or --table FILE)")
    check_deps()
    sys.path.insert(0, str(ROOT))
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("corpus_findings_gpu: no CUDA GPU (torch.cuda.is_available() is False); --device cpu --tiny smoke-tests")
    if args.tiny:
        args.batch, args.seq = args.batch or 1, args.seq or 64
    start = time.monotonic()
    bench = Bench(args, start + args.budget_s)
    corpus = CORPORA[args.corpus]
    found = corpus_targets(corpus)
    names = args.models or sorted(found)
    unknown = [n for n in names if n not in found]
    if unknown:
        sys.exit(f"corpus_findings_gpu: not in {corpus}: {', '.join(unknown)}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"env": environment(args), "args": {k: v for k, v in vars(args).items() if k != "table"},
                           "gpu_profile": bench.hw.key, "miss_share": MISS_SHARE, "models": []}
    run_corpus(doc, [(name, found[name]) for name in names], bench, out)
    doc["elapsed_s"] = round(time.monotonic() - start, 1)
    write(out, doc)
    print(table(doc))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
