"""Tensor parallelism (``--tp N``): the GEMMs each GPU runs when Megatron-style
column/row-parallel linear layers and attention heads are split N ways.

A column-parallel layer (QKV, MLP up/gate, LM head) keeps every input and splits
``out_features``; a row-parallel one (attention output, MLP down) splits
``in_features``. Which is which is read off the module's name, as Megatron-LM and
the Hugging Face TP plans name them. Attention splits its heads. Sizes that do not
divide are rounded up (Megatron pads the vocabulary the same way).
"""

from __future__ import annotations

from collections.abc import Sequence

from shapelint.hardware import ceil_div
from shapelint.physics.reshape import set_dim
from shapelint.records import Gemm

COLUMN_PARALLEL = frozenset({
    "c_attn", "q_proj", "k_proj", "v_proj", "qkv_proj", "query_key_value", "qkv", "wqkv", "c_fc", "up_proj",
    "gate_proj", "gate_up_proj", "fc1", "w1", "w3", "lm_head", "embed_out", "wi", "query", "key", "value",
})
ROW_PARALLEL = frozenset({"o_proj", "out_proj", "down_proj", "fc2", "w2", "wo", "dense_4h_to_h", "c_proj"})

#: (phase → the GEMM axis that carries out_features, the one that carries in_features)
#: for a Linear: forward y = x Wᵀ (T x out, k = in), grad_input dx = dy W (T x in, k = out),
#: grad_weight dW = dyᵀ x (out x in, k = T)
_LINEAR_AXES = {
    "forward": ("n", "k"),
    "recompute": ("n", "k"),
    "grad_input": ("k", "n"),
    "grad_weight": ("m", "n"),
}


def parallel_style(module: str) -> str | None:
    leaf = module.rsplit(".", 1)[-1]
    if leaf in COLUMN_PARALLEL:
        return "column"
    if leaf in ROW_PARALLEL:
        return "row"
    return None


def shard(gemms: Sequence[Gemm], tp: int) -> list[Gemm]:
    """The GEMMs one of ``tp`` GPUs runs."""
    if tp <= 1:
        return list(gemms)
    return [shard_one(g, tp) for g in gemms]


def shard_one(g: Gemm, tp: int) -> Gemm:
    if g.role in ("attn_scores", "attn_values", "after_softmax") or g.op.startswith("sdpa"):
        return _shard_heads(g, tp)
    style = parallel_style(g.module)
    if style is None or g.phase not in _LINEAR_AXES:
        return g
    out_axis, in_axis = _LINEAR_AXES[g.phase]
    axis = out_axis if style == "column" else in_axis
    return set_dim(g, axis, ceil_div(getattr(g, axis), tp))


def _shard_heads(g: Gemm, tp: int) -> Gemm:
    from dataclasses import replace

    return replace(g, batch=ceil_div(g.batch, tp)) if g.batch >= tp else g
