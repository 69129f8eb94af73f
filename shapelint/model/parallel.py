"""The parallel layout a step runs under, and what the pricer needs to know of it.

``Layout`` is what the user asks for (``--dp``, ``--fsdp``, ``--tp``, ``--sp``,
``--gpus-per-node``); ``ParallelPlan`` is what the capture found in the model under
that layout: the gradients in the order they become ready (DDP's buckets), the
parameter groups FSDP2 gathers (the root and one per block), the tensor-parallel
layers and the activations they reduce, and the layers left whole. Both are plain
data: the pricer (``shapelint.price.communication``) turns a plan into time, and the
result cache stores it as JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

from shapelint.model.target_settings import GPUS_PER_NODE


@dataclass(frozen=True)
class Layout:
    """A training step's parallel layout; the world size is the product of the degrees.
    ``--batch`` stays per GPU: each data-parallel rank (DDP or FSDP) sees its own batch,
    the GPUs of one tensor-parallel group the same one."""

    dp: int = 1
    fsdp: int = 1
    tp: int = 1
    #: sequence parallelism: the tensor-parallel all-reduces become reduce-scatter + all-gather
    sp: bool = False
    gpus_per_node: int = GPUS_PER_NODE

    @property
    def world_size(self) -> int:
        return self.dp * self.fsdp * self.tp

    @property
    def parallel(self) -> bool:
        return self.world_size > 1

    @property
    def nodes(self) -> int:
        return -(-self.world_size // self.gpus_per_node)

    def group_spans_nodes(self, inner: int, size: int) -> bool:
        """Whether a process group of ``size`` ranks ``inner`` apart (tensor parallel
        innermost, then FSDP, then DDP, as torchrun numbers ranks) leaves one node."""
        return size > 1 and inner * size > self.gpus_per_node

    def describe(self) -> str:
        """``DDP 2 × FSDP 8 × TP 8 + SP: 128 GPUs, 16 nodes of 8``."""
        parts = [f"{name} {n}" for name, n in (("DDP", self.dp), ("FSDP", self.fsdp), ("TP", self.tp)) if n > 1]
        text = " × ".join(parts) or "one GPU"
        if self.sp and self.tp > 1:
            text += " + SP"
        if self.world_size > 1:
            text += f": {self.world_size} GPUs"
            if self.nodes > 1:
                text += f", {self.nodes} nodes of {self.gpus_per_node}"
        return text

    def to_json(self) -> dict[str, object]:
        return {"dp": self.dp, "fsdp": self.fsdp, "tp": self.tp, "sp": self.sp, "gpus_per_node": self.gpus_per_node,
                "world_size": self.world_size}


@dataclass(frozen=True)
class ParamGroup:
    """Parameters gathered and reduced together: one FSDP2 ``fully_shard`` group (a
    block, or the root with what no block holds)."""

    name: str
    #: bytes of the group's trained parameters as stored (fp32 by default), on one
    #: tensor-parallel rank, before FSDP shards them
    nbytes: int
    tensors: int


@dataclass(frozen=True)
class TensorParallelLayer:
    """A row-parallel layer: its output is reduced over the tensor-parallel group in the
    forward (``fwd_bytes``, the compute dtype) and its block's input gradient in the
    backward (``bwd_bytes``, the residual stream's dtype)."""

    module: str
    fwd_bytes: int
    bwd_bytes: int


@dataclass(frozen=True)
class ParallelPlan:
    """What the layout does to this model's step (see the module docstring)."""

    layout: Layout
    #: bytes of each trained gradient, in the order the backward makes them ready
    #: (reverse registration order; a tied weight once, last)
    grads: tuple[int, ...] = ()
    #: FSDP2 groups in forward order: the root first, then one per block
    groups: tuple[ParamGroup, ...] = ()
    #: the row-parallel layers (one all-reduce each way, Megatron's count)
    tp_layers: tuple[TensorParallelLayer, ...] = ()
    #: linear layers tensor parallelism shards (DTensor dispatch on the host)
    tp_sharded: int = 0
    #: (module, "column" | "row") of each of them (``--verify --step`` shards them so)
    tp_styles: tuple[tuple[str, str], ...] = ()
    #: linear layers that stay whole on every tensor-parallel rank
    not_sharded: tuple[str, ...] = ()
    #: (elements, bytes per element) of each trained parameter one rank holds and
    #: updates (tensor-parallel layers split, FSDP's shards): what its optimizer steps
    rank_params: tuple[tuple[int, int], ...] = ()

    @property
    def param_bytes(self) -> int:
        return sum(self.grads)


@dataclass(frozen=True)
class Collective:
    """``count`` calls of ``op`` by one engine: their time and what the step sees of it."""

    engine: str
    op: str
    count: int
    nbytes: int
    ms: float
    exposed_ms: float

    def to_json(self) -> dict[str, object]:
        return {"engine": self.engine, "op": self.op, "count": self.count, "bytes": self.nbytes,
                "ms": round(self.ms, 4), "exposed_ms": round(self.exposed_ms, 4)}


@dataclass(frozen=True)
class Communication:
    """What a layout adds to one GPU's step."""

    collectives: tuple[Collective, ...] = ()
    #: GPU time the compute stream waits for communication
    exposed_ms: float = 0.0
    #: the engines' copies on the compute stream
    copy_ms: float = 0.0
    #: compute slowed by collectives running beside it
    contention_ms: float = 0.0
    #: host time the engines add
    host_ms: float = 0.0

    @property
    def gpu_ms(self) -> float:
        return self.exposed_ms + self.copy_ms + self.contention_ms


__all__ = ["Collective", "Communication", "Layout", "ParallelPlan", "ParamGroup", "TensorParallelLayer"]
