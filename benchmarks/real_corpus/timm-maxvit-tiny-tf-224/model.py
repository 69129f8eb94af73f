import timm
import torch


def shapelint_model(batch: int = 64):
    return timm.create_model("maxvit_tiny_tf_224"), torch.randn(batch, 3, 224, 224)
