"""Stable Diffusion 1.5's UNet (UNet2DConditionModel defaults are SD1.x's), 512px -> 64x64 latents, CLIP-L text."""
import torch
from diffusers import UNet2DConditionModel


def shapelint_model(batch: int = 8):
    unet = UNet2DConditionModel(sample_size=64, cross_attention_dim=768, attention_head_dim=8)
    return unet, dict(sample=torch.randn(batch, 4, 64, 64), timestep=torch.randint(0, 1000, (batch,)),
                      encoder_hidden_states=torch.randn(batch, 77, 768))
