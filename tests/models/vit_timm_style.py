"""A ViT built the way timm and torchvision build theirs: trunc_normal_ initialisation
(which samples with .item() in torch 2.13) and drop-path rates read off a linspace."""

import torch
import torch.nn as nn
from torch.nn.init import trunc_normal_


class DropPath(nn.Module):
    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, drop_path: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.drop_path(self.attn(h, h, h, need_weights=False)[0])
        return x + self.drop_path(self.mlp(self.norm2(x)))


class VisionTransformer(nn.Module):
    def __init__(self, dim: int = 192, depth: int = 2, heads: int = 3, drop_path_rate: float = 0.1) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, 16, 16)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 197, dim))
        dpr = [x.item() for x in torch.linspace(0, drop_path_rate, depth)]  # timm
        self.blocks = nn.Sequential(*[Block(dim, heads, d) for d in dpr])
        self.head = nn.Linear(dim, 1000)
        trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)  # torchvision, timm
            if m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.blocks(x)[:, 0])


def shapelint_model(batch: int = 4):
    return VisionTransformer(), torch.randn(batch, 3, 224, 224)
