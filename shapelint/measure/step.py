"""``--verify --step``: train the real model, before and after the suggestions, and
compare the measured step with the estimate.

For one linted target (a :class:`shapelint.lint.Result`):

1. **The variants.** *before* is the target built for real (``shapelint.load.loaders.build``:
   the class, inputs and labels the lint traced; random weights). *after* has every
   suggestion applied as ``--fix --unsafe-fixes`` would edit it (``shapelint.fix.run.plan``),
   built from a copy in a temporary folder outside the target's folder: the edited
   config.json or YAML, or the edited model.py (with the target's folder still on the
   import path, and the folder's Python files copied when an edit is in another of
   them). Nothing of the user's files is written. A finding that cannot be applied
   (no literal to edit, a run setting such as the batch, a throughput finding whose
   step does other work) is listed in ``not_applied`` with the reason. With two to
   :data:`PER_FINDING_MAX` findings applied, each is also built alone.
   A padded vocabulary's logits are sliced back to the tokenizer's size before the
   loss (a forward hook on the output layer), as the finding asks and as its estimate
   prices (the slice's strided copy).
2. **The step** (shapelint's documented default): parameters in fp32, the forward
   under ``torch.autocast`` in the lint's precision (bf16 by default; fp32 and tf32
   without autocast), the model's own loss where it returns one, else the loss the
   lint traces (a gradient of ones on every floating output), ``backward``, the
   optimizer of ``--optimizer`` (``torch.optim.AdamW(fused=True)`` by default; foreach
   where the device has no fused kernel), ``zero_grad(set_to_none=True)``. An
   inference target runs the forward under ``no_grad``. With ``--compile`` the forward
   and loss run under ``torch.compile`` (default mode, ``dynamic=False``); the
   optimizer stays eager, as ``torch.compile(model)`` leaves it.
3. **Timing** (the method of ``benchmarks/step_gpu.py``): each variant runs one step
   (compiling, under ``--compile``; its wall time is ``compile_s``) and
   :data:`WARMUP` more (:data:`COMPILE_EXTRA_WARMUP` more again, compiled), untimed.
   Then *before* and one other variant alternate in blocks, A B A B ... (:data:`ROUNDS`
   blocks each, :data:`STEPS_PER_BLOCK` steps a block), on the same input tensors (a variant whose inputs change shape, a padded
   input layer's, gets its own, from the same seed). A pair of CUDA events brackets
   every step and nothing synchronises inside a block. A variant's time is the median
   of its steps.
4. **Confirmation.** Each round gives a speedup (before's block mean over the other's);
   the *noise* is half the range of those, at least :data:`NOISE_FLOOR`. A change is
   *confirmed* when its measured speedup (median over median) is at least
   ``1 + noise``: a suggestion set that does not measure faster than the blocks
   scatter is *not confirmed*.

Everything runs on a ``device`` argument; the CPU test suite runs the same code on a
tiny model with a wall-clock or scripted timer.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import torch

from shapelint.capture.precision import AUTOCAST_PRECISIONS, PRECISIONS
from shapelint.capture.run import loss_or_outputs, split_inputs
from shapelint.errors import ShapelintError, one_line
from shapelint.load.compile_probe import forget_warnings_once
from shapelint.load.real import Built, build
from shapelint.model.records import Finding
from shapelint.pipeline.result import Result

#: alternating rounds: blocks per variant in each comparison
ROUNDS = 5
#: timed steps in one block
STEPS_PER_BLOCK = 10
#: untimed steps after a variant's first step (which compiles under --compile)
WARMUP = 3
#: more untimed steps under --compile (Inductor's autotuned kernels settle; step_gpu.py's choice)
COMPILE_EXTRA_WARMUP = 2
#: the smallest noise a comparison assumes (0.5%): below it, a speedup is not confirmed
NOISE_FLOOR = 0.005
#: per-finding variants are built when 2 to this many findings are applied (each
#: costs a build, a compile under --compile, and its own comparison)
PER_FINDING_MAX = 4
#: the optimizer's learning rate (any: it is never evaluated)
LEARNING_RATE = 1e-4
#: Python files copied at most when an edit is outside the target file
MIRROR_MAX_FILES = 2000
#: folders never copied
MIRROR_SKIP = frozenset({"__pycache__", "site-packages", "dist-packages", "node_modules", "venv", ".venv", "env"})


@dataclass(frozen=True)
class Schedule:
    rounds: int = ROUNDS
    steps: int = STEPS_PER_BLOCK
    warmup: int = WARMUP


class BlockTimer(Protocol):
    """Runs ``step`` ``n`` times (a block of variant ``label``) and returns each step's ms."""

    def __call__(self, label: str, step: Callable[[], object], n: int) -> list[float]: ...


def cuda_timer() -> BlockTimer:
    """A pair of CUDA events around every step, one synchronisation after the block."""

    def timer(label: str, step: Callable[[], object], n: int) -> list[float]:
        marks = []
        for _ in range(n):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            marks.append((start, end))
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in marks]

    return timer


def wall_timer() -> BlockTimer:
    """``time.perf_counter`` around every step (the CPU runs a step synchronously)."""

    def timer(label: str, step: Callable[[], object], n: int) -> list[float]:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            step()
            out.append((time.perf_counter() - t) * 1e3)
        return out

    return timer


# -- statistics ---------------------------------------------------------------------


@dataclass(frozen=True)
class Samples:
    """One variant's per-step times and the mean of each of its blocks, in order."""

    steps: tuple[float, ...]
    blocks: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.steps)


@dataclass(frozen=True)
class Comparison:
    """*before* against one other variant, timed in alternating blocks."""

    before: Samples
    after: Samples

    @property
    def speedup(self) -> float:
        return self.before.median / self.after.median if self.after.median > 0 else float("inf")

    @property
    def round_speedups(self) -> tuple[float, ...]:
        return tuple(b / a for b, a in zip(self.before.blocks, self.after.blocks) if a > 0)

    @property
    def noise(self) -> float:
        """Half the range of the per-round speedups, at least :data:`NOISE_FLOOR`."""
        r = self.round_speedups
        return max(NOISE_FLOOR, (max(r) - min(r)) / 2 if len(r) > 1 else 0.0)

    @property
    def threshold(self) -> float:
        return 1.0 + self.noise

    @property
    def confirmed(self) -> bool:
        return self.speedup >= self.threshold


def alternate(steps: Sequence[tuple[str, Callable[[], object]]], timer: BlockTimer, rounds: int, n: int
              ) -> tuple[dict[str, Samples], list[str]]:
    """Time the variants in alternating blocks (A B A B ... for two): each round runs
    every variant's block in turn. Returns each variant's samples and the order the
    blocks ran in."""
    per_step: dict[str, list[float]] = {label: [] for label, _ in steps}
    blocks: dict[str, list[float]] = {label: [] for label, _ in steps}
    order = []
    for _ in range(rounds):
        for label, step in steps:
            times = timer(label, step, n)
            per_step[label] += times
            blocks[label].append(statistics.fmean(times))
            order.append(label)
    return {label: Samples(tuple(per_step[label]), tuple(blocks[label])) for label, _ in steps}, order


# -- the training step ------------------------------------------------------------------


class _Loss(torch.nn.Module):
    """The model's forward and what the step differentiates (what torch.compile compiles)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
        return loss_or_outputs(self.model(*args, **kwargs))


@dataclass
class Trainer:
    """One variant's model, optimizer and step."""

    label: str
    built: Built
    inputs: Any
    step: Callable[[], object]
    optimizer: str
    fused: bool | None
    compile_s: float | None = None
    first_step_s: float = 0.0
    graphs: int | None = None
    own_inputs: bool = False
    sliced: tuple[str, ...] = ()


def _optimizer(params: list[torch.nn.Parameter], name: str) -> tuple[torch.optim.Optimizer | None, bool | None]:
    """The optimizer the step model prices, fused where the device has the kernel."""
    classes = {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam, "sgd": torch.optim.SGD}
    if name == "none" or not params:
        return None, None
    cls = classes[name]
    try:
        return cls(params, lr=LEARNING_RATE, fused=True), True
    except (RuntimeError, ValueError, TypeError):  # no fused kernel for these tensors' device
        return cls(params, lr=LEARNING_RATE), False


def make_trainer(label: str, built: Built, inputs: Any, *, device: str, precision: str, training: bool,
                 optimizer: str, compile: bool, backend: str = "inductor") -> Trainer:
    """The default training step of ``built`` (see the module docstring)."""
    model = built.model.float().train(training)
    args, kwargs = split_inputs(_float32(inputs))
    params = [p for p in model.parameters() if p.requires_grad] if training else []
    opt, fused = _optimizer(params, optimizer) if training else (None, None)
    grads_in = [t for t in _tensors((args, kwargs)) if t.requires_grad]
    wrapper: Callable[..., list[torch.Tensor]] = _Loss(model)
    if compile:
        wrapper = torch.compile(wrapper, backend=backend, dynamic=False)
    dtype = PRECISIONS[precision]
    kind = torch.device(device).type

    def autocast() -> Any:
        if precision in AUTOCAST_PRECISIONS:
            return torch.autocast(kind, dtype=dtype)
        return contextlib.nullcontext()

    def step() -> object:
        if not training:
            with torch.no_grad(), autocast():
                return wrapper(args, kwargs)
        with autocast():
            outs = [t for t in wrapper(args, kwargs) if t.requires_grad and t.is_floating_point()]
        if not outs:
            raise ShapelintError("the model's output does not require grad: no backward pass to time")
        torch.autograd.backward(outs, [torch.ones_like(t) for t in outs])
        if opt is not None:
            opt.step()
            opt.zero_grad(set_to_none=True)
        for t in grads_in:
            t.grad = None
        return outs

    return Trainer(label, built, inputs, step, optimizer, fused)


def _float32(x: Any) -> Any:
    """Floating inputs in fp32, as the step keeps them (``capture.to_precision``)."""
    if isinstance(x, torch.Tensor):
        if x.is_floating_point() and x.dtype != torch.float32:
            return x.detach().float().requires_grad_(x.requires_grad)
        return x
    if isinstance(x, dict):
        return {k: _float32(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(_float32(v) for v in x)
    return x


def _tensors(x: Any) -> Iterator[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, dict):
        for v in x.values():
            yield from _tensors(v)
    elif isinstance(x, (tuple, list)):
        for v in x:
            yield from _tensors(v)


def _dynamo_graphs() -> int:
    """Graphs dynamo has compiled in this process (a variant's share: more than one
    means its forward broke into pieces)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return 0
    return int(counters["stats"]["unique_graphs"])


def warm(t: Trainer, device: str, warmup: int, compiled: bool) -> None:
    """The first step (compiling, under torch.compile) and ``warmup`` more, untimed."""
    if compiled:
        forget_warnings_once()
    graphs = _dynamo_graphs()
    start = time.perf_counter()
    t.step()
    _sync(device)
    t.first_step_s = time.perf_counter() - start
    if compiled:
        t.compile_s = t.first_step_s
        t.graphs = _dynamo_graphs() - graphs
    for _ in range(warmup + (COMPILE_EXTRA_WARMUP if compiled else 0)):
        t.step()
    _sync(device)


def _sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def _dynamo_limits(variants: int) -> Iterator[None]:
    """Room in dynamo's caches for every variant: they share code objects (the loss
    wrapper's forward, the model classes'), and past the recompile limit dynamo
    would run a variant eagerly without saying so."""
    try:
        import torch._dynamo.config as dc
    except ImportError:
        yield
        return
    keys = [k for k in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                        "accumulated_recompile_limit") if hasattr(dc, k)]
    saved = {k: getattr(dc, k) for k in keys}
    for k in keys:
        setattr(dc, k, max(saved[k], 8 * (variants + 1)))
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(dc, k, v)


# -- applying the suggestions to a copy -----------------------------------------------------


class NotApplied(Exception):
    """Why a finding (or every finding) cannot be applied to the copy."""


def plan(r: Result) -> tuple[list[tuple[Finding, dict[Path, str]]], list[dict[str, Any]]]:
    """The findings ``--fix --unsafe-fixes`` can apply, each with its edited texts, and
    the others with the reason."""
    from shapelint.fix import run as fix

    applied, not_applied = [], []
    for p in fix.plan([r], unsafe=True):
        f = p.finding
        if f.gain == "throughput":
            reason = "a throughput finding: the step does more work after it, so step times do not compare"
        elif not p.fixable:
            reason = p.reason
        else:
            reason = ""
        if reason:
            not_applied.append({**_finding_key(f), "reason": reason})
            continue
        applied.append((f, {Path(file).resolve(): new for file, (_, new) in fix.edited_texts([p]).items()}))
    return applied, not_applied


def merged_texts(r: Result, findings: Sequence[Finding]) -> dict[Path, str]:
    """The texts with every given finding's edits (as ``--fix`` would write them)."""
    from shapelint.fix import run as fix

    keep = {id(f) for f in findings}
    planned = [p for p in fix.plan([r], unsafe=True) if id(p.finding) in keep and p.fixable]
    return {Path(file).resolve(): new for file, (_, new) in fix.edited_texts(planned).items()}


def scratch_root(target: Path) -> Path:
    """A fresh folder for the copies, outside the target's folder."""
    folder = _folder(target)
    for base in (Path(tempfile.gettempdir()), Path.home() / ".cache" / "shapelint"):
        base = base.resolve()
        if not base.is_relative_to(folder):
            base.mkdir(parents=True, exist_ok=True)
            return Path(tempfile.mkdtemp(prefix="shapelint-step-", dir=base))
    raise ShapelintError(f"{target}: no temporary folder outside the target's folder for the edited copy "
                         f"(set TMPDIR elsewhere)")


def _folder(target: Path) -> Path:
    t = target.resolve()
    return t if t.is_dir() else t.parent


def write_copy(r: Result, texts: dict[Path, str], root: Path) -> Path:
    """The target with ``texts`` applied, in a new folder under ``root``; returns the
    copy's target path. Only the target file is copied when every edit is in it (the
    original folder stays on the import path); otherwise the Python files of the
    target's folder are copied, so that the edited ones are imported."""
    target = Path(r.config_file or r.target).resolve()
    folder = target.parent
    copy = Path(tempfile.mkdtemp(prefix="copy-", dir=root))
    outside = [f for f in texts if not f.is_relative_to(folder)]
    if outside:
        raise NotApplied(f"the edit is in {outside[0]}, outside the target's folder {folder}")
    if set(texts) - {target} or _has_builder(r):
        _mirror_python(folder, copy, root)
    for file, text in texts.items():
        dest = copy / file.relative_to(folder)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text, encoding="utf-8")
    dest = copy / target.name
    if not dest.exists():
        shutil.copyfile(target, dest)
    return dest


def _has_builder(r: Result) -> bool:
    """A YAML target naming a builder (a file or module beside it, copied with it)."""
    if r.kind != "yaml" or not r.config_file:
        return False
    from shapelint.load.documents import read_yaml

    return "model" in read_yaml(Path(r.config_file))


def _mirror_python(folder: Path, copy: Path, root: Path) -> None:
    count = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in MIRROR_SKIP
                       and not (here / d).resolve().is_relative_to(root)]
        for name in filenames:
            if name.endswith(".py"):
                count += 1
                if count > MIRROR_MAX_FILES:
                    raise NotApplied(f"the edit is outside the target file and its folder {folder} holds more "
                                     f"than {MIRROR_MAX_FILES} Python files to copy")
                dest = copy / (here / name).relative_to(folder)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(here / name, dest)


def build_copy(r: Result, path: Path, device: str) -> Built:
    """Build the edited copy at ``path``; a model.py or a YAML builder imports from the
    copy first, then from the original folder."""
    from shapelint.load.usercode import user_code

    opts = r.options
    kwargs: dict[str, Any] = {"batch": opts.batch if opts else None, "seq": opts.seq if opts else None,
                              "allow_builders": opts.allow_builders if opts else ()}
    if r.kind == "hf-config":
        return build(path, device=device, **kwargs)
    original = _folder(Path(r.config_file or r.target))
    with user_code(path, "building the edited copy", (original,)):
        return build(path, device=device, **kwargs)


def build_original(r: Result, device: str) -> Built:
    opts = r.options
    return build(Path(r.target), device=device, batch=opts.batch if opts else None,
                 seq=opts.seq if opts else None, allow_builders=opts.allow_builders if opts else ())


def signature(built: Built) -> tuple[Any, ...]:
    """What a change must alter: the parameters' and inputs' shapes."""
    params = tuple((name, tuple(p.shape)) for name, p in built.model.named_parameters())
    return params, tuple(tuple(t.shape) for t in _tensors(built.inputs))


def slice_padded_logits(built: Built, findings: Sequence[Finding]) -> tuple[str, ...]:
    """For each applied vocabulary padding, slice the output layer's logits back to the
    tokenizer's size before the loss (``logits[..., :vocab]``), as the finding asks;
    a Hugging Face model's loss then reads the vocabulary size it is told. Returns the
    modules sliced."""
    done = []
    for f in findings:
        vocab = f.fact("vocab")
        s = f.suggestion
        if not f.slices or not isinstance(vocab, int) or s is None or not isinstance(s.to, int):
            continue
        head = _output_layer(built.model, f, s.to)
        if head is None:
            continue
        name, module = head
        module.register_forward_hook(lambda _m, _i, out, keep=vocab: out[..., :keep])
        _slice_logits_bias(built.model, s.to, vocab)
        config = getattr(built.model, "config", None)
        if config is not None:
            text = config.get_text_config() if callable(getattr(config, "get_text_config", None)) else config
            for key in VOCAB_SIZE_KEYS:
                if getattr(text, key, None) == s.to:
                    setattr(text, key, vocab)
        done.append(name)
    return tuple(done)


#: config attributes a Hugging Face loss reads the vocabulary from (Marian's loss reads
#: ``decoder_vocab_size``)
VOCAB_SIZE_KEYS = ("vocab_size", "decoder_vocab_size")
#: buffers a model adds to its output layer's logits (the BART family: BART, mBART,
#: Marian, Pegasus, Blenderbot add ``final_logits_bias`` of shape (1, vocab_size))
LOGITS_BIASES = ("final_logits_bias",)


def _slice_logits_bias(model: torch.nn.Module, padded: int, vocab: int) -> None:
    """A bias the model adds to the sliced logits is sliced with them: the padded rows of
    ``final_logits_bias`` go with the padded logits."""
    for name in LOGITS_BIASES:
        bias = model._buffers.get(name)
        if isinstance(bias, torch.Tensor) and bias.shape[-1] == padded:
            model.register_buffer(name, bias[..., :vocab].clone())


def _output_layer(model: torch.nn.Module, f: Finding, padded: int) -> tuple[str, torch.nn.Module] | None:
    names = [m for m in (*f.modules, f.module) if "*" not in m]
    get = getattr(model, "get_output_embeddings", None)
    out = get() if callable(get) else None
    candidates = [(n, model.get_submodule(n)) for n in dict.fromkeys(names) if _has(model, n)]
    if out is not None:
        candidates.append((next((n for n, m in model.named_modules() if m is out), "output embeddings"), out))
    return next(((n, m) for n, m in candidates if isinstance(m, torch.nn.Linear) and m.out_features == padded), None)


def _has(model: torch.nn.Module, name: str) -> bool:
    try:
        model.get_submodule(name)
    except AttributeError:
        return False
    return True


# -- one target -------------------------------------------------------------------------


@dataclass
class RunOptions:
    """How ``verify_result`` runs (the CLI's defaults; tests shrink them)."""

    device: str = "cuda"
    schedule: Schedule = field(default_factory=Schedule)
    timer: BlockTimer | None = None
    backend: str = "inductor"
    per_finding: bool = True
    seed: int = 0
    note: Callable[[str], None] = lambda _msg: None


def _finding_key(f: Finding) -> dict[str, Any]:
    return {"code": f.code, "module": f.module, "suggestion": f.suggestion.to_json() if f.suggestion else None}


def verify_result(r: Result, opts: RunOptions | None = None) -> dict[str, Any]:
    """Measure ``r``'s step before and after its suggestions; the ``step_verification``
    object of the report (see the README's JSON section)."""
    opts = opts or RunOptions()
    if r.tp > 1:
        raise ShapelintError(f"{r.target}: --verify --step trains the whole model on one GPU; "
                             f"the lint's shapes are one of {r.tp} tensor-parallel shards")
    if r.step_model is None or r.step_time is None:
        raise ShapelintError(f"{r.target}: no step estimate to verify")
    mode = r.step_time.mode
    compiled = mode == "compile"
    applied, not_applied = plan(r)
    timer = opts.timer or (cuda_timer() if torch.device(opts.device).type == "cuda" else wall_timer())
    groups = [("after", tuple(f for f, _ in applied))]
    per_finding_note = ""
    if len(applied) > PER_FINDING_MAX or (len(applied) > 1 and not opts.per_finding):
        per_finding_note = f"{len(applied)} findings applied: measured all at once only"
    elif len(applied) > 1:
        groups += [(f"finding {i + 1}", (f,)) for i, (f, _) in enumerate(applied)]

    root = scratch_root(Path(r.target))
    trainers: dict[str, Trainer] = {}
    make = functools.partial(make_trainer, device=opts.device, precision=r.precision, training=r.training,
                             optimizer=r.step_model.optimizer, compile=compiled, backend=opts.backend)
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = r.precision == "tf32"
    results: dict[str, Any] = {}
    try:
        with _dynamo_limits(len(groups) + 1):
            opts.note(f"{r.target}: building the model")
            torch.manual_seed(opts.seed)
            before = build_original(r, opts.device)
            trainers["before"] = make("before", before, before.inputs)
            warm(trainers["before"], opts.device, opts.schedule.warmup, compiled)
            before_info = _trainer_info(trainers["before"])
            for label, findings in groups if applied else ():
                results[label] = _measure_change(r, label, findings, trainers, root, opts, make, compiled, timer)
                _release(opts.device, False)
            if not applied:
                opts.note(f"{r.target}: timing the step")
                samples, order = alternate([("before", trainers["before"].step)], timer,
                                           opts.schedule.rounds, opts.schedule.steps)
                results["before"] = {"samples": samples["before"], "order": order}
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32
        shutil.rmtree(root, ignore_errors=True)
        trainers.clear()
        _release(opts.device, compiled)
    return _report(r, opts, applied, not_applied, results, per_finding_note, compiled, before_info)


def _measure_change(r: Result, label: str, findings: tuple[Finding, ...], trainers: dict[str, Trainer], root: Path,
                    opts: RunOptions, make: Callable[[str, Built, Any], Trainer], compiled: bool,
                    timer: BlockTimer) -> dict[str, Any]:
    """Build the copy with ``findings`` applied, then time it against *before*."""
    before = trainers["before"]
    info: dict[str, Any] = {}
    try:
        path = write_copy(r, merged_texts(r, findings), root)
        opts.note(f"{r.target}: building {label} ({', '.join(str(f.suggestion) for f in findings)})")
        torch.manual_seed(opts.seed)
        built = build_copy(r, path, opts.device)
        if signature(built) == signature(before.built):
            raise NotApplied("the edited copy builds the same parameter and input shapes: the edit did not "
                             "reach the model")
        sliced = slice_padded_logits(built, findings)
        same_inputs = signature(built)[1] == signature(before.built)[1]
        t = make(label, built, before.inputs if same_inputs else built.inputs)
        t.own_inputs, t.sliced = not same_inputs, sliced
        del built
        warm(t, opts.device, opts.schedule.warmup, compiled)
        opts.note(f"{r.target}: timing before against {label}")
        samples, order = alternate([("before", before.step), (label, t.step)], timer,
                                   opts.schedule.rounds, opts.schedule.steps)
        info.update(info=_trainer_info(t), comparison=Comparison(samples["before"], samples[label]), order=order)
        del t
    except NotApplied as exc:
        if label == "after":
            raise ShapelintError(f"{r.target}: cannot apply the suggestions: {exc}") from exc
        info["error"] = str(exc)
    return info


def _trainer_info(t: Trainer) -> dict[str, Any]:
    return {"compile_s": None if t.compile_s is None else round(t.compile_s, 2),
            "first_step_s": round(t.first_step_s, 3), "graphs": t.graphs,
            "fused_optimizer": t.fused, "own_inputs": t.own_inputs, "sliced": list(t.sliced)}


def _release(device: str, compiled: bool) -> None:
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
    if compiled:
        with contextlib.suppress(Exception):
            torch._dynamo.reset()


def device_name(device: str) -> str:
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(device)
    return torch.device(device).type


def _r(x: float | None, n: int = 4) -> float | None:
    return None if x is None else round(x, n)


def _report(r: Result, opts: RunOptions, applied: list[tuple[Finding, dict[Path, str]]],
            not_applied: list[dict[str, Any]], results: dict[str, Any], per_finding_note: str, compiled: bool,
            before_info: dict[str, Any]) -> dict[str, Any]:
    assert r.step_model is not None and r.step_time is not None
    est = r.step_time.ms
    fs = [f for f, _ in applied]
    est_after = r.step_model.after(fs).ms if fs else est
    out: dict[str, Any] = {
        "status": "measured", "device": device_name(opts.device), "torch": torch.__version__,
        "mode": "compile" if compiled else "eager", "profile": r.hardware.key, "precision": r.precision,
        "training": r.training, "optimizer": r.step_model.optimizer, "fused_optimizer": before_info.get("fused_optimizer"),
        "est_ms": _r(est), "est_ms_after": _r(est_after), "est_speedup": _r(est / est_after if est_after else None),
        "blocks": opts.schedule.rounds, "steps_per_block": opts.schedule.steps, "warmup": opts.schedule.warmup,
        "compile_s": {"before": before_info.get("compile_s")}, "graphs": {"before": before_info.get("graphs")},
    }
    probed = r.step_model.step.graphs
    if compiled:
        out["probed_graphs"] = probed.to_json() if probed is not None else None
    after = results.get("after")
    if after is None:  # nothing applied: the step's absolute time alone
        s: Samples = results["before"]["samples"]
        out.update(measured_ms=_r(s.median), measured_ms_after=None, measured_speedup=None, noise=None,
                   threshold=None, confirmed=None, block_ms={"before": [_r(x) for x in s.blocks]},
                   steps=len(s.steps), order=results["before"]["order"])
    else:
        c: Comparison = after["comparison"]
        out.update(measured_ms=_r(c.before.median), measured_ms_after=_r(c.after.median),
                   measured_speedup=_r(c.speedup), noise=_r(c.noise), threshold=_r(c.threshold),
                   confirmed=c.confirmed, block_ms={"before": [_r(x) for x in c.before.blocks],
                                                    "after": [_r(x) for x in c.after.blocks]},
                   steps=len(c.before.steps), order=after["order"])
        out["compile_s"]["after"] = after["info"]["compile_s"]
        out["graphs"]["after"] = after["info"]["graphs"]
        out["sliced"] = after["info"]["sliced"]
        out["own_inputs"] = after["info"]["own_inputs"]
    out["est_error"] = _r(est / out["measured_ms"] - 1) if out["measured_ms"] else None
    if out["measured_speedup"] and out["est_speedup"]:
        out["speedup_error"] = _r(out["est_speedup"] / out["measured_speedup"] - 1)
    out["findings"] = [_finding_entry(r, f, i, results, len(fs)) for i, f in enumerate(fs)]
    out["per_finding"] = per_finding_note or ("measured" if len(fs) > 1 else "the only finding: all at once")
    out["not_applied"] = not_applied
    return out


def _finding_entry(r: Result, f: Finding, i: int, results: dict[str, Any], applied: int) -> dict[str, Any]:
    assert r.step_model is not None and r.step_time is not None
    est_after = r.step_model.after([f]).ms
    entry: dict[str, Any] = {**_finding_key(f), "est_step_ms_saved": _r(r.step_time.ms - est_after),
                             "est_speedup": _r(r.step_time.ms / est_after if est_after else None)}
    got = results.get("after") if applied == 1 else results.get(f"finding {i + 1}")
    if got is None:
        entry["measured"] = False
        return entry
    if "error" in got:
        entry.update(measured=False, error=got["error"])
        return entry
    c: Comparison = got["comparison"]
    entry.update(measured=True, measured_ms=_r(c.before.median), measured_ms_after=_r(c.after.median),
                 measured_step_ms_saved=_r(c.before.median - c.after.median), measured_speedup=_r(c.speedup),
                 noise=_r(c.noise), threshold=_r(c.threshold), confirmed=c.confirmed,
                 sliced=got["info"]["sliced"])
    return entry


# -- every target (the CLI) ---------------------------------------------------------------


def verify_results(results: Sequence[Result], opts: RunOptions | None = None) -> tuple[list[Result], list[tuple[str, str]]]:
    """``--verify --step`` over every linted target: each result with its
    ``step_verification``, and (target, message) for each that could not be measured."""
    out, failed = [], []
    for r in results:
        try:
            with contextlib.redirect_stdout(sys.stderr):  # stdout carries the report; the model may print
                v = verify_result(r, opts)
        except ShapelintError as exc:
            failed.append((r.target, one_line(exc)))
            out.append(r)
            continue
        except Exception as exc:  # noqa: BLE001 - the user's model failing on the device is one line
            failed.append((r.target, f"{r.target}: --verify --step: the training step failed: {one_line(exc)}"))
            out.append(r)
            continue
        out.append(replace(r, step_verification=v))
    return out, failed


def cli_options(console: Any) -> RunOptions:
    """The CLI's options: CUDA, the default schedule, progress lines on ``console`` (stderr)."""
    return RunOptions(note=lambda msg: console.print(f"shapelint: --verify --step: {msg}", style="dim",
                                                  highlight=False, soft_wrap=True))


# -- the text report ------------------------------------------------------------------------


__all__ = ["Comparison", "RunOptions", "Samples", "Schedule", "alternate", "cli_options", "cuda_timer", "make_trainer",
           "verify_result", "verify_results", "wall_timer"]
