"""A small conv net with channel counts that tensor cores dislike (30, 60, 100)
and the default NCHW layout.

    shapelint examples/convnet.py
"""

from __future__ import annotations

import torch
import torch.nn as nn


class ConvNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 30, kernel_size=3, stride=2, padding=1)  # the 3-channel stem is fine
        self.conv1 = nn.Conv2d(30, 60, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(60, 100, kernel_size=3, stride=2, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(100, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.stem(x))
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        return self.head(self.pool(x).flatten(1))


def shapelint_model(batch: int = 128, size: int = 224):
    return ConvNet(), torch.randn(batch, 3, size, size)
