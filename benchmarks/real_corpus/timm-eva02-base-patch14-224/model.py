"""timm eva02_base_patch14_224 (EVA-02 B/14, MIM in22k pretraining shape), ImageNet batch."""
import timm
import torch


def shapelint_model(batch: int = 64):
    return timm.create_model("eva02_base_patch14_224", num_classes=1000), torch.randn(batch, 3, 224, 224)
