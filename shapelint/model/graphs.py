"""What torch.compile makes of one training step: the graphs dynamo splits it into and
the ops it runs eagerly between them (``shapelint.load.compile_probe`` finds them; the
step model prices them, ``shapelint.price.host.between_graphs``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GraphBreaks:
    """What torch.compile makes of one training step (``shapelint.load.compile_probe``): the
    compiled graphs it calls and the ops it runs eagerly between them."""

    #: compiled graphs called per step, forward and backward
    forward_graphs: int
    backward_graphs: int
    #: ATen ops (views apart) the step runs outside every compiled graph, forward and backward
    eager_ops: int
    #: why dynamo broke the graph (its own words, first line), the first few
    reasons: tuple[str, ...] = ()
    #: of ``eager_ops``, the backward's (an inference step runs none of them)
    backward_eager_ops: int = 0

    @property
    def breaks(self) -> int:
        return max(self.forward_graphs - 1, 0)

    def extra_graphs(self, training: bool = True) -> int:
        """Graphs a step calls beyond one forward and one backward graph (an inference
        step: beyond one forward graph)."""
        return max(self.forward_graphs - 1, 0) + (max(self.backward_graphs - 1, 0) if training else 0)

    def step_eager_ops(self, training: bool = True) -> int:
        """The ops a step runs eagerly between graphs (an inference step: the forward's)."""
        return self.eager_ops if training else self.eager_ops - self.backward_eager_ops

    def to_json(self) -> dict[str, object]:
        return {"forward_graphs": self.forward_graphs, "backward_graphs": self.backward_graphs,
                "eager_ops": self.eager_ops, "backward_eager_ops": self.backward_eager_ops,
                "reasons": list(self.reasons)}


__all__ = ["GraphBreaks"]
