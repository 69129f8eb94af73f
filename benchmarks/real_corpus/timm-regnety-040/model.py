import timm
import torch


def shapelint_model(batch: int = 64):
    return timm.create_model("regnety_040"), torch.randn(batch, 3, 224, 224)
