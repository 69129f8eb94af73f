"""A shapelint YAML target: a file naming a builder (``module:function`` or
``file.py:function``), its keyword arguments, the inputs' shapes, and defaults for
dtype, gpu, training; or a Hugging Face config written inline (``hf_config:``).

Every value is checked before anything runs (:mod:`shapelint.load.validate`), and the
builder only from the YAML's own project or an allow-listed package
(:mod:`shapelint.load.builders`)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from shapelint.capture.precision import PRECISIONS
from shapelint.capture.traceable import check_on_cpu
from shapelint.errors import ShapelintError
from shapelint.files import read_text
from shapelint.load import builders, validate
from shapelint.load.calling import call_target_code, check_built, import_target_file, size_kwargs
from shapelint.load.documents import int_lines, read_yaml
from shapelint.load.fake import fake_construction
from shapelint.load.hf_target import load_hf_document
from shapelint.load.input_specs import TORCH_DTYPES, inputs_from_specs
from shapelint.load.loaded import Loaded
from shapelint.load.usercode import quiet_torch_logs, user_code
from shapelint.model.records import Source
from shapelint.model.target_settings import TARGET_SETTINGS

#: the keys a YAML target may have: what builds the model, and its own settings
YAML_KEYS = {"model", "kwargs", "inputs", "hf_config", *TARGET_SETTINGS}


def load_yaml(path: Path, *, batch: int | None = None, seq: int | None = None,
              allow_builders: Sequence[str] = ()) -> Loaded:
    """``allow_builders``: packages outside the YAML's project whose functions its
    ``model:`` may name (the configuration's ``allow-builders``)."""
    quiet_torch_logs()
    doc, settings, batch, seq = yaml_target(path, batch, seq)
    lines = int_lines(read_text(path))
    if "hf_config" in doc:
        loaded = load_hf_document(doc["hf_config"], str(path), batch=batch, seq=seq)
        loaded.kind, loaded.settings = "yaml", settings
        loaded.config_keys, loaded.config_file = lines, str(path)
        return loaded
    defined_at: dict[int, Source] = {}
    with fake_construction(defined_at) as mode:
        model, inputs = yaml_builder(doc, path, batch, seq, allow_builders)
    validate.built(model, inputs, f"{path}: {doc['model']}")
    check_on_cpu(model, inputs, str(path))
    loaded = Loaded(str(path), "yaml", model, inputs, mode, defined_at, settings)
    loaded.config_keys, loaded.config_file = lines, str(path)
    return loaded


def yaml_target(path: Path, batch: int | None, seq: int | None
                ) -> tuple[dict[str, Any], dict[str, Any], int | None, int | None]:
    """A shapelint YAML checked: (document, its own settings, batch, seq), where a
    given ``batch``/``seq`` wins over the YAML's."""
    doc = read_yaml(path)
    unknown = sorted(set(doc) - YAML_KEYS)
    if unknown:
        raise ShapelintError(f"{path}: unknown key {unknown[0]!r} (known: {', '.join(sorted(YAML_KEYS))})")
    if "model" not in doc and "hf_config" not in doc:
        raise ShapelintError(f"{path}: needs 'model: module:function' (or 'hf_config: {{...}}')")
    validate.settings(doc, str(path), PRECISIONS)
    settings: dict[str, Any] = {k: doc[k] for k in TARGET_SETTINGS if k in doc}
    if "hf_config" in doc and not isinstance(doc["hf_config"], dict):
        raise ShapelintError(f"{path}: hf_config must be a mapping of config keys")
    return doc, settings, batch or settings.get("batch"), seq or settings.get("seq")


def yaml_builder(doc: dict[str, Any], path: Path, batch: int | None, seq: int | None,
                 allow_builders: Sequence[str]) -> tuple[torch.nn.Module, Any]:
    """The model and inputs a YAML's builder makes, in the caller's construction
    context (fake tensors for the lint, a device for ``--verify --step``)."""
    if not isinstance(doc["model"], str):
        raise ShapelintError(f"{path}: model must be 'module:function' or 'file.py:function', "
                             f"got {validate.show(doc['model'])}")
    kwargs = validate.kwargs(doc.get("kwargs"), str(path))
    specs = doc.get("inputs")
    validate.inputs(specs, str(path), TORCH_DTYPES)
    fn, file = _resolve_builder(doc["model"], path, allow_builders)
    kwargs = {**size_kwargs(fn, batch, seq), **kwargs}
    result = call_target_code(fn, file, f"builder {doc['model']} (from {path})", builders.search_folders(path),
                              **kwargs)
    if not isinstance(result, torch.nn.Module):
        return check_built(result, f"{path}: {doc['model']}")
    if specs is None:
        raise ShapelintError(f"{path}: the builder returned a model only; give 'inputs: [{{shape: [...]}}]'")
    return result, inputs_from_specs(specs)


def _resolve_builder(spec: str, yaml_path: Path, allow: Sequence[str] = ()) -> tuple[Callable[..., Any], Path]:
    """``package.module:function`` or ``path/to/file.py:function`` (relative to the
    YAML), only from the YAML's own project or an allow-listed package (see
    :mod:`shapelint.load.builders`); returns the builder and the file it runs from."""
    where = str(yaml_path)
    place, fn_name = builders.split_spec(spec, where)
    if place.endswith(".py"):
        file = builders.builder_file(place, yaml_path, where)
        fn = getattr(import_target_file(file), fn_name, None)
        return builders.check_defined_inside(fn, None, yaml_path, allow, where, spec), file
    builders.check_module(place, yaml_path, allow, where)
    with user_code(yaml_path, f"importing {place}", builders.search_folders(yaml_path)):
        module = importlib.import_module(place)
        fn = getattr(module, fn_name, None)
        checked = builders.check_defined_inside(fn, place, yaml_path, allow, where, spec)
    return checked, Path(getattr(module, "__file__", None) or yaml_path)
