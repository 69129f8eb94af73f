import torch
import torchvision


def shapelint_model(batch: int = 64):
    return torchvision.models.regnet_y_16gf(), torch.randn(batch, 3, 224, 224)
