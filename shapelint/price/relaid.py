"""The step after a change of the whole model's memory format (SL402:
``model.to(memory_format=torch.channels_last)``), priced as the pipeline traced it in
that format.

Converting the model changes more than its convolutions: every op that reads a
converted activation takes another kernel (batch norm its ``*_channels_last_kernel``
family, about 3x faster per byte; pointwise ops stay vectorised where all their operands
are converted, and run strided where a tensor keeps its layout), and PyTorch adds copies
where a view needs the old layout. Which tensors end up channels-last follows PyTorch's
memory-format propagation through every op, views included (a transformer block inside a
convnet keeps its own layouts), so the after-step is the model traced again in the new
format (``shapelint.pipeline.run``), priced by the same functions as any traced step:
the layout rules of batch norm and pointwise ops live once, in capture.

The other findings of the step carry over by position: GEMM records by index, where the
two traces record the same GEMMs in the same order (a layout changes no GEMM's shape),
and the ops a change fuses away by matching the two op streams.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import cached_property

from shapelint.model.records import Gemm, MemoryFormat, Op
from shapelint.price.step import Step


def _gemm_key(g: Gemm) -> tuple[object, ...]:
    return (g.op, g.phase, g.m, g.n, g.k, g.batch, g.dtype, g.module)


def _op_key(op: Op) -> tuple[object, ...]:
    return (op.name, op.backward, op.owner)


@dataclass(frozen=True)
class Relaid:
    """The step as traced with the whole model in ``memory_format``, beside the step as
    the user runs it (``original``)."""

    memory_format: MemoryFormat
    step: Step
    original: Step

    @cached_property
    def aligned(self) -> bool:
        """Both traces record the same GEMMs in the same order (a finding's GEMM
        after-times apply to the relaid step by index)."""
        a, b = self.original.gemms, self.step.gemms
        return len(a) == len(b) and all(_gemm_key(x) == _gemm_key(y) for x, y in zip(a, b))

    @cached_property
    def _op_positions(self) -> dict[int, int]:
        """Each original op's position in the relaid step, where the two streams match."""
        a = [_op_key(op) for op in self.original.ops]
        b = [_op_key(op) for op in self.step.ops]
        out: dict[int, int] = {}
        for block in SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
            for i in range(block.size):
                out[self.original.ops[block.a + i].index] = self.step.ops[block.b + i].index
        return out

    def ops(self, positions: Iterable[int]) -> frozenset[int]:
        """The relaid step's positions of the original ops at ``positions`` (an op with
        no match in the relaid step is dropped)."""
        where = self._op_positions
        return frozenset(where[i] for i in positions if i in where)


#: traces the step again with the model in a memory format: the relaid step, or None and
#: why the model did not run in it (the pipeline's, run on the first finding that needs it)
Retrace = Callable[[], tuple["Relaid | None", str]]


def relaid_for(memory_formats: Sequence[MemoryFormat | None], relaid: Relaid | None) -> Relaid | None:
    """The relaid step that prices findings which change these memory formats, or None
    where none does, the pipeline traced none, or its GEMMs do not line up."""
    wanted = {m for m in memory_formats if m is not None}
    if relaid is None or wanted != {relaid.memory_format} or not relaid.aligned:
        return None
    return relaid


__all__ = ["Relaid", "Retrace", "relaid_for"]
