"""Example inputs for a model built from a Hugging Face config, per modality, and
the tokens a step's inputs hold (any target's).

A batch of ``--batch`` (default :data:`DEFAULT_BATCH`) examples of

- text (``input_ids``, and ``decoder_input_ids`` for encoder-decoders): ``--seq``
  tokens (default :data:`DEFAULT_SEQ`), capped at the model's (or the decoder's)
  positions;
- images (``pixel_values``): the config's ``image_size`` and ``num_channels``
  (``--seq`` unused);
- speech features (``input_features``, Whisper): ``num_mel_bins`` x
  2·``max_source_positions`` frames, the fixed window the encoder takes;
- raw audio (``input_values``, wav2vec2): ``--seq`` (default :data:`DEFAULT_SEQ`)
  encoder frames' worth of samples (times the feature extractor's conv strides).

A model that takes both text and images (CLIP) gets both; a language model's labels
are its (decoder) input tokens, so the step trains on the model's own loss.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable

import torch

from shapelint.errors import ShapelintError

#: default token shape for config targets: GPT-2's training shape (8 sequences of 1024)
DEFAULT_BATCH = 8
DEFAULT_SEQ = 1024

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

#: each modality by the name of the input its models take first (``main_input_name``),
#: and how its example input is made from the config, batch and ``--seq``
MODALITIES: dict[str, Callable[[Any, int, int | None], torch.Tensor]] = {
    "input_ids": _token_ids,
    "pixel_values": _pixels,
    "input_features": _speech_features,
    "input_values": _audio,
}


def hf_inputs(model: torch.nn.Module, config: Any, where: str, batch: int, seq: int | None) -> dict[str, Any]:
    """The keyword arguments ``model`` is called with: its main input, the images or
    decoder tokens it also takes, the labels of a language model, no cache."""
    main = getattr(model, "main_input_name", "input_ids")
    params = inspect.signature(model.forward).parameters
    if main not in MODALITIES:
        raise ShapelintError(f"{where}: models whose input is {main!r} are not supported yet "
                             f"(supported: {', '.join(MODALITIES)})")
    try:
        inputs: dict[str, Any] = {main: MODALITIES[main](config, batch, seq)}
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
    if isinstance(first, dict) and MODALITIES.keys() & first.keys():
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
