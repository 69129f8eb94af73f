import timm
import torch


def shapelint_model(batch: int = 64):
    return timm.create_model("vit_base_patch16_224", drop_path_rate=0.1), torch.randn(batch, 3, 224, 224)
