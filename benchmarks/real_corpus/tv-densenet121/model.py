import torch
import torchvision


def shapelint_model(batch: int = 64):
    return torchvision.models.densenet121(), torch.randn(batch, 3, 224, 224)
