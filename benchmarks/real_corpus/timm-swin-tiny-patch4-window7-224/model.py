import timm
import torch


def shapelint_model(batch: int = 64):
    return timm.create_model("swin_tiny_patch4_window7_224", drop_path_rate=0.2), torch.randn(batch, 3, 224, 224)
