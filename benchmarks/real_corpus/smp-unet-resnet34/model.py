"""segmentation_models_pytorch Unet with a resnet34 encoder (no pretrained weights), 512x512, 21 classes."""
import segmentation_models_pytorch as smp
import torch


def shapelint_model(batch: int = 16):
    return smp.Unet("resnet34", encoder_weights=None, classes=21), torch.randn(batch, 3, 512, 512)
