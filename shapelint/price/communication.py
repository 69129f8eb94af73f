"""The step past one GPU: every collective a parallel layout issues, priced from the
GPU profile's measured table (``shapelint.hardware.collectives``), with the overlap
each engine really achieves, the copies it adds on the compute stream and the host
time it adds. One place: the step model (``shapelint.price.saving.StepModel``) adds
what this returns to one GPU's step (``with_communication``).

Policy (eager, PyTorch 2.11 defaults; ``docs/multi-gpu.md`` has the evidence):

- **DDP** (``--dp``): gradients in the order they become ready, bucketed as the
  Reducer does (the first bucket closes at 1 MiB, the others at 25 MiB, each at the
  tensor that crosses the cap), all-reduced in the parameters' dtype (fp32) one after
  another on one NCCL stream, each launched when the backward has made its gradients
  (ready times spread over the backward by bytes; a tied embedding is ready last).
  Exposed: what is still running when the backward ends. On the compute stream: the
  copy of every gradient into its bucket and, after the wait, back out (read + write
  each). Overlapped compute slows by ``overlap_slowdown``.
- **FSDP2** (``--fsdp``): one all-gather per group in the forward (the root's and the
  first block's exposed, each later one hidden behind the previous block's forward
  up to that block's time), one per block again in the backward (prefetched one
  block ahead) and one reduce-scatter per group (block 0's and the root's exposed);
  per block in the backward the NCCL queue holds AG(i−1) + RS(i+1) against block
  i's compute. fp32 on the wire, or the dtypes of ``--fsdp-param-dtype`` and
  ``--fsdp-reduce-dtype`` (FSDP2's ``MixedPrecisionPolicy``: bf16 halves the bytes
  gathered, or reduced; :func:`fsdp_bytes`). The copy-out of every gathered group (forward, and
  backward for the blocks) and the reduce-scatter's copy-in run on the compute stream.
  The optimizer updates 1/N of the parameters (the pipeline hands the step model each
  rank's parameters).
- **Tensor parallelism** (``--tp``): per row-parallel layer an all-reduce of its
  output forward (compute dtype) and of its block's input gradient backward
  (parameters' dtype); with ``--sp`` a reduce-scatter and an all-gather instead, the
  same bytes. Not overlapped (DTensor waits at the residual add that follows).
- **Host**: per trained tensor under DDP, per group and per tensor under FSDP2, per
  sharded layer and per activation collective under DTensor (``host_us``).
- A process group whose ranks leave one node (``--gpus-per-node``; tensor parallel
  innermost, then FSDP, then DDP) is priced on the network instead of NVLink.

Not priced: pipeline parallelism, expert parallelism, torch.compile's collective
fusion, activation memory ops inside sharded layers (counted whole), gradient
accumulation, and contention between two parallel engines' collectives.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from shapelint.errors import ShapelintError
from shapelint.hardware import Hardware
from shapelint.hardware.collectives import Collectives
from shapelint.model.dtypes import DTYPE_BYTES
from shapelint.model.parallel import (
    Collective,
    Communication,
    ParallelChange,
    ParallelPlan,
    TensorParallelLayer,
    grouped_blocks,
)
from shapelint.price.kernels import memory_kernel_ms
from shapelint.price.step import StepTime

MIB = 1 << 20
#: DDP's bucket caps (torch's reducer.hpp: kDefaultFirstBucketBytes, kDefaultBucketBytesCap)
FIRST_BUCKET_BYTES = 1 * MIB
BUCKET_BYTES = 25 * MIB
#: the backward's share of a step's forward + backward GPU time (2 of 3 GEMMs per layer)
BACKWARD_SHARE = 2 / 3


def collectives_of(hw: Hardware) -> Collectives:
    if hw.collectives is None:
        raise ShapelintError(f"GPU profile {hw.key} has no collectives table, so no parallel layout can be priced on "
                             "it; use a profile with one (h100-sxm, h200), or measure one with `shapelint calibrate` on a "
                             "machine with several GPUs (docs/multi-gpu.md)")
    return hw.collectives


def communication(plan: ParallelPlan, one_gpu: StepTime, hw: Hardware, training: bool = True) -> Communication:
    """What ``plan``'s layout adds to ``one_gpu``, the step of one rank without it."""
    lay = plan.layout
    if not lay.parallel:
        return Communication()
    c = collectives_of(hw)
    compute = one_gpu.gpu_ms - dict(one_gpu.by_class).get("optimizer", 0.0)
    parts = []
    if lay.tp > 1:
        parts.append(_tensor_parallel(plan, c, hw, training))
    if lay.fsdp > 1:
        parts.append(_fsdp(plan, c, hw, compute, training))
    if lay.dp > 1 and training:
        parts.append(_ddp(plan, c, hw, compute))
    return Communication(
        collectives=tuple(x for p in parts for x in p.collectives),
        exposed_ms=sum(p.exposed_ms for p in parts), copy_ms=sum(p.copy_ms for p in parts),
        contention_ms=sum(p.contention_ms for p in parts), host_ms=sum(p.host_ms for p in parts))


def with_communication(t: StepTime, comm: Communication, world_size: int, hw: Hardware) -> StepTime:
    """``t`` with ``comm`` added: the GPU waits and copies after the step's own
    timeline (its host's waits for the GPU included), the engines' host time on the
    host side; the step is the larger. The same on the fastest and the slowest
    measured host (``StepTime.ms_range``): the engines' host time (DTensor dispatch,
    FSDP2's per-group work) scales with the host as the kernels' issue does, and
    parallel steps are host-bound more often than one GPU's."""
    if world_size <= 1:
        return t
    low, high = t.ms_range
    host_all = t.host_ms + comm.host_ms
    ms_range = (max(low + comm.gpu_ms, host_all * hw.step.host_speed_fastest),
                max(high + comm.gpu_ms, host_all * hw.step.host_speed_slowest))
    gpu, host = t.gpu_ms + comm.gpu_ms, t.host_ms + comm.host_ms
    classes = dict(t.by_class)
    for name, ms in (("communication", comm.exposed_ms), ("parallel_copy", comm.copy_ms),
                     ("contention", comm.contention_ms)):
        if ms:
            classes[name] = classes.get(name, 0.0) + ms
    ms = max(t.ms + comm.gpu_ms, host)
    return replace(t, ms=ms, gpu_ms=gpu, host_ms=host, by_class=tuple(sorted(classes.items())),
                   comm_ms=comm.exposed_ms, world_size=world_size, communication=comm,
                   ms_range=(min(ms_range[0], ms), max(ms_range[1], ms)))


def applied(plan: ParallelPlan, changes: Iterable[ParallelChange]) -> ParallelPlan:
    """``plan`` with findings' parallel changes made: the layers they shard add their
    row-parallel all-reduces (in the plan's dtypes) and their DTensor dispatch, and, once
    every whole attention is sharded, each rank's gradients, FSDP2 groups and optimizer
    hold 1/TP of their weights; FSDP2 blocks wrapped ``k`` to a ``fully_shard`` group
    gather and reduce together."""
    reduces: dict[str, int] = {}
    styles: dict[str, str] = {}
    per_group = 0
    for c in changes:
        reduces.update(c.tp_reduce_elems)
        styles.update(c.tp_styles)
        per_group = max(per_group, c.fsdp_blocks_per_group)
    sharded = len([m for m in styles if m not in dict(plan.tp_styles)])
    known = {x.module for x in plan.tp_layers}
    added = tuple(TensorParallelLayer(m, e * plan.tp_fwd_bytes, e * plan.tp_bwd_bytes)
                  for m, e in reduces.items() if m not in known)
    if added or sharded:
        plan = replace(plan, tp_layers=plan.tp_layers + added, tp_sharded=plan.tp_sharded + sharded,
                       tp_styles=tuple(sorted({**dict(plan.tp_styles), **styles}.items())))
    whole = {m for w in plan.whole_attention for m, _ in w.layers}
    if plan.attention_sharded is not None and whole and whole <= set(styles):  # every whole attention sharded
        held = plan.attention_sharded
        plan = replace(plan, grads=held.grads, groups=held.groups, rank_params=held.rank_params,
                       attention_sharded=None)
    if per_group > 1:
        plan = replace(plan, groups=grouped_blocks(plan.groups, per_group))
    return plan


def blocks_per_group_options(plan: ParallelPlan) -> list[int]:
    """The block counts per FSDP2 group worth pricing: from 2, each the smallest that
    makes its number of groups, while the largest merged group holds no more than the
    root group, whose parameters FSDP2 keeps unsharded from the forward to the backward
    (so the gathered parameters' peak memory at most doubles)."""
    blocks = plan.groups[1:]
    if len(blocks) < 2:
        return []
    largest = max(b.nbytes for b in blocks)
    out, counts = [], set()
    for k in range(2, len(blocks) + 1):
        groups = -(-len(blocks) // k)
        if k * largest > plan.groups[0].nbytes:
            break
        if groups not in counts:
            counts.add(groups)
            out.append(k)
    return out


# -- the engines ---------------------------------------------------------------------------


def _copy_ms(nbytes: float, hw: Hardware) -> float:
    """A memory-bound copy of ``nbytes`` (read + write) on the compute stream."""
    return memory_kernel_ms(2 * nbytes, hw.step.elementwise_efficiency, hw) if nbytes > 0 else 0.0


def buckets(grads: Sequence[int], first: int = FIRST_BUCKET_BYTES, cap: int = BUCKET_BYTES) -> list[int]:
    """DDP's bucket sizes for gradients of ``grads`` bytes in ready order: a bucket
    closes at the tensor that makes it reach its cap (1 MiB for the first)."""
    out, size, limit = [], 0, first
    for g in grads:
        size += g
        if size >= limit:
            out.append(size)
            size, limit = 0, cap
    if size:
        out.append(size)
    return out


def _ddp(plan: ParallelPlan, c: Collectives, hw: Hardware, compute_ms: float) -> Communication:
    lay = plan.layout
    n = lay.dp
    across = lay.group_spans_nodes(lay.tp * lay.fsdp, n)
    grads = [-(-g // lay.fsdp) for g in plan.grads]
    sizes = buckets(grads)
    backward = compute_ms * BACKWARD_SHARE
    total = sum(sizes) or 1
    ready, done, end, busy = 0.0, 0, 0.0, 0.0
    for i, b in enumerate(sizes):
        done += b
        ready = backward if i == len(sizes) - 1 else backward * done / total
        t = c.us("all_reduce", b, n, across) * 1e-3
        end = max(ready, end) + t
        busy += t
    exposed = max(0.0, end - backward)
    overlapped = max(0.0, busy - exposed)
    copies = 2 * _copy_ms(sum(grads), hw)
    tensors = len(plan.grads)
    return Communication(
        (Collective("ddp", "all_reduce", len(sizes), sum(sizes), busy, exposed),), exposed, copies,
        overlapped * c.overlap_slowdown, tensors * c.host.ddp_tensor * 1e-3)


def _fsdp(plan: ParallelPlan, c: Collectives, hw: Hardware, compute_ms: float, training: bool) -> Communication:
    lay = plan.layout
    n = lay.fsdp
    across = lay.group_spans_nodes(lay.tp, n)
    root, blocks = plan.groups[0], plan.groups[1:]
    nb = max(1, len(blocks))
    # what moves: the groups' fp32 parameters in the policy's dtypes (MixedPrecisionPolicy)
    gathered, reduced = fsdp_bytes(root.nbytes, lay.fsdp_param_dtype), fsdp_bytes(root.nbytes, lay.fsdp_reduce_dtype)
    sizes = [fsdp_bytes(b.nbytes, lay.fsdp_param_dtype) for b in blocks]
    grads = [fsdp_bytes(b.nbytes, lay.fsdp_reduce_dtype) for b in blocks]

    def ag(g: int) -> float:
        return c.us("all_gather", g, n, across) * 1e-3

    def rs(g: int) -> float:
        return c.us("reduce_scatter", g, n, across) * 1e-3

    ag_fwd = [ag(s) for s in sizes]
    fwd_block = compute_ms * (1 - BACKWARD_SHARE if training else 1.0) / nb
    exposed = ag(gathered) + sum(ag_fwd[:1]) + sum(max(0.0, t - fwd_block) for t in ag_fwd[1:])
    ag_ms, rs_ms = ag(gathered) + sum(ag_fwd), 0.0
    copies = _copy_ms(gathered + sum(sizes), hw)
    if training:
        rs_bwd = [rs(s) for s in grads[::-1]]
        exposed += _fsdp_backward_exposed(ag_fwd[::-1], rs_bwd, compute_ms * BACKWARD_SHARE / nb) + rs(reduced)
        ag_ms += sum(ag_fwd)
        rs_ms = sum(rs_bwd) + rs(reduced)
        copies += _copy_ms(sum(sizes), hw) + _copy_ms(reduced + sum(grads), hw)
    busy = ag_ms + rs_ms
    gathers = len(sizes) * (2 if training else 1) + 1
    colls = [Collective("fsdp", "all_gather", gathers, gathered + sum(sizes) * (2 if training else 1), ag_ms, 0.0)]
    if training:
        colls.append(Collective("fsdp", "reduce_scatter", len(plan.groups), reduced + sum(grads), rs_ms, 0.0))
    colls = [replace(x, exposed_ms=exposed * x.ms / busy if busy else 0.0) for x in colls]
    tensors = sum(g.tensors for g in plan.groups)
    return Communication(tuple(colls), exposed, copies, max(0.0, busy - exposed) * c.overlap_slowdown,
                         (len(plan.groups) * c.host.fsdp_group + tensors * c.host.fsdp_tensor) * 1e-3)


def fsdp_bytes(nbytes: int, dtype: str) -> int:
    """``nbytes`` of fp32 parameters (or their gradients) as FSDP2 moves them in
    ``dtype``: ``MixedPrecisionPolicy(param_dtype=bf16)`` casts each shard before the
    all-gather, halving its bytes; ``reduce_dtype`` likewise for the reduce-scatter."""
    return nbytes * DTYPE_BYTES[dtype] // DTYPE_BYTES["fp32"]


def _fsdp_backward_exposed(ag_bwd: Sequence[float], rs_bwd: Sequence[float], block_ms: float) -> float:
    """The backward's exposed FSDP2 time, blocks in backward order: the first block's
    all-gather (nobody prefetched it), per block what the NCCL queue holds beyond the
    block's compute (the next block's all-gather and the previous one's reduce-scatter),
    and the last block's reduce-scatter."""
    exposed = ag_bwd[0] if ag_bwd else 0.0
    for i in range(len(ag_bwd)):
        queued = (ag_bwd[i + 1] if i + 1 < len(ag_bwd) else 0.0) + (rs_bwd[i - 1] if i else 0.0)
        exposed += max(0.0, queued - block_ms)
    return exposed + (rs_bwd[-1] if rs_bwd else 0.0)


def _tensor_parallel(plan: ParallelPlan, c: Collectives, hw: Hardware, training: bool) -> Communication:
    lay = plan.layout
    n = lay.tp
    across = lay.group_spans_nodes(1, n)

    def reduce(nbytes: int) -> float:
        if lay.sp:
            return (c.us("reduce_scatter", nbytes, n, across) + c.us("all_gather", nbytes, n, across)) * 1e-3
        return c.us("all_reduce", nbytes, n, across) * 1e-3

    fwd = sum(reduce(x.fwd_bytes) for x in plan.tp_layers)
    bwd = sum(reduce(x.bwd_bytes) for x in plan.tp_layers) if training else 0.0
    op = "reduce_scatter+all_gather" if lay.sp else "all_reduce"
    layers = len(plan.tp_layers)
    colls = [Collective("tp", op, layers, sum(x.fwd_bytes for x in plan.tp_layers), fwd, fwd)]
    if training:
        colls.append(Collective("tp", op, layers, sum(x.bwd_bytes for x in plan.tp_layers), bwd, bwd))
    calls = layers * (2 if training else 1)
    heads = _vocab_parallel(plan, c, training)
    return Communication(tuple(colls) + heads.collectives, fwd + bwd + heads.exposed_ms, 0.0, 0.0,
                         tp_host_ms(plan, calls, c) + heads.host_ms)


def tp_host_ms(plan: ParallelPlan, collectives: int, c: Collectives) -> float:
    """DTensor's host work: per sharded layer, per DTensor parameter, per activation collective."""
    host = c.host
    return (plan.tp_sharded * host.tp_layer + plan.tp_parameters * host.tp_parameter
            + collectives * host.tp_collective) * 1e-3


#: the vocabulary-parallel loss's forward all-reduces per LM head (the maximum logit,
#: the target's logit, the sum of exponentials: Megatron-LM and DTensor's loss_parallel)
LOSS_ALL_REDUCES = 3
#: bytes per value of the loss's all-reduces (both upcast the logits to fp32)
LOSS_BYTES = 4


def _vocab_parallel(plan: ParallelPlan, c: Collectives, training: bool) -> Communication:
    """A column-parallel LM head's collectives in a training step (``VocabParallelHead``):
    the loss's three small all-reduces in the forward and its input gradient's all-reduce
    in the backward (under ``--sp``, an all-gather of its input in the forward and a
    reduce-scatter of the gradient instead). Not overlapped. The input gradient's
    all-reduce is a DTensor collective on the host; the loss's are issued by the loss
    function, which DTensor does not dispatch op by op."""
    lay = plan.layout
    if not plan.vocab_heads or not training:  # no loss; what reads the sharded logits is not priced
        return Communication()
    n, across = lay.tp, lay.group_spans_nodes(1, lay.tp)
    loss_bytes = sum(h.tokens for h in plan.vocab_heads) * LOSS_BYTES
    loss_ms = sum(LOSS_ALL_REDUCES * c.us("all_reduce", h.tokens * LOSS_BYTES, n, across)
                  for h in plan.vocab_heads) * 1e-3
    colls = [Collective("tp_vocab", "all_reduce", LOSS_ALL_REDUCES * len(plan.vocab_heads),
                        LOSS_ALL_REDUCES * loss_bytes, loss_ms, loss_ms)]
    exposed, calls = loss_ms, 0
    inputs = [h.tokens * h.hidden for h in plan.vocab_heads]
    if lay.sp:
        gather = sum(c.us("all_gather", e * plan.tp_fwd_bytes, n, across) for e in inputs) * 1e-3
        colls.append(Collective("tp_vocab", "all_gather", len(inputs), sum(inputs) * plan.tp_fwd_bytes, gather,
                                gather))
        exposed, calls = exposed + gather, calls + len(inputs)
    op = "reduce_scatter" if lay.sp else "all_reduce"
    grad = sum(c.us(op, e * plan.tp_bwd_bytes, n, across) for e in inputs) * 1e-3
    colls.append(Collective("tp_vocab", op, len(inputs), sum(inputs) * plan.tp_bwd_bytes, grad, grad))
    exposed, calls = exposed + grad, calls + len(inputs)
    return Communication(tuple(colls), exposed, 0.0, 0.0, calls * c.host.tp_collective * 1e-3)


__all__ = ["BUCKET_BYTES", "FIRST_BUCKET_BYTES", "applied", "blocks_per_group_options", "buckets", "collectives_of",
           "communication", "fsdp_bytes", "with_communication"]
