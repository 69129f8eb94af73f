"""perceiver-pytorch's README Perceiver (224x224 images as 2-D byte arrays, 256 latents of 512)."""
import torch
from perceiver_pytorch import Perceiver


def shapelint_model(batch: int = 8):
    m = Perceiver(input_channels=3, input_axis=2, num_freq_bands=6, max_freq=10., depth=6, num_latents=256,
                  latent_dim=512, cross_heads=1, latent_heads=8, cross_dim_head=64, latent_dim_head=64,
                  num_classes=1000, attn_dropout=0., ff_dropout=0., weight_tie_layers=False, fourier_encode_data=True,
                  self_per_cross_attn=2)
    return m, torch.randn(batch, 224, 224, 3)
