import timm
import torch


def shapelint_model(batch: int = 64):
    # timm's efficientnet_b3 trains at 288x288 (its pretrained_cfg input_size)
    return timm.create_model("efficientnet_b3"), torch.randn(batch, 3, 288, 288)
