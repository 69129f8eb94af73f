"""vit-pytorch's README ViT: image 256, patch 32, 1000 classes, dim 1024, depth 6, 16 heads, mlp 2048, dropout 0.1."""
import torch
from vit_pytorch import ViT


def shapelint_model(batch: int = 64):
    v = ViT(image_size=256, patch_size=32, num_classes=1000, dim=1024, depth=6, heads=16, mlp_dim=2048,
            dropout=0.1, emb_dropout=0.1)
    return v, torch.randn(batch, 3, 256, 256)
