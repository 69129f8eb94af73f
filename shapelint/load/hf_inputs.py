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
are its (decoder) input tokens, so the step trains on the model's own loss (a decoder
over parallel codebooks, MusicGen, gets labels of (batch, seq, codebooks)). Token ids
avoid the special ids the config names, and a vision-language model's rows start with
one image's worth of image tokens, as real training examples do.
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
    if decoder:
        return get(decoder=True)
    try:
        return get()
    except ValueError:  # two text configs (MusicGen: text_encoder and decoder): the input side is the encoder's
        return get(encoder=True)


#: every example input is drawn from this seed: the same inputs on every lint, so a
#: read of a value derived from them (``shapelint.capture.host_reads``) is the same too
SEED = 0


def _generator() -> torch.Generator:
    """The inputs' seeded generator. It is a CPU one, and the inputs are drawn on the CPU
    (``device="cpu"`` at each draw): ``--verify --step`` builds under ``torch.device("cuda")``,
    where a CPU generator is refused, then moves the inputs to the GPU."""
    return torch.Generator().manual_seed(SEED)


#: config key endings that name a special token (padding, start, end, image...)
_SPECIAL_KEYS = ("_token_id", "_token_ids", "_token_index")


def special_ids(*configs: Any) -> list[int]:
    """The special token ids the configs name, ascending: random token ids avoid them
    (a pad id among FSMT's inputs switches it to its padded path; an image token among
    a VLM's text makes its image-token check fail)."""
    ids: set[int] = set()
    for c in configs:
        for key, value in vars(c).items() if c is not None else ():
            if key.endswith(_SPECIAL_KEYS):
                ids.update(v for v in (value if isinstance(value, (list, tuple)) else [value])
                           if isinstance(v, int) and not isinstance(v, bool))
    return sorted(ids)


def _token_ids(config: Any, batch: int, seq: int | None, decoder: bool = False) -> torch.Tensor:
    text = _text_config(config, decoder)
    limit = _positions(text, decoder)
    tokens = min(seq or DEFAULT_SEQ, limit or DEFAULT_SEQ)
    vocab = int(getattr(text, "vocab_size", 2) or 2)
    specials = [i for i in special_ids(config, text) if 0 <= i < vocab]
    if len(specials) >= vocab:
        specials = []
    ids = torch.randint(0, vocab - len(specials), (batch, tokens), generator=_generator(), device="cpu")
    for special in specials:  # the r-th id that is not special
        ids += (ids >= special).long()
    image = None if decoder else image_tokens(config)
    if image is not None:
        token, count = image
        if count > tokens:
            raise ShapelintError(f"one image's {count} image tokens do not fit in a sequence of {tokens} tokens: "
                                 f"give --seq more than {count}")
        ids[:, :count] = token
    return ids


#: the config keys (``sub-config.key``) that say how many image tokens a VLM's text
#: holds per image: as many as the vision tower makes features
IMAGE_TOKEN_COUNTS = ("image_seq_length", "text_config.num_image_tokens", "perceiver_config.resampler_n_latents")


def image_tokens(config: Any) -> tuple[int, int] | None:
    """(image token id, tokens per image) of a vision-language model, None for others:
    each row of its ``input_ids`` starts with one image's tokens, as every real
    training example does (LLaVA-1.5: 576, PaliGemma-224: 256, Idefics2: 64)."""
    token = next((v for k in ("image_token_id", "image_token_index")
                  if isinstance(v := getattr(config, k, None), int) and not isinstance(v, bool)), None)
    if token is None:
        return None
    for key in IMAGE_TOKEN_COUNTS:
        holder, _, name = key.rpartition(".")
        count = getattr(getattr(config, holder, None) if holder else config, name, None)
        if isinstance(count, int) and count > 0:
            return token, count
    return None


#: model types whose ``pixel_values`` hold several images per example: (batch, images, C, H, W)
IMAGES_PER_EXAMPLE = ("idefics2", "idefics3", "smolvlm")


def _pixels(config: Any, batch: int, seq: int | None) -> torch.Tensor:
    vision = getattr(config, "vision_config", None) or config
    size = getattr(vision, "image_size", None) or DEFAULT_IMAGE_SIZE
    height, width = (size, size) if isinstance(size, int) else (int(size[0]), int(size[-1]))
    pixels = torch.randn(batch, int(getattr(vision, "num_channels", 3)), height, width, generator=_generator(), device="cpu")
    return pixels.unsqueeze(1) if getattr(config, "model_type", "") in IMAGES_PER_EXAMPLE else pixels


def _speech_features(config: Any, batch: int, seq: int | None) -> torch.Tensor:
    mels, source = getattr(config, "num_mel_bins", None), getattr(config, "max_source_positions", None)
    if not (isinstance(mels, int) and isinstance(source, int)):
        raise ShapelintError("input_features without num_mel_bins and max_source_positions in the config")
    # two stride-1/stride-2 convolutions halve the frames
    return torch.randn(batch, mels, 2 * source, generator=_generator(), device="cpu")


def _audio(config: Any, batch: int, seq: int | None) -> torch.Tensor:
    stride = math.prod(int(s) for s in getattr(config, "conv_stride", (1,)))
    return torch.randn(batch, (seq or DEFAULT_SEQ) * stride, generator=_generator(), device="cpu")


def _codebook_labels(config: Any, decoder_ids: torch.Tensor) -> torch.Tensor | None:
    """Labels of a decoder over ``num_codebooks`` parallel codebooks (MusicGen):
    (batch, seq, codebooks); the model builds its (batch x codebooks, seq) decoder ids
    from them. None for other models."""
    decoder = getattr(config, "decoder", None)
    k = getattr(decoder, "num_codebooks", None)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        return None
    vocab = int(getattr(decoder, "vocab_size", 2) or 2)
    batch, tokens = decoder_ids.shape
    return torch.randint(0, vocab, (batch, tokens, k), generator=_generator(), device="cpu")


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
    decoder tokens it also takes, the labels of a language model, no cache. They are
    data, drawn from :data:`SEED`: built outside a fake mode they are real tensors, and
    a value the model reads from them alone is exact (``shapelint.capture.host_reads``)."""
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
        codebooks = _codebook_labels(config, inputs["labels"])
        if codebooks is not None:
            inputs["labels"] = codebooks
            inputs.pop("decoder_input_ids", None)
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
