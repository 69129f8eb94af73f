"""What a parallel layout does to one model's step (:class:`ParallelPlan`), read off the
model on fake tensors and its captured (tensor-parallel sharded) GEMMs.

- **Gradients** in the order the backward makes them ready, as DDP buckets them: the
  reverse of the registration order (the last layer's first), a tied weight counted
  once and last (its first use, the embedding, is the last gradient the backward
  finishes). A tensor-parallel layer's weight is 1/TP of itself on each rank.
- **FSDP2 groups** as ``fully_shard`` is usually applied, once per block of the
  model's repeated layers (its outermost ``ModuleList``) and once on the root, which
  keeps every parameter no block holds (embeddings, final norm, LM head).
- **Tensor-parallel layers**: each row-parallel layer reduces its output over the
  group in the forward (tokens × width in the compute dtype) and its block's input
  gradient in the backward (the same elements in the parameters' dtype, the residual
  stream's dtype under autocast): Megatron's two all-reduces per block each way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from shapelint.capture.replay.layers import stacks
from shapelint.capture.tensor_parallel import Sharding
from shapelint.model.dtypes import DTYPE_BYTES
from shapelint.model.parallel import (
    Layout,
    ParallelPlan,
    ParamGroup,
    RankParams,
    TensorParallelLayer,
    VocabParallelHead,
)
from shapelint.model.records import Gemm


def parallel_plan(model: torch.nn.Module, gemms: Sequence[Gemm], layout: Layout, sharded: Sharding | None,
                  precision: str) -> ParallelPlan:
    """The plan of ``model``'s step under ``layout``; ``gemms`` are one rank's GEMMs and
    ``sharded`` what tensor parallelism did to them (None: no tensor parallelism)."""
    sharded = sharded or Sharding([], {}, ())
    styles = sharded.styles
    tp = layout.tp
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    held = _rank_params(model, trained, sharded, layout)
    param_bytes = max((p.element_size() for _, p in trained), default=4)
    compute = DTYPE_BYTES.get(precision, param_bytes)
    whole = {m: st for w in sharded.whole_attention for m, st in w.layers}
    return ParallelPlan(
        layout=layout,
        grads=held.grads,
        groups=held.groups,
        tp_layers=_tp_layers(gemms, styles, compute, param_bytes) if tp > 1 else (),
        tp_sharded=len(styles),
        tp_styles=tuple(sorted(styles.items())),
        tp_tensors=_layer_tensors(model, [*styles, *whole]) if tp > 1 else (),
        not_sharded=sharded.not_sharded,
        rank_params=held.rank_params,
        whole_attention=sharded.whole_attention,
        vocab_heads=_vocab_heads(model, gemms, styles) if tp > 1 else (),
        tp_fwd_bytes=compute,
        tp_bwd_bytes=param_bytes,
        attention_sharded=_rank_params(model, trained, replace(sharded, styles={**styles, **whole}), layout)
        if whole else None,
    )


def _rank_params(model: torch.nn.Module, trained: Sequence[tuple[str, torch.Tensor]], sharded: Sharding,
                 layout: Layout) -> RankParams:
    """One rank's gradients (ready order), FSDP2 groups and optimizer parameters."""
    elems = _rank_elems(model, sharded, layout.tp)
    owners = Counter(id(q) for m in model.modules() for q in m.parameters(recurse=False))

    def nbytes(name: str, p: torch.Tensor) -> int:
        return elems(name, p) * p.element_size()

    grads = [nbytes(n, p) for n, p in reversed(trained)]
    tied = [i for i, (_, p) in enumerate(reversed(trained)) if owners[id(p)] > 1]  # an embedding tied to the LM head
    for i in sorted(tied, reverse=True):  # a tied weight's gradient is ready last
        grads.append(grads.pop(i))
    return RankParams(tuple(grads), _groups(model, dict(trained), nbytes),
                      tuple((-(-elems(n, p) // layout.fsdp), p.element_size()) for n, p in trained))


def _rank_elems(model: torch.nn.Module, sharded: Sharding, tp: int) -> Callable[[str, torch.Tensor], int]:
    """Elements of a trained tensor on one tensor-parallel rank: 1/``tp`` of a sharded
    layer's weight (and of a column-parallel layer's bias), the rank's own head of a
    replicated key/value projection, all of anything else."""
    styles, widths = sharded.styles, sharded.widths

    def elems(name: str, p: torch.Tensor) -> int:
        owner = name.rsplit(".", 1)[0]
        if owner in widths:
            return -(-p.numel() * widths[owner] // int(getattr(model.get_submodule(owner), "out_features")))
        split = tp if owner in styles and (p.dim() >= 2 or styles[owner] == "column") else 1
        return -(-p.numel() // split)

    return elems


def _groups(model: torch.nn.Module, trained: dict[str, torch.Tensor],
            nbytes: Callable[[str, torch.Tensor], int]) -> tuple[ParamGroup, ...]:
    """The root group first, then one per block of every stack of repeated layers, in
    the model's order (an encoder-decoder's encoder and decoder blocks alike; a stack
    inside a block is that block's)."""
    blocks = [(path, block) for _, stack in stacks(model) for path, block in stack]
    in_block: set[str] = set()
    out: list[ParamGroup] = []
    for path, block in blocks:
        if any(path.startswith(f"{g.name}.") for g in out):
            continue
        names = [f"{path}.{n}" for n, q in block.named_parameters() if f"{path}.{n}" in trained]
        in_block.update(names)
        out.append(ParamGroup(path, sum(nbytes(n, trained[n]) for n in names), len(names)))
    root = [n for n in trained if n not in in_block]
    return (ParamGroup("<root>", sum(nbytes(n, trained[n]) for n in root), len(root)), *out)


def _vocab_heads(model: torch.nn.Module, gemms: Sequence[Gemm],
                 styles: dict[str, str]) -> tuple[VocabParallelHead, ...]:
    """The column-parallel layers whose width is one of the model's vocabularies (an
    embedding's ``num_embeddings``): the tokens of their forward GEMM, their input width."""
    vocabs = {m.num_embeddings for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    out: dict[str, VocabParallelHead] = {}
    for g in gemms:
        p = dict(g.module_params)
        width, hidden = p.get("out_features", p.get("nf")), p.get("in_features", p.get("nx"))
        if (g.phase == "forward" and not g.role and styles.get(g.module) == "column" and g.module not in out
                and width in vocabs and hidden):
            out[g.module] = VocabParallelHead(g.module, g.m * g.batch, int(hidden))
    return tuple(out.values())


def _layer_tensors(model: torch.nn.Module, layers: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """Each layer's own trained tensors: its weight and its bias (a weight tied to an
    embedding counts: it is this layer's DTensor too)."""
    return tuple((m, sum(1 for q in model.get_submodule(m).parameters(recurse=False) if q.requires_grad))
                 for m in dict.fromkeys(layers))


def _tp_layers(gemms: Sequence[Gemm], styles: dict[str, str], compute: int,
               param_bytes: int) -> tuple[TensorParallelLayer, ...]:
    """Each row-parallel layer's forward and backward all-reduce sizes."""
    out: dict[str, TensorParallelLayer] = {}
    for g in gemms:
        if g.phase != "forward" or styles.get(g.module) != "row" or g.module in out:
            continue
        elems = g.m * g.n * g.batch
        out[g.module] = TensorParallelLayer(g.module, elems * compute, elems * param_bytes)
    return tuple(out.values())


__all__ = ["parallel_plan"]
