"""The load stage's entry: a target (model.py, config.json, shapelint YAML) turned
into a model and example inputs on fake tensors (:class:`shapelint.load.loaded.Loaded`),
so nothing is allocated. Each kind has its own module: :mod:`.python_target`,
:mod:`.hf_target`, :mod:`.yaml_target`."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from shapelint.load.hf_target import load_hf_config
from shapelint.load.loaded import Loaded
from shapelint.load.python_target import load_python
from shapelint.load.targets import target_kind
from shapelint.load.torchvision_ops import install as torchvision_without_ops
from shapelint.load.yaml_target import load_yaml


def load(path: Path, *, batch: int | None = None, seq: int | None = None,
         allow_builders: Sequence[str] = ()) -> Loaded:
    """A target, built on fake tensors (fp32, as written: the compute precision is
    applied by capture). ``allow_builders``: see :func:`shapelint.load.yaml_target.load_yaml`."""
    kind = target_kind(path)
    torchvision_without_ops()  # before the target's code (or transformers) imports torchvision
    if kind == "python":
        return load_python(path, batch=batch, seq=seq)
    if kind == "hf-config":
        return load_hf_config(path / "config.json" if path.is_dir() else path, batch=batch, seq=seq)
    return load_yaml(path, batch=batch, seq=seq, allow_builders=allow_builders)
