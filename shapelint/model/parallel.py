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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from shapelint.model.target_settings import GPUS_PER_NODE

Block = TypeVar("Block")

#: the suggestion's parameter of a change of FSDP2's grouping: how the training script
#: calls ``fully_shard`` (a run setting, no config key)
FSDP_GROUP_PARAMETER = "blocks per fully_shard group"


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
    #: FSDP2's ``MixedPrecisionPolicy``: the dtype parameters are all-gathered in (and
    #: the forward and backward compute with), the one gradients are reduce-scattered in;
    #: fp32 both: no policy (parameters are stored fp32, as shapelint trains)
    fsdp_param_dtype: str = "fp32"
    fsdp_reduce_dtype: str = "fp32"

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
        if self.fsdp > 1 and (self.fsdp_param_dtype, self.fsdp_reduce_dtype) != ("fp32", "fp32"):
            text += f" (FSDP {self.fsdp_param_dtype} parameters, {self.fsdp_reduce_dtype} gradients)"
        if self.world_size > 1:
            text += f": {self.world_size} GPUs"
            if self.nodes > 1:
                text += f", {self.nodes} nodes of {self.gpus_per_node}"
        return text

    def to_json(self) -> dict[str, object]:
        return {"dp": self.dp, "fsdp": self.fsdp, "tp": self.tp, "sp": self.sp, "gpus_per_node": self.gpus_per_node,
                "world_size": self.world_size, "fsdp_param_dtype": self.fsdp_param_dtype,
                "fsdp_reduce_dtype": self.fsdp_reduce_dtype}


@dataclass(frozen=True)
class ParamGroup:
    """Parameters gathered and reduced together: one FSDP2 ``fully_shard`` group (a
    block, or the root with what no block holds)."""

    name: str
    #: bytes of the group's trained parameters as stored (fp32 by default), on one
    #: tensor-parallel rank, before FSDP shards them
    nbytes: int
    tensors: int


def fsdp_block_groups(blocks: Sequence[Block], per_group: int) -> tuple[tuple[Block, ...], ...]:
    """The blocks each ``fully_shard`` call wraps at ``per_group`` blocks a group:
    consecutive runs in forward order, counted across stacks (an encoder's blocks, then
    a decoder's), the remainder (fewer blocks) last. The one grouping the pricer plans
    (:func:`grouped_blocks`) and ``--verify --step`` wraps
    (``shapelint.measure.parallel_wrap``); a count under 1 is one block a group."""
    k = max(1, per_group)
    return tuple(tuple(blocks[i:i + k]) for i in range(0, len(blocks), k))


def grouped_blocks(groups: Sequence[ParamGroup], per_group: int) -> tuple[ParamGroup, ...]:
    """FSDP2 groups with every ``per_group`` consecutive blocks wrapped as one (the root,
    first, stays): their bytes and tensors summed, named ``first..last``."""
    root, blocks = groups[0], groups[1:]
    merged = (part[0] if len(part) == 1 else
              ParamGroup(f"{part[0].name}..{part[-1].name}", sum(b.nbytes for b in part), sum(b.tensors for b in part))
              for part in fsdp_block_groups(blocks, per_group))
    return (root, *merged)


@dataclass(frozen=True)
class TensorParallelLayer:
    """A row-parallel layer: its output is reduced over the tensor-parallel group in the
    forward (``fwd_bytes``, the compute dtype) and its block's input gradient in the
    backward (``bwd_bytes``, the residual stream's dtype)."""

    module: str
    fwd_bytes: int
    bwd_bytes: int


@dataclass(frozen=True)
class VocabParallelHead:
    """A column-parallel output layer whose width is a vocabulary (the LM head): each
    rank holds a slice of the logits, and the loss is computed vocabulary-parallel
    (Megatron-LM's ``vocab_parallel_cross_entropy``, DTensor's ``loss_parallel``): three
    all-reduces of ``tokens`` fp32 values in the forward (the maximum logit, the target's
    logit, the sum of exponentials), none in the backward, and the all-reduce of the
    layer's input gradient (``tokens × hidden``) in the backward, as every
    column-parallel input has."""

    module: str
    tokens: int
    hidden: int


@dataclass(frozen=True)
class WholeAttention:
    """An attention module tensor parallelism leaves whole because its degree does not
    divide the heads (or the key/value heads, where they are not fewer than the degree
    and replicated): every rank computes all heads, its projections unsharded. What
    sharding it would take (SL602), read off the capture."""

    module: str
    heads: int
    kv_heads: int
    head_dim: int
    #: (linear layer, "column" | "row") of its projections, as they would be sharded
    layers: tuple[tuple[str, str], ...] = ()
    #: elements of each row-parallel projection's output (the all-reduce it would add)
    reduce_elems: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class HeadsChange:
    """An attention's heads as they are and as a change proposes them, the hidden size
    (heads × head dimension) kept: what ``--verify --step`` needs to build the edited
    copy (the ``head_dim`` and key/value-head keys a config states, set with the head
    count) and to tell whether tensor parallelism would replicate the key/value heads."""

    heads: int
    kv_heads: int
    head_dim: int
    to_heads: int
    to_kv_heads: int
    to_head_dim: int

    def details(self) -> tuple[tuple[str, object], ...]:
        """The JSON ``details`` keys the finding has always written, in their order."""
        return (("heads", self.heads), ("kv_heads", self.kv_heads), ("head_dim", self.head_dim),
                ("to_heads", self.to_heads), ("to_kv_heads", self.to_kv_heads), ("to_head_dim", self.to_head_dim))


@dataclass(frozen=True)
class ParallelChange:
    """What a finding changes in the parallel plan, for the pricer to apply
    (``shapelint.price.communication.applied``): linear layers it shards, with their
    styles, and the row-parallel all-reduces they add (elements of each output), or
    FSDP2 blocks wrapped together into one ``fully_shard`` group (0: unchanged); and the
    head count that lets those layers shard, for ``--verify --step``'s edited copy."""

    tp_reduce_elems: tuple[tuple[str, int], ...] = ()
    #: (linear layer, "column" | "row") of each layer the change shards
    tp_styles: tuple[tuple[str, str], ...] = ()
    fsdp_blocks_per_group: int = 0
    #: the attention's head count the change edits (SL602); None: no head count changes
    heads: HeadsChange | None = None

    @property
    def tp_sharded(self) -> int:
        return len(self.tp_styles)

    def merged(self, other: ParallelChange) -> ParallelChange:
        """Both changes (repeated layers' findings grouped into one: the same head count)."""
        return ParallelChange(tuple(dict((*self.tp_reduce_elems, *other.tp_reduce_elems)).items()),
                              tuple(dict((*self.tp_styles, *other.tp_styles)).items()),
                              max(self.fsdp_blocks_per_group, other.fsdp_blocks_per_group),
                              self.heads if self.heads is not None else other.heads)


@dataclass(frozen=True)
class RankParams:
    """What one rank holds of the trained parameters: its gradients in the order the
    backward makes them ready (DDP's buckets), the FSDP2 groups' bytes, and what its
    optimizer steps (see :class:`ParallelPlan`)."""

    grads: tuple[int, ...] = ()
    groups: tuple[ParamGroup, ...] = ()
    rank_params: tuple[tuple[int, int], ...] = ()


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
    #: (module, trained tensors: its weight, and its bias where it has one) of each linear
    #: layer tensor parallelism shards or SL602's change would: what becomes a DTensor
    #: parameter, whose ops DTensor dispatches on the host
    tp_tensors: tuple[tuple[str, int], ...] = ()
    #: linear layers that stay whole on every tensor-parallel rank
    not_sharded: tuple[str, ...] = ()
    #: (elements, bytes per element) of each trained parameter one rank holds and
    #: updates (tensor-parallel layers split, FSDP's shards): what its optimizer steps
    rank_params: tuple[tuple[int, int], ...] = ()
    #: attention modules left whole because the degree does not divide their heads
    whole_attention: tuple[WholeAttention, ...] = ()
    #: bytes per element of a row-parallel layer's forward all-reduce (the compute
    #: dtype) and of its backward one (the parameters' dtype)
    tp_fwd_bytes: int = 2
    tp_bwd_bytes: int = 4
    #: column-parallel LM heads and their vocabulary-parallel loss
    vocab_heads: tuple[VocabParallelHead, ...] = ()
    #: the rank's parameters were the whole attentions sharded too (SL602's change): its
    #: DDP buckets, FSDP2 groups and optimizer shrink with them; None: none is whole
    attention_sharded: RankParams | None = None

    @property
    def param_bytes(self) -> int:
        return sum(self.grads)

    @property
    def tp_parameters(self) -> int:
        """The DTensor parameters of the sharded layers (a layer of unknown tensors counts its weight)."""
        tensors = dict(self.tp_tensors)
        return sum(tensors.get(m, 1) for m, _ in self.tp_styles)


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


__all__ = ["FSDP_GROUP_PARAMETER", "Collective", "Communication", "HeadsChange", "Layout", "ParallelChange",
           "ParallelPlan", "ParamGroup", "RankParams", "TensorParallelLayer", "VocabParallelHead", "WholeAttention",
           "fsdp_block_groups", "grouped_blocks"]
