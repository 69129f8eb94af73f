"""What the load stage hands to capture: a target's model and example inputs on fake
tensors, with what the target itself says (settings, config lines, where its modules
are constructed, how to find its compiled graphs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from shapelint.model.records import GraphBreaks, Source


@dataclass
class Loaded:
    """A model and its example inputs on fake tensors, ready for capture."""

    target: str
    kind: str  # "python" | "hf-config" | "yaml"
    model: torch.nn.Module
    inputs: Any
    fake_mode: FakeTensorMode
    defined_at: dict[int, Source] = field(default_factory=dict)
    #: settings the target itself asks for (YAML): dtype, gpu, training, tp...
    settings: dict[str, Any] = field(default_factory=dict)
    #: for config files: key -> (value, line) of every integer setting
    config_keys: dict[str, tuple[int, int]] = field(default_factory=dict)
    config_file: str | None = None
    #: where torch.compile would break the step into graphs (``shapelint.load.compile_probe``),
    #: found when asked (it runs the model on the CPU): Hugging Face configs only
    compile_probe: Callable[[], GraphBreaks | None] | None = field(default=None, repr=False)
