"""`shapelint --verify --step` over real Hugging Face configs (issue 10, "Evidence"):
the estimated whole training step against the measured one, before and after every
suggestion, eager and under torch.compile.

For each model and mode this runs exactly what the CLI runs: the config is written
to a temporary folder as a config.json, linted (shapelint.lint.lint_target, the GPU's
own profile, bf16, the given batch x seq, --compile for compiled rows), then
shapelint.measure.step.verify_result builds the model for real (random weights),
applies the suggestions to a copy as --fix --unsafe-fixes would, and times before
against after in alternating blocks (see shapelint/measure/step.py).

Models (the configs of benchmarks/step_gpu_models.py, published hyperparameters):
GPT-2 small (vocab 50257), BERT-base MLM at 32 x 512 (vocab 30522), a Llama-style
model (8 layers, hidden 1600, 16 heads of head_dim 100 written as "head_dim": 100 as
Llama-3 configs do, SwiGLU 4352, vocab 32000, untied), OPT-125m, Qwen2.5-0.5B; and two
held out from everything the step model was built on (neither in tests/corpus nor among
the measured steps its constants came from): SmolLM-135M and OPT-350m; batch 8 x 1024
unless stated.

    python benchmarks/verify_step.py --out $OUT --models gpt2,bert,llama,opt,qwen2 --modes eager --budget-s 520
    python benchmarks/verify_step.py --device cpu --tiny --out /tmp/vstep     # smoke run, tiny configs
    python benchmarks/verify_step.py --table A/verify_step.json B/verify_step.json   # print saved runs' tables
    python benchmarks/verify_step.py --rescore docs/data/verify_step_h100_*.json --out /tmp/r   # every saved
        # run priced by the step model as it is now (CPU): writes /tmp/r/verify_rescore.json

Each result is written to OUT/verify_step.json as soon as it exists (a timeout keeps
what was done); the table is printed last. Runs as `python benchmarks/verify_step.py`
from the repository root without installing shapelint (it needs torch, transformers,
pyyaml and rich).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from step_gpu_models import SECTIONS  # noqa: E402  (pure data, the configs step_gpu.py measured)

SCHEMA = "shapelint.measure.step/1"

#: model -> (section of step_gpu_models, batch, seq, config overrides)
MODELS: dict[str, tuple[str, int, int, dict[str, Any]]] = {
    "gpt2": ("gpt2", 8, 1024, {}),
    "bert": ("bert", 32, 512, {}),
    "llama": ("llama", 8, 1024, {"head_dim": 100}),
    "opt": ("opt", 8, 1024, {}),
    "qwen2": ("qwen2", 8, 1024, {}),
    # held out: not in tests/corpus, not among the steps the step model's constants came from
    "smollm": ("smollm", 8, 1024, {}),
    "opt350": ("opt350", 8, 1024, {}),
    "pythia160": ("pythia160", 8, 1024, {}),
    "stablelm2": ("stablelm2", 8, 1024, {}),
    "tinyllama": ("tinyllama", 8, 1024, {}),
    "phi15": ("phi15", 8, 1024, {}),
    # held out from the host level as well (benchmarks/host_level.py)
    "smollm2_360": ("smollm2_360", 8, 1024, {}),
    "qwen3_06": ("qwen3_06", 8, 1024, {}),
    "pythia70": ("pythia70", 8, 1024, {}),
    "roberta": ("roberta", 32, 512, {}),
    "distilgpt2": ("distilgpt2", 8, 1024, {}),
    # held out from everything before run 9 (2026-11-25), the host level included
    "gpt2_medium": ("gpt2_medium", 8, 1024, {}),
    "bert_large": ("bert_large", 32, 512, {}),
    "camembert": ("camembert", 32, 512, {}),
    "llama32_1b": ("llama32_1b", 8, 1024, {}),
    "marian": ("marian", 8, 512, {}),
    "mpnet": ("mpnet", 32, 512, {}),
    "blenderbot_small": ("blenderbot_small", 8, 512, {}),
    "pegasus_xsum": ("pegasus_xsum", 8, 512, {}),
    "xglm_564m": ("xglm_564m", 8, 1024, {}),
    "opt_1_3b": ("opt_1_3b", 8, 1024, {}),
}
MODES = ("eager", "compile")

#: estimated seconds per (model, mode) on an H100 host (16 cores): lint on the CPU, two
#: builds (one for OPT and Qwen2.5, which have no finding), warm-up, 2 x 50 timed steps,
#: and under compile one cold Inductor compilation per variant (forward + backward)
EST_S: dict[tuple[str, str], float] = {
    ("gpt2", "eager"): 30, ("bert", "eager"): 35, ("llama", "eager"): 30, ("opt", "eager"): 20,
    ("qwen2", "eager"): 35,
    ("gpt2", "compile"): 130, ("bert", "compile"): 120, ("llama", "compile"): 110, ("opt", "compile"): 70,
    ("qwen2", "compile"): 110, ("smollm", "eager"): 30, ("smollm", "compile"): 100, ("opt350", "eager"): 25,
    ("opt350", "compile"): 90, ("pythia160", "eager"): 25, ("pythia160", "compile"): 80,
    ("stablelm2", "eager"): 50, ("stablelm2", "compile"): 120, ("tinyllama", "eager"): 45,
    ("tinyllama", "compile"): 120, ("phi15", "eager"): 50, ("phi15", "compile"): 120,
    ("smollm2_360", "eager"): 35, ("smollm2_360", "compile"): 110, ("qwen3_06", "eager"): 40,
    ("qwen3_06", "compile"): 110, ("pythia70", "eager"): 20, ("pythia70", "compile"): 60,
    ("roberta", "eager"): 40, ("roberta", "compile"): 150, ("distilgpt2", "eager"): 30,
    ("distilgpt2", "compile"): 130, ("gpt2_medium", "eager"): 45, ("gpt2_medium", "compile"): 160,
    ("bert_large", "eager"): 50, ("bert_large", "compile"): 150, ("camembert", "eager"): 40,
    ("camembert", "compile"): 130, ("llama32_1b", "eager"): 60, ("llama32_1b", "compile"): 150,
    ("marian", "eager"): 35, ("marian", "compile"): 140, ("mpnet", "eager"): 45, ("mpnet", "compile"): 130,
    ("blenderbot_small", "eager"): 35, ("blenderbot_small", "compile"): 120, ("pegasus_xsum", "eager"): 60,
    ("pegasus_xsum", "compile"): 250, ("xglm_564m", "eager"): 60, ("xglm_564m", "compile"): 160,
    ("opt_1_3b", "eager"): 60, ("opt_1_3b", "compile"): 130,
}

#: --tiny: the same architectures shrunk for a CPU smoke run, the vocabularies kept
#: (they carry the findings), head_dim kept misaligned for the Llama
TINY: dict[str, dict[str, Any]] = {
    "gpt2": {"n_layer": 1, "n_embd": 64, "n_head": 4, "n_positions": 64},
    "bert": {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
             "max_position_embeddings": 64},
    "llama": {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
              "head_dim": 18, "intermediate_size": 128, "max_position_embeddings": 64},
    "opt": {"num_hidden_layers": 1, "hidden_size": 64, "word_embed_proj_dim": 64, "num_attention_heads": 4,
            "ffn_dim": 128, "max_position_embeddings": 64},
    "qwen2": {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 128, "max_position_embeddings": 64},
    "smollm": {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
               "intermediate_size": 128, "max_position_embeddings": 64},
    "opt350": {"num_hidden_layers": 1, "hidden_size": 64, "word_embed_proj_dim": 32, "num_attention_heads": 4,
               "ffn_dim": 128, "max_position_embeddings": 64},
    "pythia160": {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
                  "max_position_embeddings": 64},
    "stablelm2": {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
                  "intermediate_size": 128, "max_position_embeddings": 64},
    "tinyllama": {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "intermediate_size": 128, "max_position_embeddings": 64},
    "phi15": {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
              "max_position_embeddings": 64},
    "smollm2_360": {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
                    "intermediate_size": 128, "max_position_embeddings": 64},
    "qwen3_06": {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
                 "head_dim": 16, "intermediate_size": 128, "max_position_embeddings": 64},
    "pythia70": {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
                 "max_position_embeddings": 64},
    "roberta": {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
                "max_position_embeddings": 66},
    "distilgpt2": {"n_layer": 1, "n_embd": 64, "n_head": 4, "n_positions": 64},
    "gpt2_medium": {"n_layer": 1, "n_embd": 64, "n_head": 4, "n_positions": 64},
    "bert_large": {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
                   "max_position_embeddings": 64},
    "camembert": {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
                  "max_position_embeddings": 66},
    "llama32_1b": {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "head_dim": 16, "intermediate_size": 128, "max_position_embeddings": 64},
    "marian": {"encoder_layers": 1, "decoder_layers": 1, "d_model": 64, "encoder_attention_heads": 4,
               "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
               "max_position_embeddings": 64},
    "mpnet": {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
              "max_position_embeddings": 66},
    "blenderbot_small": {"encoder_layers": 1, "decoder_layers": 1, "d_model": 64, "encoder_attention_heads": 4,
                         "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
                         "max_position_embeddings": 64},
    "pegasus_xsum": {"encoder_layers": 1, "decoder_layers": 1, "d_model": 64, "encoder_attention_heads": 4,
                     "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
                     "max_position_embeddings": 64},
    "xglm_564m": {"num_layers": 1, "d_model": 64, "attention_heads": 4, "ffn_dim": 128, "max_position_embeddings": 64},
    "opt_1_3b": {"num_hidden_layers": 1, "hidden_size": 64, "word_embed_proj_dim": 64, "num_attention_heads": 4,
                 "ffn_dim": 128, "max_position_embeddings": 64},
}
TINY_BATCH, TINY_SEQ = 2, 32

T0 = time.monotonic()


def log(*a: Any) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s]", *a, flush=True)


def importable_rules() -> None:
    """shapelint.rules is the repository's rules/ folder, mapped by the package's install;
    run from a checkout without installing, map it here."""
    try:
        import shapelint.rules  # noqa: F401
        return
    except ImportError:
        pass
    from checkout import map_rules

    map_rules()


def config_for(model: str, tiny: bool) -> tuple[dict[str, Any], int, int]:
    section, batch, seq, overrides = MODELS[model]
    cfg = {**SECTIONS[section]["config"], **overrides, "architectures": [SECTIONS[section]["architecture"]]}
    if tiny:
        cfg.update(TINY[model])
        batch, seq = TINY_BATCH, TINY_SEQ
    return cfg, batch, seq


def environment(device: str) -> dict[str, Any]:
    import torch
    import transformers
    from step_gpu import environment as step_gpu_environment  # GPU, driver, clocks, Inductor settings

    env = step_gpu_environment(torch, transformers, device)
    env["date"] = _dt.date.today().isoformat()
    try:
        import shapelint

        env["shapelint"] = shapelint.__version__
    except Exception:  # noqa: BLE001
        env["shapelint"] = None
    return env


class Results:
    def __init__(self, path: Path, env: dict[str, Any], argv: list[str]) -> None:
        self.path = path
        self.doc: dict[str, Any] = {"schema": SCHEMA, "env": env, "argv": argv, "records": [], "skipped": [],
                                    "errors": []}
        self.flush()

    def add(self, key: str, item: dict[str, Any]) -> None:
        self.doc[key].append(item)
        self.flush()

    def flush(self) -> None:
        self.doc["elapsed_s"] = round(time.monotonic() - T0, 1)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1))
        os.replace(tmp, self.path)


def run_one(model: str, mode: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Lint one config and verify its step, as `shapelint CONFIG --verify --step [--compile]` does."""
    from shapelint import hardware
    from shapelint.check.run import builtin_rules
    from shapelint.measure import step as verify_step
    from shapelint.measure.step_blocks import Schedule
    from shapelint.pipeline.result import Options
    from shapelint.pipeline.run import lint_target
    from shapelint.price import Policy
    from shapelint.report.verification import report_lines

    cfg, batch, seq = config_for(model, args.tiny)
    path = folder / model / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(cfg, indent=2) + "\n")
    hw = hardware.resolve(args.gpu) if args.gpu else hardware.default_gpu()
    # tiny steps are host-bound: keep the findings; --min-step-share 0 measures the findings
    # the policy would not report (under --compile: what Inductor leaves of a vocabulary fix)
    share = 0.0 if args.tiny else args.min_step_share
    policy = Policy() if share is None else Policy(min_step_share=share)
    opts = Options(batch=batch, seq=seq, compile=mode == "compile", dtype=args.dtype, policy=policy)
    t = time.monotonic()
    r = lint_target(path, opts, hw, builtin_rules())
    lint_s = time.monotonic() - t
    log(f"  linted in {lint_s:.1f} s: " + (", ".join(f"{f.code} {f.suggestion}" for f in r.findings) or "no findings"))
    schedule = Schedule(args.rounds, args.steps, args.warmup)
    t = time.monotonic()
    v = verify_step.verify_result(r, verify_step.RunOptions(
        device=args.device, schedule=schedule, backend=args.backend, note=lambda m: log("  " + m)))
    verify_s = time.monotonic() - t
    for line in report_lines(v):
        log("  " + line)
    this_host = None
    if args.host_speed and r.step_model is not None:  # the same estimate at this machine's host rate
        from dataclasses import replace

        from shapelint.price.step import step_time

        sm = r.step_model
        from shapelint.measure.calibrate import host_table

        rated = replace(hw, step=replace(hw.step, **host_table(hw, *args.host_speed)))
        this_host = round(step_time(sm.step, rated, sm.mode, sm.optimizer).ms, 3)
        log(f"  est. at this host's speed ({args.host_speed} x the profile's host costs): {this_host:.1f} ms")
    return {"model": model, "mode": mode, "batch": batch, "seq": seq, "tokens": r.tokens, "profile": hw.key,
            "precision": r.precision, "config": cfg, "lint_s": round(lint_s, 1), "verify_s": round(verify_s, 1),
            "findings": [{"code": f.code, "module": f.module, "suggestion": f.suggestion.to_json() if f.suggestion
                          else None, "step_ms_saved": f.step_ms_saved} for f in r.findings],
            "step": r.step_time.to_json() if r.step_time else None,
            "step_after": r.step_time_after.to_json() if r.step_time_after else None,
            "step_verification": v.to_json(), "est_ms_this_host": this_host}


def _f(x: Any, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _error(est: float | None, measured: float | None) -> float | None:
    return est / measured - 1 if est and measured else None


def table(doc: dict[str, Any]) -> str:
    env = doc.get("env", {})
    out = [f"{env.get('gpu') or env.get('device')} | driver {env.get('driver')} | torch {env.get('torch')} | "
           f"transformers {env.get('transformers')} | {env.get('date_utc') or env.get('date')}",
           "",
           "| model | mode | batch×seq | applied | est. ms | est. ms after | measured ms | measured ms after "
           "| est. × | measured × | abs. error | speedup error | confirmed | est. ms at this host | its error |",
           "|" + "---|" * 15]
    notes = []
    for rec in doc.get("records", []):
        v = rec["step_verification"]
        applied = ", ".join(f"{e['code']} {e['suggestion']['parameter']} {e['suggestion']['from']}→"
                            f"{e['suggestion']['to']}" for e in v["findings"] if e.get("suggestion")) or "none"
        confirmed = {True: "yes", False: "no", None: "-"}[v.get("confirmed")]
        abs_err = v.get("est_error")
        sp_err = v.get("speedup_error")
        here = rec.get("est_ms_this_host")
        out.append(f"| {rec['model']} | {rec['mode']} | {rec['batch']}×{rec['seq']} | {applied} "
                   f"| {_f(v['est_ms'], '.1f')} | {_f(v['est_ms_after'] if v.get('measured_ms_after') else None, '.1f')} "
                   f"| {_f(v['measured_ms'], '.1f')} | {_f(v.get('measured_ms_after'), '.1f')} "
                   f"| {_f(v['est_speedup'] if v.get('measured_speedup') else None, '.3f')} "
                   f"| {_f(v.get('measured_speedup'), '.3f')} "
                   f"| {_pct(abs_err)} | {_pct(sp_err)} | {confirmed} "
                   f"| {_f(here, '.1f')} | {_pct(_error(here, v['measured_ms']))} |")
        notes += [f"{rec['model']} {rec['mode']}: not applied: {n['code']} {n['suggestion']}: {n['reason']}"
                  for n in v.get("not_applied", [])]
    out += notes
    for s in doc.get("skipped", []):
        out.append(f"skipped: {s}")
    for e in doc.get("errors", []):
        out.append(f"error: {e.get('model')} {e.get('mode')}: {e.get('error')}")
    return "\n".join(out)


def rescore(files: list[str], gpu: str | None) -> tuple[str, list[dict[str, Any]]]:
    """The recorded runs of ``files`` priced by the step model as it is now (CPU, no GPU):
    each record's config linted again in its mode and size, on the profile it was
    estimated on, the findings it applied matched by code, module and suggestion; its
    estimate then, now, and the measurement. Changing the model and rescoring every
    earlier run shows what the change does to every row, not only the one it targets."""
    from shapelint import hardware
    from shapelint.check.run import builtin_rules
    from shapelint.pipeline.result import Options
    from shapelint.pipeline.run import lint_target
    from shapelint.price import Policy

    out = ["| run | model | mode | applied | measured ms | est. then | est. now | error now | measured × | "
           "est. × then | est. × now | speedup error now |", "|" + "---|" * 12]
    abs_ok = speed_ok = abs_n = speed_n = 0
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="verify-step-rescore-") as folder:
        for file in files:
            doc = json.loads(Path(file).read_text())
            run = Path(file).stem.removeprefix("verify_step_")
            for rec in doc.get("records", []):
                v = rec["step_verification"]
                path = Path(folder) / run / rec["model"] / rec["mode"] / "config.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(rec["config"], indent=2) + "\n")
                hw = hardware.resolve(gpu or rec.get("profile") or "h100")
                opts = Options(batch=rec["batch"], seq=rec["seq"], compile=rec["mode"] == "compile",
                               dtype=rec.get("precision"), policy=Policy(min_step_share=0.0))
                r = lint_target(path, opts, hw, builtin_rules())
                assert r.step_time is not None and r.step_model is not None
                wanted = {(e["code"], e["module"], json.dumps(e["suggestion"], sort_keys=True)) for e in v["findings"]}
                applied = [f for f in r.findings if (f.code, f.module, json.dumps(
                    f.suggestion.to_json() if f.suggestion else None, sort_keys=True)) in wanted]
                now, measured = r.step_time.ms, v["measured_ms"]
                after_now = r.step_model.after(applied).ms if applied else None
                sp_now = now / after_now if after_now and v.get("measured_speedup") else None
                err = _error(now, measured)
                sp_err = _error(sp_now, v.get("measured_speedup"))
                abs_n += 1
                abs_ok += err is not None and abs(err) <= 0.25
                if sp_err is not None:
                    speed_n += 1
                    speed_ok += abs(sp_err) <= 0.10
                what = ", ".join(f"{e['code']} {e['suggestion']['from']}→{e['suggestion']['to']}"
                                 for e in v["findings"] if e.get("suggestion")) or "none"
                if v["findings"] and len(applied) != len(v["findings"]):
                    what += " (not all found now)"
                out.append(f"| {run} | {rec['model']} | {rec['mode']} | {what} | {_f(measured, '.1f')} "
                           f"| {_f(v['est_ms'], '.1f')} | {_f(now, '.1f')} | {_pct(err)} "
                           f"| {_f(v.get('measured_speedup'), '.3f')} "
                           f"| {_f(v['est_speedup'] if v.get('measured_speedup') else None, '.3f')} "
                           f"| {_f(sp_now, '.3f')} | {_pct(sp_err)} |")
                rows.append({"run": run, "model": rec["model"], "mode": rec["mode"], "applied": what,
                             "measured_ms": measured, "est_ms_then": v["est_ms"], "est_ms_now": round(now, 3),
                             "error_now": err, "measured_speedup": v.get("measured_speedup"),
                             "est_speedup_now": sp_now, "speedup_error_now": sp_err})
                log(f"rescored {run} {rec['model']} {rec['mode']}: {now:.1f} ms (measured {measured:.1f})")
    out.append(f"\nsteps within 25%: {abs_ok} of {abs_n}; speedups within 10%: {speed_ok} of {speed_n}")
    return "\n".join(out), rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "verify_step_out"))
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma list of {', '.join(MODELS)}")
    ap.add_argument("--modes", default=",".join(MODES), help="comma list of eager, compile")
    ap.add_argument("--budget-s", type=float, default=520.0,
                    help="wall budget: a model/mode whose estimated time no longer fits is skipped")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--tiny", action="store_true", help="tiny configs (CPU smoke run)")
    ap.add_argument("--gpu", help="the GPU profile to estimate on (default: the local GPU's)")
    ap.add_argument("--dtype", help="the lint's precision (default bf16; --tiny on the CPU: tf32, which the "
                                    "CPU runs in fp32, fast)")
    ap.add_argument("--backend", default="inductor", help="torch.compile backend (eager: a quick CPU smoke run)")
    ap.add_argument("--rounds", type=int, help="alternating blocks per variant (default 5; --tiny on the CPU: 2)")
    ap.add_argument("--steps", type=int, help="steps per block (default 10; --tiny on the CPU: 2)")
    ap.add_argument("--warmup", type=int, help="untimed steps after the first (default 3; --tiny on the CPU: 1)")
    ap.add_argument("--min-step-share", type=float,
                    help="report findings down to this share of the step (default: the policy's 1%%; 0 applies and "
                         "measures every finding, also those the report leaves out as too small)")
    ap.add_argument("--host-probe", action="store_true",
                    help="measure how fast this machine's host issues a step first (shapelint calibrate's probe) "
                         "and give each estimate at that speed too")
    ap.add_argument("--table", nargs="+", metavar="FILE", help="print the table of saved result files and exit")
    ap.add_argument("--rescore", nargs="+", metavar="FILE",
                    help="price the recorded runs of saved result files with the step model as it is now (CPU) "
                         "and print estimate then, now and measured")
    args = ap.parse_args()
    if args.rescore:
        importable_rules()
        text, rows = rescore(args.rescore, args.gpu)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        import torch
        import transformers

        # the compile probe follows the installed transformers: rescore with the version the runs had
        rescored_with = {"torch": torch.__version__, "transformers": transformers.__version__,
                         "date": _dt.date.today().isoformat()}
        (out / "verify_rescore.json").write_text(json.dumps({"files": args.rescore, "rescored_with": rescored_with,
                                                             "rows": rows}, indent=1))
        print(text)
        return 0
    if args.table:
        for file in args.table:
            print(table(json.loads(Path(file).read_text())) + "\n")
        return 0
    models = [m for m in args.models.split(",") if m]
    modes = [m for m in args.modes.split(",") if m]
    for m in models:
        if m not in MODELS:
            ap.error(f"unknown model {m}; known: {', '.join(MODELS)}")
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m}; known: {', '.join(MODES)}")
    if args.tiny and args.device == "cpu":
        args.dtype = args.dtype or "tf32"
        args.rounds, args.steps, args.warmup = args.rounds or 2, args.steps or 2, args.warmup or 1
    args.rounds, args.steps, args.warmup = args.rounds or 5, args.steps or 10, args.warmup or 3
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device (use --device cpu --tiny for a smoke run)", file=sys.stderr)
        return 2
    importable_rules()
    env = environment(args.device)
    log("env:", json.dumps({k: v for k, v in env.items() if k != "nvidia_smi"}))
    args.host_speed = None
    if args.host_probe and args.device == "cuda":
        from shapelint import hardware
        from shapelint.measure.calibrate import host_speed

        probe_hw = hardware.resolve(args.gpu) if args.gpu else hardware.default_gpu()
        args.host_speed = (host_speed(False, probe_hw), host_speed(True, probe_hw) if "compile" in modes else None)
        env["host_speed"], env["compile_host_speed"] = args.host_speed
        log(f"host probe: this host runs at {args.host_speed} x the profile's host costs (eager, compiled)")
    res = Results(out / "verify_step.json", env, sys.argv[1:])
    deadline = T0 + args.budget_s
    scale = 0.05 if args.tiny else 1.0
    with tempfile.TemporaryDirectory(prefix="verify-step-configs-") as folder:
        for mode in modes:  # eager rows first: they are quick
            for model in models:
                est = EST_S[(model, mode)] * scale
                left = deadline - time.monotonic()
                if left < est:
                    log(f"skip {model} {mode}: {left:.0f} s left < estimated {est:.0f} s")
                    res.add("skipped", {"model": model, "mode": mode, "left_s": round(left), "est_s": est})
                    continue
                log(f"== {model} {mode} (est. {est:.0f} s, {left:.0f} s left)")
                t = time.monotonic()
                try:
                    rec = run_one(model, mode, args, Path(folder))
                    rec["wall_s"] = round(time.monotonic() - t, 1)
                    res.add("records", rec)
                except Exception as exc:  # noqa: BLE001 - one failed row must not lose the others
                    log(f"!! {model} {mode} failed: {exc!r}")
                    res.add("errors", {"model": model, "mode": mode, "error": repr(exc)[:2000],
                                       "traceback": traceback.format_exc()[-3000:]})
                    if args.device == "cuda":
                        torch.cuda.empty_cache()
    if args.device == "cuda":
        from step_gpu import gpu_state

        res.doc["env"]["gpu_state_end"] = gpu_state()
        res.flush()
    print("\n" + table(res.doc), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
