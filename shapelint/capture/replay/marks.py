"""The autograd functions replay puts in the step: a mark on a real call's input and
output, whose backward says when backward reaches it, and the one function that
stands for a replayed layer. Both record nothing (the replayer pauses the recording
around them) and hand their backward to a :class:`BackwardListener`."""

from __future__ import annotations

from typing import Any, Protocol

import torch

from shapelint.capture.replay.state import Call, Replayed


class BackwardListener(Protocol):
    """What a mark and a replayed layer tell in backward (the replayer)."""

    def mark_backward(self, call: Call, entry: bool, grad: torch.Tensor | None) -> None:
        """Backward reached ``call``'s input (``entry``) or output, with ``grad``."""

    def replay_backward(self, state: Replayed, x: torch.Tensor, grad: torch.Tensor | None, others: bool
                        ) -> list[torch.Tensor | None]:
        """The gradients a replayed layer returns for its input and parameters;
        ``others``: a gradient came for an output other than the first."""
        ...


class Mark(torch.autograd.Function):
    """Identity that tells the replayer when backward reaches a real call's output
    (``entry`` False) and input (``entry`` True). Its output is a new tensor of the
    same layout (not a view, so an in-place op on it is no CopySlices)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, call: Call, entry: bool, listener: BackwardListener) -> torch.Tensor:
        ctx.set_materialize_grads(False)
        ctx.call, ctx.entry, ctx.listener = call, entry, listener
        return x.new_empty_strided(tuple(x.shape), tuple(x.stride()))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor | None) -> tuple[Any, ...]:
        ctx.listener.mark_backward(ctx.call, ctx.entry, grad)
        return grad, None, None, None


class ReplayedLayer(torch.autograd.Function):
    """A replayed layer: (input, parameters) → an output of the template's layout."""

    @staticmethod
    def forward(ctx: Any, state: Replayed, listener: BackwardListener, x: torch.Tensor, *params: torch.Tensor
                ) -> tuple[torch.Tensor, ...]:
        ctx.set_materialize_grads(False)
        ctx.state, ctx.listener, ctx.x = state, listener, x
        outs = tuple(x.new_empty_strided(o.meta[0], o.meta[1], dtype=o.meta[2]) for o in state.template.outs)
        ctx.mark_non_differentiable(*(t for t, o in zip(outs, state.template.outs) if not o.requires_grad))
        return outs

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor | None, *others: torch.Tensor | None) -> tuple[Any, ...]:
        grads = ctx.listener.replay_backward(ctx.state, ctx.x, grad, any(g is not None for g in others))
        return (None, None, *grads)
