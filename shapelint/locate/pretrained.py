"""A Hugging Face config that belongs to a pretrained checkpoint, and what to do instead
of editing it.

A ``config.json`` with weights beside it, or one that ``save_pretrained`` wrote for a
download (``_name_or_path``, ``torch_dtype``; transformers 5.20 and later write
``dtype`` instead and leave out ``_name_or_path``), describes tensors that already exist:
``from_pretrained`` fails with a size mismatch once its ``vocab_size`` no longer
matches the embedding it loads. Such a config is never edited. The vocabulary is
padded in the training code instead, after loading, by
``model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=N)``, which adds
rows to the embedding (and a tied head) while the tokenizer keeps its tokens. Other
sizes of a checkpoint are what its weights were trained at: there is nothing to edit.
"""

from __future__ import annotations

import fnmatch
import json
import os
from pathlib import Path

#: files of weights that make a folder a checkpoint (sharded ones come with an ``*.index.json``)
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.ckpt", "*.h5", "*.msgpack", "*.index.json")
#: keys save_pretrained writes into a downloaded model's config: ``_name_or_path`` and
#: ``torch_dtype`` before transformers 5.20, ``dtype`` from then on (it writes no
#: ``_name_or_path`` any more, so ``dtype`` alone must be enough)
DOWNLOAD_KEYS = ("_name_or_path", "torch_dtype", "dtype")
#: at most this many folder entries are looked at (a checkpoint folder holds a few dozen)
MAX_ENTRIES = 10_000


def _weights(folder: Path) -> list[str]:
    names = []
    try:
        with os.scandir(folder) as entries:
            for i, entry in enumerate(entries):
                if i >= MAX_ENTRIES:
                    break
                if any(fnmatch.fnmatch(entry.name.lower(), p) for p in WEIGHT_PATTERNS):
                    names.append(entry.name)
    except OSError:
        return []
    return sorted(names)


def marks(config_file: str | Path) -> str | None:
    """Why ``config_file`` is a pretrained checkpoint's config (``model.safetensors is
    beside it``, ``it has _name_or_path``), or None."""
    path = Path(config_file)
    if path.suffix.lower() != ".json":
        return None
    weights = _weights(path.parent)
    if weights:
        more = f" (and {len(weights) - 1} more weight files)" if len(weights) > 1 else ""
        return f"{weights[0]} is beside {path.name}{more}"
    try:
        doc = json.loads(path.read_bytes().decode("utf-8-sig"))
    except (OSError, ValueError, RecursionError):
        return None
    key = next((k for k in DOWNLOAD_KEYS if isinstance(doc, dict) and k in doc), None)
    return f"{path.name} has {key}, the mark of a downloaded model" if key else None


def multiple(vocab: int, to: int) -> int | None:
    """The largest power of two ``m`` with which ``pad_to_multiple_of=m`` pads ``vocab``
    to exactly ``to``, or None (``to`` is not the next multiple of any)."""
    m = 1
    while to % (m * 2) == 0:
        m *= 2
    while m > 1 and -(-vocab // m) * m != to:
        m //= 2
    return m if m > 1 else None


def recipe(vocab: int, to: int) -> str:
    """How to pad a pretrained model's vocabulary from ``vocab`` to ``to`` in code."""
    m = multiple(vocab, to)
    call = (f"model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of={m})" if m
            else f"model.resize_token_embeddings({to})")
    return (f"pad in the training code after from_pretrained: {call} ({vocab} → {to} rows when len(tokenizer) is "
            f"{vocab}); the tokenizer keeps its {vocab} tokens")


def refusal(why: str) -> str:
    """The reason a size of a pretrained checkpoint's config is not edited."""
    return (f"a pretrained checkpoint ({why}): its config gives the sizes its weights were trained at, and "
            f"from_pretrained fails once they differ; it is never edited")


__all__ = ["DOWNLOAD_KEYS", "WEIGHT_PATTERNS", "marks", "multiple", "recipe", "refusal"]
