"""``shapelint calibrate``'s parallel host probe: how fast this host runs each parallel
engine's host work, against the typical host the shipped ``host_us`` costs describe.

The one-GPU host probe (:func:`shapelint.measure.calibrate.host_speed`, a GPT-2-shaped
eager step) sets the speed of the one-GPU step's host costs. It did not rank hosts the
way their DDP, FSDP2 and DTensor steps did (docs/multi-gpu.md): the engines' work is
Python hooks, DTensor dispatch and per-tensor bookkeeping, which a host runs at a speed
of its own. So where calibrate has two GPUs or more it also trains the probe of
:mod:`shapelint.measure.parallel_host_worker` (a narrow MLP stack whose steps are all
host work) one GPU per rank and under each engine, and reads each engine's speed off
what that engine adds to the one-GPU step:

    speed(engine) = Σ (measured(layout) − measured(none) − modelled other) / Σ modelled engine

(measured(layout) − measured(none): the median over rounds of each round's difference,
the one-GPU step timed just before the layout's, so that the host's drift between
rounds cancels)

over the probe's variants, the modelled terms being the pricer's own for the same model
and layout on the base profile (:func:`shapelint.pipeline.run.lint_module`): the
engine's ``host_us`` terms (``Communication.host_ms``), and whatever else the layout
changes in the modelled host time (nothing, for this probe). The one-GPU step's own
host work cancels in the difference, measured and modelled alike. The calibrated
profile's ``host_us`` are the base's terms times their engine's speed
(:func:`shapelint.hardware.collectives.host_costs_by_engine`): the terms exist once, in
the profile; the probe only measures.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shapelint.errors import ShapelintError
from shapelint.hardware import Hardware
from shapelint.hardware.collectives import ENGINE_HOST_KEYS
from shapelint.measure.torchrun import ranks_json

#: seconds the ranks may take (NCCL start, 2 variants x 4 layouts x ~60 host-bound steps)
TIMEOUT_S = 300
#: the speeds a probe may report: outside, the difference it reads is noise or a
#: broken step rather than a host (a refusal, said in one line, keeps the profile's
#: host costs at the one-GPU probe's speed)
SPEED_BOUNDS = (0.2, 5.0)


@dataclass(frozen=True)
class EngineSpeed:
    """One engine's host speed (against the base profile's ``host_us``) and what it was read from."""

    engine: str
    speed: float
    #: ms per step the engine added to the one-GPU step, measured and modelled (summed over variants)
    measured_ms: float
    modelled_ms: float


def measure(world: int, device: str = "cuda", rounds: int | None = None, steps: int | None = None,
            timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
    """Run the probe on ``world`` ranks of this machine (``device`` "cpu": gloo, the
    tests); the worker's JSON (``steps``: variant, layout, ms)."""
    with tempfile.TemporaryDirectory(prefix="shapelint-parallel-host-") as tmp:
        got = Path(tmp, "parallel_host.json")
        args = [str(got), "--device", device]
        args += ["--rounds", str(rounds)] if rounds is not None else []
        args += ["--steps", str(steps)] if steps is not None else []
        return dict(ranks_json(world, "shapelint.measure.parallel_host_worker", args, got, timeout_s,
                               f"calibrate: parallel host probe on {world} ranks",
                               f"calibrate: the parallel host probe on {world} ranks failed",
                               "; --no-collectives skips it"))


def modelled(variant: str, layout: str, world: int, hw: Hardware) -> tuple[float, float]:
    """The pricer's host ms of the probe's ``variant`` under ``layout`` on ``hw``: (the
    whole step's host time, the engine's ``host_us`` part of it)."""
    from shapelint.measure.parallel_host_worker import VARIANTS, probe_model
    from shapelint.pipeline.result import Options
    from shapelint.pipeline.run import lint_module

    model, x = probe_model(VARIANTS[variant])
    def degree(engine: str) -> int | None:
        return world if layout == engine else None

    options = Options(dp=degree("ddp"), fsdp=degree("fsdp"), tp=degree("tp"))
    t = lint_module(model, (x,), options, hw, []).step_time
    if t is None:
        raise ShapelintError("calibrate: the parallel host probe's step could not be priced")
    return t.host_ms, t.communication.host_ms if t.communication is not None else 0.0


def engine_speeds(found: dict[str, Any], hw: Hardware,
                  log: Callable[[str], None] = lambda _msg: None) -> dict[str, EngineSpeed]:
    """Each engine's speed from the probe's steps ``found`` (see the module docstring),
    against ``hw``'s ``host_us``; an engine whose speed falls outside
    :data:`SPEED_BOUNDS` is left out, and the log says why."""
    world = int(found["world"])
    ms = {(s["variant"], s["layout"]): float(s["ms"]) for s in found["steps"]}
    # the round-by-round difference to the one-GPU step where the probe gives it
    added = {(s["variant"], s["layout"]): float(s.get("added_ms", s["ms"] - ms[(s["variant"], "none")]))
             for s in found["steps"] if (s["variant"], "none") in ms}
    variants = sorted({v for v, _ in ms})
    base = {v: modelled(v, "none", world, hw)[0] for v in variants if (v, "none") in ms}
    out = {}
    for engine in ENGINE_HOST_KEYS:
        measured = model_engine = 0.0
        for v in base:
            if (v, engine) not in ms:
                continue
            host, engine_ms = modelled(v, engine, world, hw)
            measured += added[(v, engine)] - (host - engine_ms - base[v])
            model_engine += engine_ms
        if model_engine <= 0:
            continue
        speed = measured / model_engine
        if not SPEED_BOUNDS[0] <= speed <= SPEED_BOUNDS[1]:
            log(f"calibrate: parallel host probe: {engine} added {measured:.1f} ms against {model_engine:.1f} ms "
                f"modelled ({speed:.2f}x), outside {SPEED_BOUNDS}: its host costs stay at the one-GPU probe's speed")
            continue
        out[engine] = EngineSpeed(engine, round(speed, 3), round(measured, 2), round(model_engine, 2))
        log(f"calibrate: parallel host probe: {engine} added {measured:.1f} ms against {model_engine:.1f} ms "
            f"modelled: {speed:.3f}x the typical host")
    return out


def probe_engines(world: int, hw: Hardware, log: Callable[[str], None] = print,
                  device: str = "cuda") -> dict[str, EngineSpeed]:
    """Measure the probe on ``world`` GPUs and read each engine's speed against ``hw``."""
    log(f"calibrate: parallel host probe on {world} GPUs (DDP, FSDP2, DTensor TP; torchrun)")
    return engine_speeds(measure(world, device), hw, log)


__all__ = ["SPEED_BOUNDS", "TIMEOUT_S", "EngineSpeed", "engine_speeds", "measure", "modelled",
           "probe_engines"]
