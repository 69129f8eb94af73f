"""``mbconv.py``'s convnet in channels-last (model and input)."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import mbconv  # noqa: E402


def shapelint_model(batch: int = 64, seq: int = 224):
    model, x = mbconv.shapelint_model(batch, seq)
    return model.to(memory_format=torch.channels_last), x.to(memory_format=torch.channels_last)
