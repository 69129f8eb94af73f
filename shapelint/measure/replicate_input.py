"""Megatron's *f* for a sub-block DTensor's default plan leaves unmarked: the module's
input made a replicated DTensor once, so that the backward all-reduces its gradient
once for the whole sub-block, not once per column-parallel layer that reads it.

``--verify --step`` gives it to the attention SL602's change shards: the estimate prices
that change as one all-reduce each way per block (the row-parallel output's forward,
the input gradient's backward), which is what ``PrepareModuleInput(Replicate)`` makes
DTensor run (``benchmarks/parallel_findings.py`` measured SL602 so). Without it DTensor
all-reduces q's, k's and v's input gradients apart: three in the backward.

Hugging Face blocks call their attention with ``hidden_states`` as the first positional
argument or as a keyword; this takes either (``PrepareModuleInput`` needs to be told
which). Imported only inside a ``torchrun`` worker: it needs ``torch.distributed``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor import DTensor, Replicate
from torch.distributed.tensor.parallel import ParallelStyle


class ReplicateInput(ParallelStyle):
    """The module's first positional argument, or else its ``hidden_states`` keyword, as a
    replicated DTensor (see the module docstring)."""

    def _apply(self, module: torch.nn.Module, device_mesh: Any) -> torch.nn.Module:
        def replicate(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and not isinstance(x, DTensor):
                return DTensor.from_local(x, device_mesh, (Replicate(),), run_check=False)
            return x

        def hook(_module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            if args:
                return (replicate(args[0]), *args[1:]), kwargs
            if "hidden_states" in kwargs:
                return args, {**kwargs, "hidden_states": replicate(kwargs["hidden_states"])}
            return None

        module.register_forward_pre_hook(hook, with_kwargs=True)
        return module


__all__ = ["ReplicateInput"]
