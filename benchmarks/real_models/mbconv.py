"""An EfficientNet-B0-like convnet in plain torch (MBConv blocks: 1x1 expand, depthwise
3x3 or 5x5, squeeze-excite, 1x1 project), for benchmarks/real_model_steps.py: the conv
kinds issue 26 measured (depthwise, 1x1, dense stem) without timm. NCHW as written;
``mbconv_channels_last.py`` is the same model in channels-last."""

import torch
from torch import nn

#: (expand ratio, kernel, out channels, repeats, stride) of EfficientNet-B0's stages
STAGES = ((1, 3, 16, 1, 1), (6, 3, 24, 2, 2), (6, 5, 40, 2, 2), (6, 3, 80, 3, 2), (6, 5, 112, 3, 1),
          (6, 5, 192, 4, 2), (6, 3, 320, 1, 1))


class MBConv(nn.Module):
    def __init__(self, c_in: int, c_out: int, expand: int, kernel: int, stride: int) -> None:
        super().__init__()
        mid = c_in * expand
        self.expand = nn.Sequential(nn.Conv2d(c_in, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.SiLU()) \
            if expand != 1 else nn.Identity()
        self.depthwise = nn.Sequential(nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid, bias=False),
                                       nn.BatchNorm2d(mid), nn.SiLU())
        squeeze = max(1, c_in // 4)
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(mid, squeeze, 1), nn.SiLU(),
                                nn.Conv2d(squeeze, mid, 1), nn.Sigmoid())
        self.project = nn.Sequential(nn.Conv2d(mid, c_out, 1, bias=False), nn.BatchNorm2d(c_out))
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.depthwise(self.expand(x))
        h = self.project(h * self.se(h))
        return x + h if self.residual else h


def build() -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.SiLU()]
    c = 32
    for expand, kernel, out, repeats, stride in STAGES:
        for i in range(repeats):
            layers.append(MBConv(c, out, expand, kernel, stride if i == 0 else 1))
            c = out
    layers += [nn.Conv2d(c, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.SiLU(), nn.AdaptiveAvgPool2d(1),
               nn.Flatten(), nn.Linear(1280, 1000)]
    return nn.Sequential(*layers)


def shapelint_model(batch: int = 64, seq: int = 224):
    return build(), torch.randn(batch, 3, seq, seq)
