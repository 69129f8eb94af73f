"""A ConvNeXt stage built the way torchvision and timm build it: a depthwise 7x7
convolution, a channels-last LayerNorm, pointwise Linear layers, a layer-scale
parameter, stochastic-depth rates from a linspace, trunc_normal_ initialisation."""

import torch
import torch.nn as nn


class CNBlock(nn.Module):
    def __init__(self, dim: int, layer_scale: float, sd_prob: float) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.ones(dim) * layer_scale)
        self.sd_prob = sd_prob

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pwconv2(self.act(self.pwconv1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


class ConvNeXtStage(nn.Module):
    def __init__(self, dim: int = 96, depth: int = 3, drop_path_rate: float = 0.1) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, dim, kernel_size=4, stride=4)
        rates = torch.linspace(0, drop_path_rate, depth).tolist()
        self.blocks = nn.Sequential(*[CNBlock(dim, 1e-6, r) for r in rates])
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.stem(x))


def shapelint_model(batch: int = 8):
    return ConvNeXtStage(), torch.randn(batch, 3, 224, 224)
