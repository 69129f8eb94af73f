"""A target built for real on a device, with random weights, for ``--verify --step``
(``shapelint.measure.step`` trains it): the class, inputs and labels the lint traced,
built by the same code paths the fake load takes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from shapelint.errors import ShapelintError
from shapelint.load import validate
from shapelint.load.documents import read_json
from shapelint.load.hf_config import build_config
from shapelint.load.hf_inputs import DEFAULT_BATCH, hf_inputs
from shapelint.load.hf_model import hf_model
from shapelint.load.python_target import python_model
from shapelint.load.targets import target_kind
from shapelint.load.usercode import quiet_torch_logs
from shapelint.load.yaml_target import yaml_builder, yaml_target


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
    """Build ``path``'s model for real on ``device``, as :func:`shapelint.load.run.load`
    builds it on fake tensors: a model.py's ``shapelint_model()`` as written, a YAML's
    builder, a Hugging Face config with the same class choice
    (:func:`shapelint.load.hf_model.hf_model`, weights initialised), inputs and labels
    (:func:`shapelint.load.hf_inputs.hf_inputs`). Parameters and floating inputs stay as
    built (the step casts them, see ``shapelint.measure.step``)."""
    quiet_torch_logs()
    kind = target_kind(path)
    if kind == "hf-config":
        file = path / "config.json" if path.is_dir() else path
        return _build_hf(read_json(file), str(file), batch, seq, device, kind)
    if kind == "yaml":
        doc, _, batch, seq = yaml_target(path, batch, seq)
        if "hf_config" in doc:
            return _build_hf(doc["hf_config"], str(path), batch, seq, device, kind)
        model, inputs = _on_device(device, lambda: yaml_builder(doc, path, batch, seq, allow_builders))
        validate.built(model, inputs, f"{path}: {doc['model']}")
    else:
        model, inputs = _on_device(device, lambda: python_model(path, batch, seq))
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


def _build_hf(doc: dict[str, Any], where: str, batch: int | None, seq: int | None, device: str, kind: str) -> Built:
    transformers, config = build_config(doc, where)

    def make() -> tuple[torch.nn.Module, dict[str, Any]]:
        model = hf_model(transformers, config, where, doc, initialise=True)
        return model, hf_inputs(model, config, where, batch or DEFAULT_BATCH, seq)

    model, inputs = _on_device(device, make)
    return Built(where, kind, model.to(device), to_device(inputs, device))
