"""A Hugging Face config target (a ``config.json``, or a YAML's ``hf_config:``): the
model transformers builds for it, with meta weights made fake (nothing of its size is
allocated), on token (or image, speech, audio) inputs of batch x seq, and a way to
find where torch.compile would break its step (:mod:`shapelint.load.compile_probe`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from shapelint.capture.recorder import RecordingFakeMode
from shapelint.files import read_text
from shapelint.load import ssm_kernels
from shapelint.load.compile_probe import PROBE_TOKENS, probe_hf
from shapelint.load.documents import int_lines, read_json
from shapelint.load.fake import construction_sites, meta_to_fake
from shapelint.load.hf_config import build_config
from shapelint.load.hf_inputs import DEFAULT_BATCH, hf_inputs
from shapelint.load.hf_model import hf_model, loss_behind_graph_break, no_init_weights, unpacked_sequences
from shapelint.load.json_tokens import int_keys
from shapelint.load.loaded import Loaded
from shapelint.load.usercode import quiet_torch_logs
from shapelint.model.records import GraphBreaks, Source


def load_hf_config(path: Path, *, batch: int | None = None, seq: int | None = None) -> Loaded:
    """A config.json, built with meta/fake weights. Its precision is not the loader's
    business: capture casts (``shapelint.capture.precision.to_precision``)."""
    quiet_torch_logs()
    doc = read_json(path)
    loaded = load_hf_document(doc, str(path), batch=batch, seq=seq)
    text = read_text(path)
    loaded.config_keys = int_keys(text) or int_lines(text)
    loaded.config_file = str(path)
    return loaded


def load_hf_document(doc: dict[str, Any], where: str, *, batch: int | None, seq: int | None) -> Loaded:
    """The config ``doc`` (from ``where``) as a loaded target on fake tensors."""
    ssm_kernels.install()  # before a modeling module is imported: the SSM kernels a GPU runs
    transformers, config = build_config(doc, where)
    defined_at: dict[int, Source] = {}
    with construction_sites(defined_at), torch.device("meta"):
        model = hf_model(transformers, config, where, doc)
    unpacked_sequences(model)
    loss_behind_graph_break(model)
    mode = RecordingFakeMode()
    meta_to_fake(model, mode)
    with torch.device("cpu"):  # real data: what the model reads of them is exact (capture.host_reads)
        inputs = hf_inputs(model, config, where, batch or DEFAULT_BATCH, seq)
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
    with no_init_weights(transformers):
        model = hf_model(transformers, config, where, doc, initialise=True)
    if not any(p.is_meta for p in model.parameters()):
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(0.02)
    return model, hf_inputs(model, config, where, 1, PROBE_TOKENS)
