"""A GEMM operand's leading dimension is not a multiple of 16 bytes.

## What it does
Checks every tensor-core GEMM of the step (forward, grad-input, grad-weight) for an
operand or output whose leading dimension (row stride, as laid out in memory),
pointer offset or batch stride is not a multiple of 16 bytes: 8 elements in
bf16/fp16, 4 in tf32, 16 in fp8/int8. It models the real layouts: for
``nn.Linear(in, out)`` the leading dimensions are ``in`` and ``out``, never the
token count, so an odd batch is not flagged. Vocabulary sizes are left to SL501,
convolutions to SL401, and a tensor-parallel shard of a size aligned whole to SL601.

A misaligned leading dimension that no knob the user owns aligns is not reported
(``shapelint.locate.knobs``): no suggestion would be one they can make, and shapelint
does not invent one. Two kinds, both measured on an H100 (2026-11-26,
``benchmarks/corpus_findings_gpu.py``, padded to the aligned size, share of the step):

- **a view's row stride the algorithm sets**, none of the GEMM's sizes: Longformer's
  and LED's sliding-window attention multiplies views of a (chunks, w, 3w+1) tensor,
  rows 3w+1 apart for the one-sided window w = ``attention_window`` / 2 (769 for
  Longformer-base, 3.26 ms, 2.2%; 1537 for LED-base, 1.92 ms, 1.1%). No window aligns
  it: 3w+1 is a multiple of 8 only for odd w, and then the chunk length 2w, a size of
  the same GEMMs, is 2 modulo 4 (and the checkpoint was trained at its window).
- **a sequence, window or position size of GEMMs between activations** (no weight,
  no layer parameter of that value): SpeechT5's encoder over 1023 frames (the
  feature extractor's output for the clip length; 4.09 ms, 2.0%, in its attention
  and relative-position matmuls), vit-pytorch's 65 tokens, SAM's 14-wide windows.
  The data's length or a pretrained constant: shorter or longer clips, crops and
  windows change what the model computes, not only its speed.

## Why is this bad?
cuBLAS's fastest (TMA / 16-byte vector load) kernels need 16-byte aligned rows;
otherwise it falls back to kernels that load 2 or 4 bytes at a time. Measured on
an H200 in bf16: ``nn.Linear(1023 → 3072)`` over 16384 tokens runs its GEMMs at
137 TFLOP/s against 662 with ``in_features=1024`` (4.8x); 8-byte alignment
(e.g. 4100) recovers only about 40%.

## Example
```python
nn.Linear(1023, 3072)
```

## Use instead
```python
nn.Linear(1024, 3072)  # pad the input features with zeros
```
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from shapelint.check.rule_api import Example, RuleContext, phases
from shapelint.hardware import Hardware
from shapelint.model.records import (
    Change,
    Dim,
    Gemm,
    Proposal,
    Severity,
    SizeSearch,
    Suggestion,
)
from shapelint.physics.alignment import misaligned_layer_sizes
from shapelint.physics.reshape import resize

CODE = "SL101"
NAME = "misaligned-leading-dim"
SEVERITY: Severity = "error"

#: search for the padded size up to the next multiple of this many elements
SEARCH_SPAN = 256

BAD = [
    Example("nn.Linear(1023, 3072)", "torch.randn(4096, 1023)",
            expect={"parameter": "in_features", "from": 1023, "to": 1024}, min_speedup=2.0),
    Example("nn.Sequential(nn.Linear(1024, 5461), nn.GELU(), nn.Linear(5461, 1024))",
            "torch.randn(4096, 1024)", expect={"from": 5461, "to": 5464}, min_speedup=2.0),
    Example("nn.Linear(4096, 4100)", "torch.randn(8192, 4096)", dtype="fp16",
            expect={"parameter": "out_features", "from": 4100, "to": 4104}),
    Example("nn.Linear(1022, 4096)", "torch.randn(4096, 1022)", dtype="tf32",
            expect={"parameter": "in_features", "from": 1022, "to": 1024}),
]
GOOD = [
    # an odd token count is never a leading dimension of a Linear's GEMMs
    Example("nn.Linear(1024, 4096)", "torch.randn(4093, 1024)"),
    # tf32 needs 4-element alignment only
    Example("nn.Linear(1028, 4096)", "torch.randn(2048, 1028)", dtype="tf32"),
    # no tensor cores in plain fp32: alignment does not matter (SL102 speaks instead)
    Example("nn.Linear(1023, 3072)", "torch.randn(4096, 1023)", dtype="fp32"),
]


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Proposal]:
    def skip(value: int, g: Gemm) -> bool:
        return context.is_vocab_dim(value) or context.is_shard_of_aligned(value, g, hardware)

    for value, covered in misaligned_layer_sizes(gemms, hardware, skip):
        yield _proposal(covered, value, hardware, context)


def _proposal(covered: tuple[Gemm, ...], value: int, hw: Hardware, context: RuleContext) -> Proposal:
    g = covered[0]
    align = hw.align_elems(g.dtype_bytes)
    param = g.param(value) or "size"

    def at(sizes: tuple[int, ...]) -> Change:
        (to,) = sizes
        return Change(
            Suggestion(param, value, to),
            tuple(resize(h, value, to) for h in covered),
            f"{param} = {value} is a leading dimension of {len(covered)} {g.dtype} GEMMs ({phases(covered)}) "
            f"and not a multiple of {align} elements (16 bytes): cuBLAS falls back to slower kernels",
            (("dimension", value), ("align_elems", align), ("extra_elements", to - value)),
        )

    return Proposal(CODE, NAME, SEVERITY, covered,
                    SizeSearch((Dim(value, align, SEARCH_SPAN, context.tp),), at))
