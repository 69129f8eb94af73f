"""The model shapelint builds for a Hugging Face config, and what it changes while the
model runs on fake tensors so the step it records is the one a GPU runs: no packed
sequences (so SDPA gets no mask where a GPU's gets none, and the host sync transformers
makes to find that out is noted), and the loss behind the graph break torch.compile
makes there (noted too)."""

from __future__ import annotations

import contextlib
import importlib
from contextvars import Token
from typing import Any

import torch

from shapelint.capture.recorder import note_graph_break, note_host_sync
from shapelint.capture.sdpa import compile_builds_mask
from shapelint.errors import ShapelintError, one_line
from shapelint.load import validate

#: attention implementations tried in turn: SDPA (what a GPU step runs), then the
#: architecture's own matmul-softmax-matmul where it has no SDPA path
ATTENTION_IMPLEMENTATIONS = ("sdpa", "eager")


def hf_model(transformers: Any, config: Any, where: str, doc: dict[str, Any], *,
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
                skip = contextlib.nullcontext() if initialise else no_init_weights(transformers)
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


def loss_behind_graph_break(model: torch.nn.Module) -> None:
    """A model whose class transformers cannot map to a loss (``loss_type`` unset or
    unknown: GPT-2's ``GPT2LMHeadModel``) warns as its ``loss_function`` is looked up,
    once per process, and dynamo breaks the graph at that warning: compiled, the loss
    is a graph of its own, and the logits' gradient reaches the model's backward graph
    as an input, in the layout the loss made it (GPT-2 compiles to 2 graphs, BERT and
    RoBERTa to 1: ``docs/benchmarks.md``). Capture is told where (``note_graph_break``)."""
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


def unpacked_sequences(model: torch.nn.Module) -> None:
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
    host (``(...).all()``): an eager step waits there for the GPU (GPT-2 at 8x1024 on an
    H100 takes 72.3 ms a step with the check, 64.8 without: ``docs/step-model.md``)."""
    note_host_sync()
    return None


def no_init_weights(transformers: Any) -> Any:
    for where in ("transformers.initialization", "transformers.modeling_utils"):
        try:
            return importlib.import_module(where).no_init_weights()
        except (ImportError, AttributeError):
            continue
    return contextlib.nullcontext()
