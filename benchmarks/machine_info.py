"""What a benchmark's JSON records about the machine it ran on: Python, torch, the GPU,
CUDA, cuDNN and transformers, each where it is there."""

from __future__ import annotations

import platform
from typing import Any


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"python": platform.python_version()}
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda,
                        cudnn=torch.backends.cudnn.version())
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    return info
