"""A plain MLP: n Linear layers give exactly 3n−1 GEMMs in a training step
(n forward, n weight-gradient, n−1 input-gradient: the input needs no gradient).
Its 1000-wide hidden layers are fine; the 3000-wide one is too (3000 = 8 x 375);
the 1023-feature input is not.

    shapelint examples/mlp.py
"""

from __future__ import annotations

import torch
import torch.nn as nn

WIDTHS = [1023, 4096, 3000, 4096, 1000]  # input features, then each layer's out_features


def build(widths: list[int] = WIDTHS) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(fan_in, fan_out))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def shapelint_model(batch: int = 8192):
    model = build()
    x = torch.randn(batch, WIDTHS[0])  # a batch of feature vectors: needs no gradient
    return model, x
