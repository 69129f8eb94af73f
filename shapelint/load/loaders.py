"""Load: turn a target (model.py, config.json, shapelint YAML) into a model and
example inputs built on fake tensors, so nothing is allocated.

Targets
- a Python file defining ``shapelint_model()`` that returns ``(model, example_inputs)``
  (a tensor, a tuple of tensors, or a dict of keyword arguments). It may take
  ``batch`` and/or ``seq`` keyword arguments, which ``--batch``/``--seq`` then set;
- a Hugging Face ``config.json`` (or a directory holding one): the model is built
  from the config with ``transformers`` offline, on token inputs of batch x seq;
- a shapelint YAML file naming a builder (``module:function`` or ``file.py:function``),
  its keyword arguments, the inputs' shapes, and defaults for dtype, gpu, training.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import math
import os
import re
from contextvars import Token
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch
from torch._subclasses.fake_tensor import (
    FakeTensor,
    FakeTensorMode,
    unset_fake_temporarily,
)
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from shapelint.capture.recorder import RecordingFakeMode, note_graph_break, note_host_sync
from shapelint.capture.sdpa import compile_builds_mask
from shapelint.capture.sources import boundary, user_frame_source
from shapelint.capture.traceable import check_on_cpu
from shapelint.errors import ShapelintError, one_line
from shapelint.files import check_regular, parse_json, parse_yaml, read_text
from shapelint.load import builders, validate
from shapelint.load.compile_probe import PROBE_TOKENS, GraphBreaks, probe_hf
from shapelint.load.json_tokens import int_keys
from shapelint.load.usercode import import_user_file, quiet_torch_logs, user_code
from shapelint.model.records import Source

#: default token shape for config targets: GPT-2's training shape (8 sequences of 1024)
DEFAULT_BATCH = 8
DEFAULT_SEQ = 1024

CONFIG_NAMES = ("config.json",)
YAML_SUFFIXES = (".yaml", ".yml")


@dataclass
class Loaded:
    """A model and its example inputs on fake tensors, ready for capture."""

    target: str
    kind: str  # "python" | "hf-config" | "yaml"
    model: torch.nn.Module
    inputs: Any
    fake_mode: FakeTensorMode
    defined_at: dict[int, Source] = field(default_factory=dict)
    #: settings the target itself asks for (YAML): dtype, gpu, training, tp...
    settings: dict[str, Any] = field(default_factory=dict)
    #: for config files: key -> (value, line) of every integer setting
    config_keys: dict[str, tuple[int, int]] = field(default_factory=dict)
    config_file: str | None = None
    #: where torch.compile would break the step into graphs (``shapelint.load.compile_probe``),
    #: found when asked (it runs the model on the CPU): Hugging Face configs only
    compile_probe: Callable[[], GraphBreaks | None] | None = field(default=None, repr=False)


def target_kind(path: Path) -> str:
    if path.is_dir():
        if (path / "config.json").is_file():
            return "hf-config"
        raise ShapelintError(f"{path}: a directory without config.json (lint a directory of configs with its files)")
    if path.suffix == ".py":
        return "python"
    if path.suffix == ".json":
        return "hf-config"
    if path.suffix in YAML_SUFFIXES:
        return "yaml"
    raise ShapelintError(f"{path}: not a Python file, a config.json, a shapelint YAML or a directory")


def load(path: Path, *, batch: int | None = None, seq: int | None = None,
         allow_builders: Sequence[str] = ()) -> Loaded:
    """A target, built on fake tensors (fp32, as written: the compute precision is
    applied by capture). ``allow_builders``: see :func:`load_yaml`."""
    kind = target_kind(path)
    if kind == "python":
        return load_python(path, batch=batch, seq=seq)
    if kind == "hf-config":
        return load_hf_config(path / "config.json" if path.is_dir() else path, batch=batch, seq=seq)
    return load_yaml(path, batch=batch, seq=seq, allow_builders=allow_builders)


# -- building on fake tensors -----------------------------------------------


@contextlib.contextmanager
def fake_construction(defined_at: dict[int, Source]) -> Iterator[FakeTensorMode]:
    """Fake tensors by default, on the CPU, and the line that constructs each
    submodule remembered (for findings that name a constructor argument).

    Construction code that reads values works too: ``torch.nn.init`` is skipped (a
    fake tensor has no values to initialise, and ``trunc_normal_`` samples with
    ``.item()``), and small index vectors (``torch.linspace``/``logspace``/``arange``
    of at most :data:`REAL_VECTOR_NUMEL` elements, e.g. timm's drop-path rates) are
    real, so nothing of a model's size is allocated."""
    mode = RecordingFakeMode()
    apply = torch.nn.Module._apply
    torch.nn.Module._apply = _fake_apply  # type: ignore[method-assign]
    try:
        with construction_sites(defined_at), _skip_init(), mode, torch.device("cpu"), _RealIndexVectors():
            yield mode
    finally:
        torch.nn.Module._apply = apply  # type: ignore[method-assign]


#: ``torch.nn.init``'s initialisers, skipped while a model is built on fake tensors
#: (code that bound one by name before shapelint started still runs it)
INITIALISERS = (
    "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
    "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_",
)


def _keep(tensor: torch.Tensor, *_: Any, **__: Any) -> torch.Tensor:
    return tensor


@contextlib.contextmanager
def _skip_init() -> Iterator[None]:
    saved = {name: getattr(torch.nn.init, name) for name in INITIALISERS}
    for name in INITIALISERS:
        setattr(torch.nn.init, name, _keep)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch.nn.init, name, fn)


#: largest index vector (``linspace``, ``logspace``, ``arange``) built for real during
#: construction: drop-path rates, positions, window offsets (64 KiB of int64 at most)
REAL_VECTOR_NUMEL = 8192
_INDEX_VECTORS = frozenset({torch.linspace, torch.logspace, torch.arange})


class _RealIndexVectors(TorchFunctionMode):
    """Builds small index vectors that take no tensor arguments as real CPU tensors,
    and whatever is computed from real tensors alone stays real, so construction
    code can read their values (``.item()``, ``.tolist()``, iteration)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if tensors and not any(isinstance(t, FakeTensor) for t in tensors):
            with unset_fake_temporarily():
                return func(*args, **kwargs)
        out = func(*args, **kwargs)
        if (func in _INDEX_VECTORS and not tensors and isinstance(out, torch.Tensor)
                and out.numel() <= REAL_VECTOR_NUMEL and kwargs.get("device") is None):
            with unset_fake_temporarily():
                return func(*args, **kwargs)
        return out


@contextlib.contextmanager
def construction_sites(defined_at: dict[int, Source]) -> Iterator[None]:
    """Remember the user-code line that constructs each submodule."""
    from torch.nn.modules import module as module_mod

    def on_register(parent: torch.nn.Module, name: str, sub: torch.nn.Module | None) -> None:
        if sub is not None and id(sub) not in defined_at:
            src = user_frame_source()
            if src is not None:
                defined_at[id(sub)] = src

    handle = module_mod.register_module_module_registration_hook(on_register)
    try:
        yield
    finally:
        handle.remove()


def meta_to_fake(model: torch.nn.Module, mode: FakeTensorMode) -> None:
    """Turn a model built on the meta device into CPU fake tensors of ``mode``, in
    place, keeping tied parameters tied (a meta build is several times cheaper than
    dispatching every initialisation op through the fake mode). The few tensors that
    construction made on the CPU anyway (legacy ``torch.FloatTensor(...)``) become
    fake too."""
    done: dict[int, torch.nn.Parameter] = {}
    for mod in model.modules():
        for key, p in list(mod._parameters.items()):
            if p is not None:
                if id(p) not in done:
                    done[id(p)] = torch.nn.Parameter(_to_fake(p.data, mode), requires_grad=p.requires_grad)
                mod._parameters[key] = done[id(p)]
        for key, b in list(mod._buffers.items()):
            if b is not None and not isinstance(b, FakeTensor):
                mod._buffers[key] = _to_fake(b, mode)


def _to_fake(t: torch.Tensor, mode: FakeTensorMode) -> torch.Tensor:
    if t.device.type == "meta":
        return FakeTensor(mode, t, torch.device("cpu"))
    return mode.from_tensor(t)


_APPLY_MEMO: list[dict[int, tuple[torch.Tensor, torch.nn.Parameter]]] = []


def _fake_apply(self: torch.nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True
                ) -> torch.nn.Module:
    """``Module._apply`` for fake parameters (``model.to(memory_format=...)``,
    ``.half()``...): torch swaps fake parameters in place, which fails while the fake
    mode's converter holds weak references to them; replace them instead, keeping
    tied parameters tied."""
    top = not _APPLY_MEMO
    if top:
        _APPLY_MEMO.append({})
    memo = _APPLY_MEMO[0]
    try:
        if recurse:
            for child in self.children():
                child._apply(fn)
        for key, p in self._parameters.items():
            if p is None:
                continue
            if id(p) not in memo:
                with torch.no_grad():
                    memo[id(p)] = (p, torch.nn.Parameter(fn(p), requires_grad=p.requires_grad))
            self._parameters[key] = memo[id(p)][1]
        for key, b in self._buffers.items():
            if b is not None:
                self._buffers[key] = fn(b)
        return self
    finally:
        if top:
            _APPLY_MEMO.clear()


@boundary
def _call_user(fn: Callable[..., Any], file: Path, what: str, paths: Sequence[Path] = (), /, **kwargs: Any) -> Any:
    """``fn(**kwargs)``: user code from ``file`` (importing from ``paths`` too),
    behind the one boundary."""
    with user_code(file, what, paths):
        return fn(**kwargs)


def _size_kwargs(fn: Callable[..., Any], batch: int | None, seq: int | None) -> dict[str, int]:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    out = {}
    if batch is not None and "batch" in params:
        out["batch"] = batch
    if seq is not None and "seq" in params:
        out["seq"] = seq
    return out


def _check_built(result: Any, what: str) -> tuple[torch.nn.Module, Any]:
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.nn.Module)):
        raise ShapelintError(f"{what} must return (model, example_inputs), got {type(result).__name__}")
    model, inputs = result
    if not isinstance(inputs, (torch.Tensor, tuple, list, dict)):
        raise ShapelintError(f"{what}: example_inputs must be a tensor, a tuple of tensors or a dict, "
                             f"got {type(inputs).__name__}")
    return model, inputs


@boundary
def _import_file(path: Path) -> Any:
    """A user's Python file as a fresh module, behind the one boundary."""
    check_regular(path)
    return import_user_file(path)


def load_python(path: Path, *, batch: int | None = None, seq: int | None = None) -> Loaded:
    quiet_torch_logs()
    defined_at: dict[int, Source] = {}
    with fake_construction(defined_at) as mode:
        model, inputs = _python_model(path, batch, seq)
    validate.built(model, inputs, f"{path}: shapelint_model()")
    check_on_cpu(model, inputs, str(path))
    return Loaded(str(path), "python", model, inputs, mode, defined_at)


def _python_model(path: Path, batch: int | None, seq: int | None) -> tuple[torch.nn.Module, Any]:
    """What the file's ``shapelint_model()`` returns, in the caller's construction context."""
    module = _import_file(path)
    fn = getattr(module, "shapelint_model", None)
    if not callable(fn):
        raise ShapelintError(
            f"{path}: defines no shapelint_model() returning (model, example_inputs)"
        )
    result = _call_user(fn, path, "shapelint_model()", **_size_kwargs(fn, batch, seq))
    return _check_built(result, f"{path}: shapelint_model()")


# -- building for real (--verify --step) ----------------------------------------


@dataclass
class Built:
    """A target's model and example inputs built for real on a device, with random
    weights: the class, inputs and labels the lint traced (``--verify --step`` trains it)."""

    target: str
    kind: str
    model: torch.nn.Module
    inputs: Any


def build(path: Path, *, device: str, batch: int | None = None, seq: int | None = None,
          allow_builders: Sequence[str] = ()) -> Built:
    """Build ``path``'s model for real on ``device``, as :func:`load` builds it on fake
    tensors: a model.py's ``shapelint_model()`` as written, a YAML's builder, a Hugging
    Face config with the same class choice (:func:`_hf_model`, weights initialised),
    inputs and labels (:func:`_hf_inputs`). Parameters and floating inputs stay as
    built (the step casts them, see ``shapelint.measure.step``)."""
    quiet_torch_logs()
    kind = target_kind(path)
    if kind == "hf-config":
        file = path / "config.json" if path.is_dir() else path
        return _build_hf_real(read_json(file), str(file), batch, seq, device, kind)
    if kind == "yaml":
        doc, _, batch, seq = _yaml_target(path, batch, seq)
        if "hf_config" in doc:
            return _build_hf_real(doc["hf_config"], str(path), batch, seq, device, kind)
        model, inputs = _on_device(device, lambda: _yaml_builder(doc, path, batch, seq, allow_builders))
        validate.built(model, inputs, f"{path}: {doc['model']}")
    else:
        model, inputs = _on_device(device, lambda: _python_model(path, batch, seq))
        validate.built(model, inputs, f"{path}: shapelint_model()")
    return Built(str(path), kind, model.to(device), to_device(inputs, device))


def _on_device(device: str, make: Callable[[], tuple[torch.nn.Module, Any]]) -> tuple[torch.nn.Module, Any]:
    """``make()`` with ``device`` as the default device (a model initialised where it
    trains); code that cannot run so (it mixes devices itself) runs again as written,
    and what it built is moved."""
    try:
        with torch.device(device):
            return make()
    except ShapelintError:
        if torch.device(device).type == "cpu":
            raise
    return make()


def to_device(x: Any, device: str) -> Any:
    """Every tensor of ``x`` (tensors, tuples, lists, dicts) on ``device``."""
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, dict):
        return {k: to_device(v, device) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(to_device(v, device) for v in x)
    return x


def _resolve_builder(spec: str, yaml_path: Path, allow: Sequence[str] = ()) -> tuple[Callable[..., Any], Path]:
    """``package.module:function`` or ``path/to/file.py:function`` (relative to the
    YAML), only from the YAML's own project or an allow-listed package (see
    :mod:`shapelint.load.builders`); returns the builder and the file it runs from."""
    where = str(yaml_path)
    place, fn_name = builders.split_spec(spec, where)
    if place.endswith(".py"):
        file = builders.builder_file(place, yaml_path, where)
        fn = getattr(_import_file(file), fn_name, None)
        return builders.check_defined_inside(fn, None, yaml_path, allow, where, spec), file
    builders.check_module(place, yaml_path, allow, where)
    with user_code(yaml_path, f"importing {place}", builders.search_folders(yaml_path)):
        module = importlib.import_module(place)
        fn = getattr(module, fn_name, None)
        checked = builders.check_defined_inside(fn, place, yaml_path, allow, where, spec)
    return checked, Path(getattr(module, "__file__", None) or yaml_path)


_TORCH_DTYPES = {
    "float": None, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16, "int64": torch.int64, "long": torch.int64,
    "int32": torch.int32, "bool": torch.bool,
}


def _input_from_spec(spec: Any, where: str) -> torch.Tensor:
    if isinstance(spec, list):
        spec = {"shape": spec}
    if not isinstance(spec, dict) or "shape" not in spec:
        raise ShapelintError(f"{where}: an input needs a shape, e.g. {{shape: [8, 1024]}}")
    shape = spec["shape"]
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise ShapelintError(f"{where}: shape must be a list of integers, got {shape!r}")
    if any(d <= 0 for d in shape):
        raise ShapelintError(f"{where}: shape {shape} has a zero or negative dimension")
    dtype_name = str(spec.get("dtype", "float"))
    if dtype_name not in _TORCH_DTYPES:
        raise ShapelintError(f"{where}: unknown input dtype {dtype_name!r} (one of {', '.join(_TORCH_DTYPES)})")
    dtype = _TORCH_DTYPES[dtype_name]
    if dtype is not None and not dtype.is_floating_point:
        high = spec.get("high", 2)
        if not isinstance(high, int) or high <= 0:
            raise ShapelintError(f"{where}: high must be a positive integer")
        return torch.randint(0, high, tuple(shape), dtype=dtype)
    t = torch.randn(tuple(shape), dtype=dtype or torch.get_default_dtype())
    return t.requires_grad_(bool(spec.get("requires_grad", False)))


def read_yaml(path: Path) -> dict[str, Any]:
    doc = parse_yaml(read_text(path), str(path))
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ShapelintError(f"{path}: expected a mapping at the top level, got {type(doc).__name__}")
    return doc


YAML_KEYS = {"model", "kwargs", "inputs", "dtype", "gpu", "training", "tp", "batch", "seq", "hf_config"}


def load_yaml(path: Path, *, batch: int | None = None, seq: int | None = None,
              allow_builders: Sequence[str] = ()) -> Loaded:
    """``allow_builders``: packages outside the YAML's project whose functions its
    ``model:`` may name (the configuration's ``allow-builders``)."""
    quiet_torch_logs()
    doc, settings, batch, seq = _yaml_target(path, batch, seq)
    lines = _yaml_int_lines(path)
    if "hf_config" in doc:
        loaded = _build_hf(doc["hf_config"], str(path), batch=batch, seq=seq)
        loaded.kind, loaded.settings = "yaml", settings
        loaded.config_keys, loaded.config_file = lines, str(path)
        return loaded
    defined_at: dict[int, Source] = {}
    with fake_construction(defined_at) as mode:
        model, inputs = _yaml_builder(doc, path, batch, seq, allow_builders)
    validate.built(model, inputs, f"{path}: {doc['model']}")
    check_on_cpu(model, inputs, str(path))
    loaded = Loaded(str(path), "yaml", model, inputs, mode, defined_at, settings)
    loaded.config_keys, loaded.config_file = lines, str(path)
    return loaded


def _yaml_target(path: Path, batch: int | None, seq: int | None
                 ) -> tuple[dict[str, Any], dict[str, Any], int | None, int | None]:
    """A shapelint YAML checked: (document, its own settings, batch, seq), where a
    given ``batch``/``seq`` wins over the YAML's."""
    from shapelint.capture.precision import PRECISIONS

    doc = read_yaml(path)
    unknown = sorted(set(doc) - YAML_KEYS)
    if unknown:
        raise ShapelintError(f"{path}: unknown key {unknown[0]!r} (known: {', '.join(sorted(YAML_KEYS))})")
    if "model" not in doc and "hf_config" not in doc:
        raise ShapelintError(f"{path}: needs 'model: module:function' (or 'hf_config: {{...}}')")
    validate.settings(doc, str(path), PRECISIONS)
    settings: dict[str, Any] = {k: doc[k] for k in ("dtype", "gpu", "training", "tp", "batch", "seq") if k in doc}
    if "hf_config" in doc and not isinstance(doc["hf_config"], dict):
        raise ShapelintError(f"{path}: hf_config must be a mapping of config keys")
    return doc, settings, batch or settings.get("batch"), seq or settings.get("seq")


def _yaml_builder(doc: dict[str, Any], path: Path, batch: int | None, seq: int | None,
                  allow_builders: Sequence[str]) -> tuple[torch.nn.Module, Any]:
    """The model and inputs a YAML's builder makes, in the caller's construction
    context (fake tensors for the lint, a device for ``--verify --step``)."""
    if not isinstance(doc["model"], str):
        raise ShapelintError(f"{path}: model must be 'module:function' or 'file.py:function', "
                             f"got {validate.show(doc['model'])}")
    kwargs = validate.kwargs(doc.get("kwargs"), str(path))
    specs = doc.get("inputs")
    validate.inputs(specs, str(path), _TORCH_DTYPES)
    fn, file = _resolve_builder(doc["model"], path, allow_builders)
    kwargs = {**_size_kwargs(fn, batch, seq), **kwargs}
    result = _call_user(fn, file, f"builder {doc['model']} (from {path})", builders.search_folders(path), **kwargs)
    if not isinstance(result, torch.nn.Module):
        return _check_built(result, f"{path}: {doc['model']}")
    if specs is None:
        raise ShapelintError(f"{path}: the builder returned a model only; give 'inputs: [{{shape: [...]}}]'")
    if isinstance(specs, dict):
        return result, {k: _input_from_spec(v, f"{path}: inputs.{k}") for k, v in specs.items()}
    return result, tuple(_input_from_spec(v, f"{path}: inputs[{i}]") for i, v in enumerate(specs))


_INT_LINE = re.compile(r'^\s*"?([A-Za-z_][\w.]*)"?\s*:\s*(-?\d+)\s*,?\s*(#.*)?$')


def _int_lines(text: str) -> dict[str, tuple[int, int]]:
    """key -> (value, line) for every ``key: <integer>`` line of a JSON or YAML file
    (the first occurrence of a key wins)."""
    out: dict[str, tuple[int, int]] = {}
    for no, line in enumerate(text.splitlines(), start=1):
        m = _INT_LINE.match(line)
        if m and m.group(1) not in out:
            out[m.group(1)] = (int(m.group(2)), no)
    return out


def _yaml_int_lines(path: Path) -> dict[str, tuple[int, int]]:
    return _int_lines(read_text(path))


# -- Hugging Face configs -----------------------------------------------------


def read_json(path: Path) -> dict[str, Any]:
    doc = parse_json(read_text(path), str(path))
    if not isinstance(doc, dict):
        raise ShapelintError(f"{path}: expected a JSON object at the top level")
    return doc


def load_hf_config(path: Path, *, batch: int | None = None, seq: int | None = None) -> Loaded:
    """A config.json, built with meta/fake weights. Its precision is not the loader's
    business: capture casts (``shapelint.capture.precision.to_precision``)."""
    quiet_torch_logs()
    doc = read_json(path)
    loaded = _build_hf(doc, str(path), batch=batch, seq=seq)
    text = read_text(path)
    loaded.config_keys = int_keys(text) or _int_lines(text)
    loaded.config_file = str(path)
    return loaded


def _import_transformers() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import transformers
    except ImportError as exc:
        raise ShapelintError(
            "linting a Hugging Face config needs transformers: pip install 'shapelint[hf]'"
        ) from exc
    return transformers


#: non-positive values transformers documents for a key (DeBERTa-v2/v3: relative
#: positions -1 means max_position_embeddings, buckets -1 none, type vocabulary 0
#: no token-type embedding)
SENTINELS: dict[str, int] = {"max_relative_positions": -1, "position_buckets": -1, "type_vocab_size": 0}


def _check_dims(doc: dict[str, Any], where: str) -> None:
    for key, value in doc.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or SENTINELS.get(key) == value:
            continue
        if (key.endswith(("_size", "_dim", "_heads", "_layers", "_embd", "_head", "_positions", "_ctx"))
                or key.startswith(("num_", "n_"))) and value <= 0:
            raise ShapelintError(f"{where}: {key} = {value}: dimensions must be positive")


#: probabilities of random changes to a training step that no fake tensor can take
#: (data-dependent branches): LayerDrop skips layers, SpecAugment overwrites frames
#: (with an index_put of a random mask). shapelint traces the step in which every
#: layer runs on every frame; no GEMM shape depends on them.
RANDOM_STEP_KEYS = ("layerdrop", "encoder_layerdrop", "decoder_layerdrop", "mask_time_prob", "mask_feature_prob")


def _hf_config(doc: dict[str, Any], where: str) -> tuple[Any, Any]:
    """transformers and the config ``doc`` describes (random step changes off)."""
    transformers = _import_transformers()
    model_type = doc.get("model_type")
    if not isinstance(model_type, str):
        raise ShapelintError(f"{where}: no 'model_type' key (is this a Hugging Face config.json?)")
    _check_dims(doc, where)
    fields = {k: v for k, v in doc.items() if k not in ("model_type", "transformers_version")}
    fields.update({k: 0.0 for k in RANDOM_STEP_KEYS if k in fields})
    config_class = transformers.CONFIG_MAPPING[model_type] if model_type in transformers.CONFIG_MAPPING else None
    try:
        config = transformers.AutoConfig.for_model(model_type, **fields)
    except Exception as exc:  # noqa: BLE001 - transformers validates configs on construction
        reason = validate.hf_heads_reason(config_class, doc)
        if reason is not None:  # said in the file's keys, not in transformers' words
            raise ShapelintError(f"{where}: transformers rejects this config: {reason}") from None
        raise ShapelintError(f"{where}: transformers rejects this config: {one_line(exc)}") from exc
    validate.hf_depth(config, doc, where)
    validate.hf_heads(config, doc, where)
    return transformers, config


def _build_hf(doc: dict[str, Any], where: str, *, batch: int | None, seq: int | None) -> Loaded:
    transformers, config = _hf_config(doc, where)
    defined_at: dict[int, Source] = {}
    with construction_sites(defined_at), torch.device("meta"):
        model = _hf_model(transformers, config, where, doc)
    _unpacked_sequences(model)
    _loss_behind_graph_break(model)
    mode = RecordingFakeMode()
    meta_to_fake(model, mode)
    with mode, torch.device("cpu"):
        inputs = _hf_inputs(model, config, where, batch or DEFAULT_BATCH, seq)
    return Loaded(where, "hf-config", model, inputs, mode, defined_at,
                  compile_probe=lambda: probe_hf_graph_breaks(transformers, config, where, doc))


def probe_hf_graph_breaks(transformers: Any, config: Any, where: str, doc: dict[str, Any]) -> GraphBreaks | None:
    """The config's compiled step's graphs (``shapelint.load.compile_probe``), on real CPU
    tensors: weights constant (no initialisation to pay for; no value of theirs decides
    a branch), one sequence of ``PROBE_TOKENS`` tokens. None where it cannot run."""
    try:
        return probe_hf(config, lambda cut: probe_build(transformers, cut, where, doc))
    except Exception:  # noqa: BLE001 - a model dynamo cannot run is priced as one graph
        return None


def probe_build(transformers: Any, config: Any, where: str, doc: dict[str, Any]) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The real model the compile probe runs for ``config`` (weights constant) and its inputs."""
    with _no_init_weights(transformers):
        model = _hf_model(transformers, config, where, doc, initialise=True)
    if not any(p.is_meta for p in model.parameters()):
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(0.02)
    return model, _hf_inputs(model, config, where, 1, PROBE_TOKENS)


def _build_hf_real(doc: dict[str, Any], where: str, batch: int | None, seq: int | None, device: str,
                   kind: str) -> Built:
    transformers, config = _hf_config(doc, where)
    model, inputs = _on_device(device, lambda: _hf_real(transformers, config, where, doc, batch, seq))
    return Built(where, kind, model.to(device), to_device(inputs, device))


def _hf_real(transformers: Any, config: Any, where: str, doc: dict[str, Any], batch: int | None, seq: int | None
             ) -> tuple[torch.nn.Module, dict[str, Any]]:
    model = _hf_model(transformers, config, where, doc, initialise=True)
    return model, _hf_inputs(model, config, where, batch or DEFAULT_BATCH, seq)


#: attention implementations tried in turn: SDPA (what a GPU step runs), then the
#: architecture's own matmul-softmax-matmul where it has no SDPA path
ATTENTION_IMPLEMENTATIONS = ("sdpa", "eager")


def _hf_model(transformers: Any, config: Any, where: str, doc: dict[str, Any], *,
              initialise: bool = False) -> torch.nn.Module:
    """The model class shapelint builds for ``config`` (``doc`` its keys, for errors
    said in them): its ``architectures`` entry, else a causal LM, else the base model;
    SDPA attention where it has it. The weights are left uninitialised (fake tensors
    need no values) unless ``initialise``."""
    arch = (getattr(config, "architectures", None) or [None])[0]
    candidates = []
    if arch and hasattr(transformers, arch):
        candidates.append(getattr(transformers, arch))
    candidates += [transformers.AutoModelForCausalLM, transformers.AutoModel]
    refusals: list[Exception] = []
    for cls in candidates:
        for impl in ATTENTION_IMPLEMENTATIONS:
            try:
                skip = contextlib.nullcontext() if initialise else _no_init_weights(transformers)
                with skip:  # fake weights need no initial values
                    build = cls.from_config if hasattr(cls, "from_config") else cls._from_config
                    model = build(config, attn_implementation=impl)
                tie = getattr(model, "tie_weights", None)
                if callable(tie):  # skipped with the initialisation; the optimizer sees tied weights once
                    tie()
                return model
            except ValueError as exc:  # no such attention implementation, or not this auto class's config
                refusals.append(exc)
            except Exception as exc:  # noqa: BLE001
                why = validate.hf_heads_reason(type(config), doc) or one_line(exc)
                raise ShapelintError(f"{where}: transformers cannot build this model: {why}") from exc
    # the eager attempt's reason, which is not about SDPA support
    reason = refusals[1] if len(refusals) > 1 else refusals[0]
    why = validate.hf_heads_reason(type(config), doc) or one_line(reason)
    raise ShapelintError(f"{where}: transformers cannot build a model for this config: {why}")


def _loss_behind_graph_break(model: torch.nn.Module) -> None:
    """A model whose class transformers cannot map to a loss (``loss_type`` unset or
    unknown: GPT-2's ``GPT2LMHeadModel``) warns as its ``loss_function`` is looked up,
    once per process, and dynamo breaks the graph at that warning: compiled, the loss
    is a graph of its own, and the logits' gradient reaches the model's backward graph
    as an input, in the layout the loss made it (measured on an H100, torch 2.11,
    transformers 5.17: GPT-2 compiles to 2 graphs, BERT and RoBERTa to 1;
    ``benchmarks/pad_mm_decisions.py``). Capture is told where (``note_graph_break``)."""
    try:
        mapping = importlib.import_module("transformers.loss.loss_utils").LOSS_MAPPING
    except (ImportError, AttributeError):
        return
    if "_loss_function" in vars(model) or getattr(model, "loss_type", None) in mapping:
        return
    default = mapping.get("ForCausalLM")
    if default is None:
        return

    def loss_function(*args: Any, **kwargs: Any) -> Any:
        note_graph_break()
        return default(*args, **kwargs)

    setattr(model, "_loss_function", loss_function)  # noqa: B010  (what transformers' loss_function returns first)


def _unpacked_sequences(model: torch.nn.Module) -> None:
    """While ``model`` runs, tell transformers' mask code that no row packs several
    sequences. On a GPU it finds that out from the position ids (consecutive, as
    shapelint's inputs make them) and then, with no padding, calls SDPA with
    ``is_causal=True`` and no mask; on fake tensors it cannot read them and builds
    an explicit mask, which keeps the flash and cuDNN kernels out. Where it skips a
    mask, capture is told (``compile_builds_mask``): under torch.compile it does not."""
    try:
        masking = importlib.import_module("transformers.masking_utils")
    except ImportError:
        return
    if not hasattr(masking, "find_packed_sequence_indices"):
        return
    saved: list[tuple[dict[str, Any], Token[bool]]] = []

    def enter(*_: Any, **__: Any) -> None:
        names = ("find_packed_sequence_indices", *_MASK_SKIPS)
        originals = {name: getattr(masking, name) for name in names if hasattr(masking, name)}
        saved.append((originals, compile_builds_mask.set(False)))
        setattr(masking, "find_packed_sequence_indices", _no_packing)  # noqa: B010
        for name in _MASK_SKIPS:
            if name in originals:
                setattr(masking, name, _noting_skips(originals[name]))

    def leave(*_: Any, **__: Any) -> None:
        if saved:
            originals, token = saved.pop()
            for name, fn in originals.items():
                setattr(masking, name, fn)
            compile_builds_mask.reset(token)

    model.register_forward_pre_hook(enter, with_kwargs=True)
    model.register_forward_hook(leave, with_kwargs=True, always_call=True)


#: transformers.masking_utils' tests of whether SDPA can go without a mask
#: (``is_causal`` or none); with torch < 2.14 they say no while dynamo traces
_MASK_SKIPS = ("_ignore_causal_mask_sdpa", "_ignore_bidirectional_mask_sdpa")


def _noting_skips(test: Any) -> Any:
    def noted(*args: Any, **kwargs: Any) -> Any:
        skip = test(*args, **kwargs)
        if skip:
            compile_builds_mask.set(True)
        return skip

    return noted


def _no_packing(position_ids: torch.Tensor) -> None:
    """Not packed, as transformers finds on a GPU, where it reads that answer on the
    host (``(...).all()``): an eager step waits there for the GPU (measured on an H100:
    GPT-2 8x1024 72.3 ms a step with the check, 64.8 without, docs/benchmarks.md)."""
    note_host_sync()
    return None


def _no_init_weights(transformers: Any) -> Any:
    for where in ("transformers.initialization", "transformers.modeling_utils"):
        try:
            return importlib.import_module(where).no_init_weights()
        except (ImportError, AttributeError):
            continue
    return contextlib.nullcontext()


# Example inputs per modality (the README's target table documents them): batch
# ``--batch`` (default DEFAULT_BATCH) of
# - text (input_ids, and decoder_input_ids for encoder-decoders): ``--seq`` tokens
#   (default DEFAULT_SEQ), capped at the model's (or the decoder's) positions;
# - images (pixel_values): the config's image_size and num_channels (``--seq`` unused);
# - speech features (input_features, Whisper): num_mel_bins x 2·max_source_positions
#   frames, the fixed window the encoder takes;
# - raw audio (input_values, wav2vec2): ``--seq`` (default DEFAULT_SEQ) encoder frames'
#   worth of samples (times the feature extractor's conv strides).
# A model that takes both text and images (CLIP) gets both.

#: image side when a vision config names none (ImageNet's)
DEFAULT_IMAGE_SIZE = 224
#: config keys that bound a text sequence, decoder first
_POSITION_KEYS = ("max_target_positions", "max_position_embeddings", "n_positions", "max_seq_len")


def _positions(config: Any, decoder: bool) -> int | None:
    keys = _POSITION_KEYS if decoder else _POSITION_KEYS[1:]
    return next((int(v) for k in keys if isinstance(v := getattr(config, k, None), int) and v > 0), None)


def _text_config(config: Any, decoder: bool = False) -> Any:
    get = getattr(config, "get_text_config", None)
    if not callable(get):
        return config
    return get(decoder=True) if decoder else get()


def _token_ids(config: Any, batch: int, seq: int | None, decoder: bool = False) -> torch.Tensor:
    text = _text_config(config, decoder)
    limit = _positions(text, decoder)
    tokens = min(seq or DEFAULT_SEQ, limit or DEFAULT_SEQ)
    return torch.randint(0, int(getattr(text, "vocab_size", 2) or 2), (batch, tokens))


def _pixels(config: Any, batch: int, seq: int | None) -> torch.Tensor:
    vision = getattr(config, "vision_config", None) or config
    size = getattr(vision, "image_size", None) or DEFAULT_IMAGE_SIZE
    height, width = (size, size) if isinstance(size, int) else (int(size[0]), int(size[-1]))
    return torch.randn(batch, int(getattr(vision, "num_channels", 3)), height, width)


def _speech_features(config: Any, batch: int, seq: int | None) -> torch.Tensor:
    mels, source = getattr(config, "num_mel_bins", None), getattr(config, "max_source_positions", None)
    if not (isinstance(mels, int) and isinstance(source, int)):
        raise ShapelintError("input_features without num_mel_bins and max_source_positions in the config")
    return torch.randn(batch, mels, 2 * source)  # two stride-1/stride-2 convolutions halve the frames


def _audio(config: Any, batch: int, seq: int | None) -> torch.Tensor:
    stride = math.prod(int(s) for s in getattr(config, "conv_stride", (1,)))
    return torch.randn(batch, (seq or DEFAULT_SEQ) * stride)


#: model classes whose loss is over token labels shaped like their (decoder) input ids
#: (MarianMTModel is a ForConditionalGeneration by another name)
LANGUAGE_MODEL_HEADS = ("ForCausalLM", "ForMaskedLM", "LMHeadModel", "ForConditionalGeneration", "MTModel",
                        "WithLMHead")

_MODALITIES: dict[str, Callable[[Any, int, int | None], torch.Tensor]] = {
    "input_ids": _token_ids,
    "pixel_values": _pixels,
    "input_features": _speech_features,
    "input_values": _audio,
}


def _hf_inputs(model: torch.nn.Module, config: Any, where: str, batch: int, seq: int | None) -> dict[str, Any]:
    main = getattr(model, "main_input_name", "input_ids")
    params = inspect.signature(model.forward).parameters
    if main not in _MODALITIES:
        raise ShapelintError(f"{where}: models whose input is {main!r} are not supported yet "
                             f"(supported: {', '.join(_MODALITIES)})")
    try:
        inputs: dict[str, Any] = {main: _MODALITIES[main](config, batch, seq)}
    except ShapelintError as exc:
        raise ShapelintError(f"{where}: {exc}") from exc
    if main == "input_ids" and "pixel_values" in params and getattr(config, "vision_config", None) is not None:
        inputs["pixel_values"] = _pixels(config, batch, seq)
    if getattr(config, "is_encoder_decoder", False) and "decoder_input_ids" in params:
        inputs["decoder_input_ids"] = _token_ids(config, batch, seq, decoder=True)
    if "labels" in params and type(model).__name__.endswith(LANGUAGE_MODEL_HEADS):
        # the step trains on the model's own loss: labels are the (decoder) tokens
        inputs["labels"] = inputs.get("decoder_input_ids", inputs.get("input_ids"))
    if "use_cache" in params:
        inputs["use_cache"] = False
    return inputs


def token_count(inputs: Any) -> int | None:
    """Tokens (rows) per step: batch x seq of integer token inputs, or every dimension
    but the feature dimension of the first floating input with at least two. None for
    images, speech features and raw audio (their rows are not a dimension of the input)."""
    first = inputs.get("input_ids") if isinstance(inputs, dict) and "input_ids" in inputs else inputs
    if isinstance(first, dict) and _MODALITIES.keys() & first.keys():
        return None
    if isinstance(first, dict):
        first = next(iter(first.values()), None)
    if isinstance(first, (tuple, list)):
        first = first[0] if first else None
    if not isinstance(first, torch.Tensor) or first.dim() == 0:
        return None
    if not first.is_floating_point():
        return int(math.prod(first.shape))
    return int(math.prod(first.shape[:-1])) if first.dim() in (2, 3) else None
