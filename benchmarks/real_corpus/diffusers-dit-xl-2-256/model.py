"""DiT-XL/2 at 256px (Peebles & Xie 2023): 28 layers, 16 heads x 72, patch 2 on 32x32x4 latents, 1000 classes."""
import torch
from diffusers import DiTTransformer2DModel


def shapelint_model(batch: int = 32):
    dit = DiTTransformer2DModel(num_attention_heads=16, attention_head_dim=72, in_channels=4, out_channels=8,
                                num_layers=28, sample_size=32, patch_size=2, num_embeds_ada_norm=1000,
                                norm_type="ada_norm_zero")
    return dit, dict(hidden_states=torch.randn(batch, 4, 32, 32), timestep=torch.randint(0, 1000, (batch,)),
                     class_labels=torch.randint(0, 1000, (batch,)))
