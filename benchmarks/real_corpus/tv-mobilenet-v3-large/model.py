import torch
import torchvision


def shapelint_model(batch: int = 128):
    return torchvision.models.mobilenet_v3_large(), torch.randn(batch, 3, 224, 224)
