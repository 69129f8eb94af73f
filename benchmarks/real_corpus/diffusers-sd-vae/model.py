"""Stable Diffusion's AutoencoderKL (kl-f8), trained at 256px."""
import torch
from diffusers import AutoencoderKL


def shapelint_model(batch: int = 8):
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
                        up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(128, 256, 512, 512),
                        layers_per_block=2, latent_channels=4, sample_size=256)
    return vae, dict(sample=torch.randn(batch, 3, 256, 256))
