"""FSDP2 groups of one block each are too small to reach the bandwidth, and each costs host work.

## What it does
Under ``--fsdp N``, checks the groups ``fully_shard`` gathers, one per block of the
model's repeated layers. When the blocks' groups are smaller than the size at which an
all-gather reaches most of its bandwidth, it proposes wrapping several consecutive
blocks in one ``fully_shard`` call. The pricer re-plans the step's communication for
each block count and picks the smallest whose step saving is within 1% of the best,
never gathering more at once than the root group, which FSDP2 already holds unsharded
through the step. The ``fully_shard`` calls are in the training script, not in the
model: the fix is there.

## Why is this bad?
An all-gather of a few MiB costs the collective's latency, not its bytes: on 2 H100s a
16 MiB all-gather takes 102 µs and a 64 MiB one 164 µs (measured, NCCL 2.28, 2026-11-25),
so 4 groups of 16 MiB take 2.5× the time of one of 64 MiB. Each group also costs FSDP2
its host work (hooks, copy-in and copy-out, stream waits: 2.34 ms per group per step,
fitted to 45 measured 2-GPU steps, GPT-2 small's FSDP2 steps with 1 to 6 blocks per
group among them). GPT-2 small at ``--fsdp 8`` with 1 × 1024 tokens per GPU (12 groups
of 27 MiB) is estimated at 94.6 ms a step, 73.5 ms with 4 blocks per group.

## Example
```python
for block in model.transformer.h:
    fully_shard(block)
fully_shard(model)
```

## Use instead
```python
blocks = list(model.transformer.h)
for i in range(0, len(blocks), 4):  # 4 blocks per group
    fully_shard(blocks[i:i + 4])  # a list of modules: one group (torch >= 2.5)
fully_shard(model)
```
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import nn

from shapelint.check.rule_api import Example, RuleContext
from shapelint.hardware import Hardware
from shapelint.model.parallel import FSDP_GROUP_PARAMETER, ParallelChange
from shapelint.model.records import Change, Gemm, Proposal, Severity, Suggestion

CODE = "SL603"
NAME = "fsdp-groups-too-small"
SEVERITY: Severity = "warning"

#: an all-gather below this many bytes runs at under 80% of the bandwidth a 1 GiB one
#: reaches (2×H100: 410 GB/s of output at 64 MiB, 534 at 1 GiB, 164 at 16 MiB)
SMALL_GROUP_BYTES = 64 << 20
PARAMETER = FSDP_GROUP_PARAMETER

BAD = [
    Example("_rule.TinyGPT()", "torch.randint(0, 50304, (1, 1024))", fsdp=8,
            expect={"parameter": PARAMETER, "from": 1, "to": 6}, min_speedup=0.0),
]
GOOD = [
    # 4 blocks of 4096 wide: each group gathers 768 MiB, past the bandwidth knee
    Example("_rule.TinyGPT(32000, 4096, 4)", "torch.randint(0, 32000, (1, 1024))", fsdp=8),
    # one GPU: nothing is gathered
    Example("_rule.TinyGPT()", "torch.randint(0, 50304, (1, 1024))"),
]


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Proposal]:
    blocks = context.fsdp_groups[1:]
    if context.fsdp <= 1 or len(blocks) < 2 or max(b.nbytes for b in blocks) >= SMALL_GROUP_BYTES:
        return
    names = [b.name for b in blocks]
    covered = tuple(g for g in gemms if any(g.module.startswith(f"{n}.") or g.module == n for n in names))
    if not covered:
        return
    size = max(b.nbytes for b in blocks) / (1 << 20)
    message = (f"each of the {len(blocks)} FSDP2 groups (one per block) gathers at most {size:.0f} MiB, under the "
               f"{SMALL_GROUP_BYTES >> 20} MiB an all-gather needs to reach most of its bandwidth, and costs FSDP2 "
               "its host work per group: in the training script, call fully_shard once per run of consecutive "
               "blocks (it takes a list of modules) instead of once per block")
    change = Change(Suggestion(PARAMETER, 1, 2), (), message,
                    (("groups", len(blocks)), ("group_bytes", max(b.nbytes for b in blocks)), ("fsdp", context.fsdp)),
                    parallel=ParallelChange(fsdp_blocks_per_group=2))
    yield Proposal(CODE, NAME, SEVERITY, covered, change)


class TinyGPT(nn.Module):
    """An embedding, ``layers`` MLP blocks in a ModuleList (FSDP2's groups) and an LM head tied to it."""

    def __init__(self, vocab: int = 50304, width: int = 768, layers: int = 12) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.h = nn.ModuleList(nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.GELU(),
                                             nn.Linear(4 * width, width)) for _ in range(layers))
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2's

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx)
        for block in self.h:
            x = x + block(x)
        return self.lm_head(x)
