"""A model with nothing to fix: every size a multiple of 8, trained in bf16 with
enough tokens per step to keep each GEMM compute-bound.

    shapelint examples/clean.py     # exit code 0
"""

from __future__ import annotations

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim: int = 1024, hidden: int = 4096) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def shapelint_model(batch: int = 16, seq: int = 1024):
    model = nn.Sequential(Block(), Block())
    return model, torch.randn(batch, seq, 1024)
