"""The vocabulary (LM head / tied embedding) size is not padded for tensor cores.

## What it does
Finds the GEMMs of a language model's output layer (a Linear or tied embedding
whose size is the vocabulary of an ``nn.Embedding`` in the model) and suggests the
smallest padded vocabulary that the pricer finds reaches (nearly) the best time,
divisible by the tensor-parallel degree. It notes what padding costs (parameters,
memory) and what it needs: tied weights grow with it, and the loss must ignore
the padded rows.

## Why is this bad?
The vocabulary is a leading dimension of the LM head's forward, grad-input and
grad-weight GEMMs, usually the largest GEMMs of the step. Measured on an H200 in
bf16 over 12288 tokens: ``nn.Linear(768, 50257)`` takes 22.9 ms for forward +
backward against 4.4 ms at 50264 (5.2x).

Where the host bounds the step, the GPU time the padding saves is reported with a
note that says so: it shows once the step is GPU-bound (torch.compile, CUDA graphs, a
larger batch). Whisper-small's 51865-token output layer at its default step (8 clips,
448 tokens): 5.97 ms of GPU time measured on an H100 (6.07x on its GEMMs, estimated
5.21 ms); the slice of the padded logits runs next to it, in the host's shadow too.

## Example
```python
self.lm_head = nn.Linear(768, 50257, bias=False)  # GPT-2's vocabulary
```

## Use instead
```python
self.lm_head = nn.Linear(768, 50304, bias=False)  # padded; tokenizer still 50257
logits = logits[..., :50257]  # or: logits[..., 50257:] = float("-inf") before the loss
```
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import nn

from shapelint.check.rule_api import Example, RuleContext, phases
from shapelint.hardware import Hardware, ceil_div
from shapelint.model.records import (
    Change,
    Dim,
    Gemm,
    Proposal,
    Severity,
    SizeSearch,
    Slice,
    Suggestion,
)
from shapelint.physics.reshape import resize

CODE = "SL501"
NAME = "vocab-padding"
SEVERITY: Severity = "error"

#: search for the padded vocabulary up to the next multiple of this many entries
SEARCH_SPAN = 256
#: module parameters that give the width of one vocabulary row
WIDTH_PARAMS = ("in_features", "embedding_dim", "nx")

BAD = [
    Example("_rule.TinyLM(50257)",
            "torch.randint(0, 50257, (8, 512))", expect={"parameter": "out_features", "from": 50257},
            min_speedup=2.0),
    Example("_rule.TinyLM(32001, 4096)",
            "torch.randint(0, 32001, (4, 512))", expect={"from": 32001, "to": 32008}, min_speedup=2.0),
]
GOOD = [
    Example("_rule.TinyLM(50304)",
            "torch.randint(0, 50304, (8, 512))"),
    Example("_rule.TinyLM(32000, 4096)",
            "torch.randint(0, 32000, (4, 512))"),
]


def _vocab_dim(g: Gemm, vocab: int, tp: int) -> int | None:
    """The per-GPU vocabulary dimension of ``g`` (``vocab`` or its shard), if any."""
    for size in {vocab, ceil_div(vocab, tp)}:
        if size in (g.m, g.n, g.k):
            return size
    return None


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Proposal]:
    for vocab in sorted(context.vocab_sizes):
        heads: dict[str, list[Gemm]] = {}
        for g in gemms:
            if hardware.uses_tensor_cores(g.dtype) and g.role == "" and _vocab_dim(g, vocab, context.tp):
                heads.setdefault(g.module, []).append(g)
        for covered in heads.values():
            yield _proposal(tuple(covered), vocab, hardware, context)


def _proposal(covered: tuple[Gemm, ...], vocab: int, hw: Hardware, context: RuleContext) -> Proposal:
    g = covered[0]
    tp = context.tp
    shard = _vocab_dim(g, vocab, tp) or vocab
    width = next((v for k, v in g.module_params if k in WIDTH_PARAMS), 0)
    param = g.param(vocab) or "vocab_size"

    def at(sizes: tuple[int, ...]) -> Change:
        (to,) = sizes
        extra = (to - vocab) * width
        shard_note = f" ({to // tp} per GPU at tp={tp})" if tp > 1 else ""
        return Change(
            Suggestion(param, vocab, to),
            tuple(resize(h, shard, ceil_div(to, tp) if shard != vocab else to) for h in covered),
            f"vocabulary {vocab} in {len(covered)} {g.dtype} GEMMs ({phases(covered)}); "
            f"pad to {to}{shard_note}: +{extra:,} parameters; tied embeddings grow with it, and the loss must "
            f"ignore the padded logits (slice them off or set them to -inf)",
            (("extra_rows", to - vocab), ("extra_params", extra), ("tp", tp)),
            slices=tuple(Slice(h.m * h.batch, shard, ceil_div(to, tp) if shard != vocab else to, h.dtype_bytes)
                         for h in covered if h.phase == "forward" and h.n == shard),
            vocab=vocab,
        )

    dim = Dim(vocab, hw.align_elems(g.dtype_bytes), SEARCH_SPAN, tp)
    return Proposal(CODE, NAME, SEVERITY, covered, SizeSearch((dim,), at))


class TinyLM(nn.Module):
    """An embedding and an LM head, for the examples."""

    def __init__(self, vocab: int, width: int = 768) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.lm_head = nn.Linear(width, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.wte(idx))
