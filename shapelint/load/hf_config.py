"""A Hugging Face config read: transformers imported offline, the file's keys checked
(dimensions positive, heads that divide, a depth shapelint can trace) and the config
built, with the random changes to a training step that no fake tensor can take
switched off."""

from __future__ import annotations

import os
from typing import Any

from shapelint.errors import ShapelintError, one_line
from shapelint.load import validate
from shapelint.load.torchvision_ops import install as torchvision_without_ops


def import_transformers() -> Any:
    """transformers, never reaching the network (a config is all shapelint reads)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    torchvision_without_ops()  # transformers imports torchvision where it is installed
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

#: the key endings and beginnings that name a dimension (which must be positive)
_DIMENSION_SUFFIXES = ("_size", "_dim", "_heads", "_layers", "_embd", "_head", "_positions", "_ctx")
_DIMENSION_PREFIXES = ("num_", "n_")


def _check_dims(doc: dict[str, Any], where: str) -> None:
    for key, value in doc.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or SENTINELS.get(key) == value:
            continue
        if (key.endswith(_DIMENSION_SUFFIXES) or key.startswith(_DIMENSION_PREFIXES)) and value <= 0:
            raise ShapelintError(f"{where}: {key} = {value}: dimensions must be positive")


#: probabilities of random changes to a training step that no fake tensor can take
#: (data-dependent branches): LayerDrop skips layers, SpecAugment overwrites frames
#: (with an index_put of a random mask). shapelint traces the step in which every
#: layer runs on every frame; no GEMM shape depends on them.
RANDOM_STEP_KEYS = ("layerdrop", "encoder_layerdrop", "decoder_layerdrop", "mask_time_prob", "mask_feature_prob")


def build_config(doc: dict[str, Any], where: str) -> tuple[Any, Any]:
    """transformers and the config ``doc`` describes (random step changes off)."""
    transformers = import_transformers()
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
    no_random_steps(config)
    return transformers, config


def no_random_steps(config: Any) -> None:
    """:data:`RANDOM_STEP_KEYS` zeroed on ``config`` and its sub-configs, the class
    defaults included (``HubertConfig`` defaults to ``layerdrop=0.1`` and
    ``mask_time_prob=0.05`` where the file names neither)."""
    subs = [getattr(config, key, None) for key in getattr(config, "sub_configs", None) or {}]
    for c in [config, *(s for s in subs if s is not None)]:
        for key in RANDOM_STEP_KEYS:
            value = getattr(c, key, None)
            if isinstance(value, float) and value > 0:
                setattr(c, key, 0.0)
