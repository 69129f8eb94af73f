"""Tensor parallelism (``--tp N``): the GEMMs each GPU runs when Megatron-style
column/row-parallel linear layers, attention heads and experts are split N ways.

A column-parallel layer (QKV, MLP up/gate, LM head) keeps every input and splits
``out_features``; a row-parallel one (attention output, MLP down) splits
``in_features``. Which is which is read off the module's name where Megatron-LM and
the Hugging Face TP plans name it (:data:`COLUMN_PARALLEL`, :data:`ROW_PARALLEL`,
:data:`QUALIFIED`), else off the model's structure (:func:`structural_styles`): the
linear layers of an attention module that run before its attention GEMMs are column
parallel and those after it row parallel, and a run of linear layers widening ``d → f``
followed by one narrowing ``f → d`` (an MLP around its activation) is column then
row. A linear layer neither names nor structure place stays whole on every GPU, and
:class:`Sharding` lists it, so that the report never claims one GPU's shapes for it.
Attention splits its heads, in every GEMM of the attention (fused or written by hand),
forward and backward alike. Key/value heads fewer than the degree (grouped-query
attention, ``tp`` a multiple of them) are replicated: each rank projects the one
key/value head its query heads share, as Megatron-LM and vLLM replicate them. An
attention whose heads (or key/value heads, when not replicated) the degree does not
divide stays whole on every rank, its projections with it (:class:`WholeAttention`,
listed as not sharded): that is what a user who must keep the model gets, and SL602
prices the head count that would shard it.
Mixture-of-experts layers split each expert's intermediate size. The vocabulary,
which need not divide, is rounded up (Megatron pads it the same way).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

from shapelint.capture.rows import ROOT_INFO
from shapelint.hardware import ceil_div
from shapelint.model.parallel import WholeAttention
from shapelint.model.records import Gemm
from shapelint.physics.attention import BATCHED_OPS
from shapelint.physics.heads import divides_heads
from shapelint.physics.reshape import set_dim

#: leaf names of column-parallel layers, by family: Llama/Mistral/Qwen/OPT/GPT-J/CLIP,
#: GPT-2/StarCoder, GPT-NeoX/Falcon/BLOOM, MPT/CodeGen, BERT/ViT, DeBERTa, DistilBERT,
#: ALBERT, T5, Mixtral-style experts (w1/w3), DeepSeek MLA (kv_b_proj), LM heads
COLUMN_PARALLEL = frozenset({
    "q_proj", "k_proj", "v_proj", "qkv_proj", "gate_proj", "up_proj", "gate_up_proj", "fc1", "fc_in",
    "c_attn", "c_fc",
    "query_key_value", "dense_h_to_4h",
    "Wqkv", "wqkv", "qkv",
    "query", "key", "value",
    "query_proj", "key_proj", "value_proj",
    "q_lin", "k_lin", "v_lin", "lin1",
    "ffn",
    "q", "k", "v", "wi", "wi_0", "wi_1",
    "w1", "w3", "kv_b_proj",
    "lm_head", "embed_out",
})
#: leaf names of row-parallel layers, same families
ROW_PARALLEL = frozenset({
    "o_proj", "out_proj", "down_proj", "fc2", "fc_out",
    "c_proj",
    "dense_4h_to_h",
    "out_lin", "lin2",
    "ffn_output",
    "o", "wo",
    "w2",
})
#: ``parent.leaf`` names where the leaf alone says nothing (``dense``)
QUALIFIED = {
    "attention.dense": "row",  # GPT-NeoX, ALBERT
    "self_attention.dense": "row",  # Falcon, BLOOM
    "self_attn.dense": "row",  # Phi
    "output.dense": "row",  # BERT family: attention.output.dense and the FFN's output.dense
    "intermediate.dense": "column",  # BERT family
}

#: owning-module attributes that give the attention heads / key-value heads
HEADS_PARAMS = ("num_heads", "num_attention_heads", "n_head", "n_heads")
KV_HEADS_PARAMS = ("num_kv_heads", "num_key_value_heads", "n_kv_heads")
#: child names of an attention module's query / key projection
Q_PROJECTIONS = ("q_proj", "query", "q", "q_lin", "query_proj")
K_PROJECTIONS = ("k_proj", "key", "k", "k_lin", "key_proj")
V_PROJECTIONS = ("v_proj", "value", "v", "v_lin", "value_proj")
#: child names of a fused query-key-value projection (3 x heads x head_dim wide)
QKV_PROJECTIONS = ("query_key_value", "c_attn", "qkv_proj", "Wqkv", "qkv")
HEAD_DIM_PARAMS = ("head_dim", "head_size")
#: attributes of a mixture-of-experts module that give each expert's intermediate size
EXPERT_PARAMS = ("intermediate_dim", "intermediate_size", "moe_intermediate_size", "ffn_dim")

#: (phase → the GEMM axis that carries out_features, the one that carries in_features)
#: for a Linear (weight [out, in]): forward y = x Wᵀ (T x out, k = in), grad_input
#: dx = dy W (T x in, k = out), grad_weight dW = dyᵀ x (out x in, k = T)
_LINEAR_AXES = {
    "forward": ("n", "k"),
    "recompute": ("n", "k"),
    "grad_input": ("k", "n"),
    "grad_weight": ("m", "n"),
}
#: the same for GPT-2's Conv1D (weight [in, out], y = x W): dW = xᵀ dy is in x out
_CONV1D_AXES = {**_LINEAR_AXES, "grad_weight": ("n", "m")}


def parallel_style(module: str) -> str | None:
    parts = module.rsplit(".", 2)
    leaf = parts[-1]
    if len(parts) > 1 and f"{parts[-2]}.{leaf}" in QUALIFIED:
        return QUALIFIED[f"{parts[-2]}.{leaf}"]
    if leaf in COLUMN_PARALLEL:
        return "column"
    if leaf in ROW_PARALLEL:
        return "row"
    return None


@dataclass(frozen=True)
class Sharding:
    """One tensor-parallel rank's GEMMs, the style of every sharded linear layer, the
    linear layers left whole (in forward order) and the attention modules left whole
    because the degree does not divide their heads."""

    gemms: list[Gemm]
    styles: dict[str, str]
    not_sharded: tuple[str, ...]
    whole_attention: tuple[WholeAttention, ...] = ()
    #: out_features on one rank of the column-parallel layers that are not split
    #: ``tp`` ways (the key/value projections of replicated key/value heads)
    widths: dict[str, int] = field(default_factory=dict)


def shard(gemms: Sequence[Gemm], tp: int) -> list[Gemm]:
    """The GEMMs one of ``tp`` GPUs runs."""
    return sharding(gemms, tp).gemms


def sharding(gemms: Sequence[Gemm], tp: int) -> Sharding:
    """:func:`shard` with the layers it placed and those it left whole."""
    if tp <= 1:
        return Sharding(list(gemms), {}, ())
    heads = attention_heads(gemms)
    styles = layer_styles(gemms)
    linears = [m for m, _, _ in _linears(gemms)]
    whole: list[WholeAttention] = []
    kept: set[str] = set()
    for module, (h, kv) in heads.items():
        if divides_heads(h, kv, tp):
            continue
        layers = _projections_of(gemms, module, linears, styles)
        kept.update([module, *layers])
        whole.append(WholeAttention(module, h, kv, _head_dim(gemms, module), tuple(layers.items()),
                                    _reduce_elems(gemms, layers)))
    styles = {m: s for m, s in styles.items() if m not in kept}
    widths = _replicated_kv_widths(gemms, heads, tp)
    out = [g if g.module in kept else shard_one(g, tp, g.module in heads, styles.get(g.module), widths.get(g.module))
           for g in gemms]
    return Sharding(out, styles, tuple(m for m in linears if m not in styles), tuple(whole), widths)


def _projections_of(gemms: Sequence[Gemm], attention: str, linears: Sequence[str],
                    styles: dict[str, str]) -> dict[str, str]:
    """An attention module's projections with their styles: its own linear children
    and, where none of them is row parallel, the row-parallel layer right after them
    (BERT's ``attention.output.dense`` beside ``attention.self``)."""
    inside = [m for m in linears if m in styles and _within(m, attention)]
    out = {m: styles[m] for m in inside}
    if inside and "row" not in out.values():
        after = linears[linears.index(inside[-1]) + 1:]
        if after and styles.get(after[0]) == "row":
            out[after[0]] = "row"
    return out


def _within(module: str, parent: str) -> bool:
    return parent == ROOT_INFO.path or module.startswith(f"{parent}.")


def _child(parent: str, name: str) -> str:
    """The path of ``parent``'s child ``name`` (the model itself runs as ``<root>``)."""
    return name if parent == ROOT_INFO.path else f"{parent}.{name}"


def _reduce_elems(gemms: Sequence[Gemm], layers: dict[str, str]) -> tuple[tuple[str, int], ...]:
    """Elements of each row-parallel layer's forward output: the all-reduce sharding it adds."""
    out: dict[str, int] = {}
    for g in gemms:
        if g.phase == "forward" and layers.get(g.module) == "row" and g.module not in out and not g.role:
            out[g.module] = g.m * g.n * g.batch
    return tuple(out.items())


def _head_dim(gemms: Sequence[Gemm], module: str) -> int:
    """The head dimension of an attention module's scores GEMM (or its attributes)."""
    for g in gemms:
        if g.module == module and g.phase == "forward" and g.role in ("attn_scores", "after_softmax"):
            return _first(dict(g.module_params), HEAD_DIM_PARAMS) or (g.k if g.role == "attn_scores" else 0)
    return 0


def _replicated_kv_widths(gemms: Sequence[Gemm], heads: dict[str, tuple[int, int]], tp: int) -> dict[str, int]:
    """Per-rank out_features of the key/value (or fused query-key-value) projections of
    attentions whose key/value heads are fewer than ``tp`` and replicated: one key/value
    head each (with ``heads / tp`` query heads in a fused projection)."""
    widths = {g.module: dict(g.module_params).get("out_features") for g in gemms if g.phase == "forward"}
    out: dict[str, int] = {}
    for module, (h, kv) in heads.items():
        d = _head_dim(gemms, module)
        if kv >= tp or not divides_heads(h, kv, tp) or d <= 0:
            continue
        for child in (*K_PROJECTIONS, *V_PROJECTIONS):
            if widths.get(_child(module, child)) == kv * d:
                out[_child(module, child)] = d
        for child in QKV_PROJECTIONS:
            if widths.get(_child(module, child)) == (h + 2 * kv) * d:
                out[_child(module, child)] = (h // tp + 2) * d
    return out


def _linears(gemms: Sequence[Gemm]) -> list[tuple[str, int, int]]:
    """(module, in_features, out_features) of each linear layer (``nn.Linear`` or GPT-2's
    ``Conv1D``), in the order of their first forward GEMM."""
    seen: dict[str, tuple[str, int, int]] = {}
    for g in gemms:
        if g.phase != "forward" or g.module in seen or g.role:
            continue
        p = dict(g.module_params)
        if "in_features" in p and "out_features" in p:
            seen[g.module] = (g.module, int(p["in_features"]), int(p["out_features"]))
        elif "nf" in p and "nx" in p:
            seen[g.module] = (g.module, int(p["nx"]), int(p["nf"]))
    return list(seen.values())


def layer_styles(gemms: Sequence[Gemm]) -> dict[str, str]:
    """Each linear layer's style ("column" or "row"): by name where known, else by structure."""
    named = {m: s for m, _, _ in _linears(gemms) if (s := parallel_style(m)) is not None}
    return {**structural_styles(gemms, named), **named}


def structural_styles(gemms: Sequence[Gemm], named: dict[str, str]) -> dict[str, str]:
    """Styles of the linear layers ``named`` leaves out, from the model's structure (see
    the module docstring): an attention module's projections, and an MLP's pair."""
    linears = _linears(gemms)
    out = _attention_projections(gemms, [m for m, _, _ in linears if m not in named])
    free = [(m, i, o) for m, i, o in linears if m not in named and m not in out]
    order = {m: i for i, (m, _, _) in enumerate(linears)}
    for j, (m, d_in, d_out) in enumerate(free):
        run = _widening_run(free[:j], order, m, d_in, d_out)
        if run and not any(r in out for r in run):
            out.update(dict.fromkeys(run, "column"))
            out[m] = "row"
    return out


def _first_forward(gemms: Sequence[Gemm], attention: bool) -> dict[str, int]:
    """The index of each module's first forward GEMM (``attention``: of its attention GEMMs)."""
    first: dict[str, int] = {}
    for i, g in enumerate(gemms):
        if g.phase == "forward" and (not attention or g.role in ("attn_scores", "after_softmax")
                                     or g.op.startswith("sdpa")):
            first.setdefault(g.module, i)
    return first


def _attention_projections(gemms: Sequence[Gemm], free: Sequence[str]) -> dict[str, str]:
    """An attention module's linear children: column before its attention GEMMs, row after."""
    first_gemm = _first_forward(gemms, attention=False)
    out: dict[str, str] = {}
    for attn, at in _first_forward(gemms, attention=True).items():
        for m in free:
            if m.startswith(f"{attn}." if attn != ROOT_INFO.path else ""):  # the model itself is the attention
                out[m] = "column" if first_gemm[m] < at else "row"
    return out


def _widening_run(before: Sequence[tuple[str, int, int]], order: dict[str, int], m: str, d_in: int,
                  d_out: int) -> list[str]:
    """The linear layers right before ``m`` that widen ``d_out → d_in`` (``m`` narrows back)."""
    run: list[str] = []
    for prev, p_in, p_out in reversed(before):
        if p_in != d_out or p_out != d_in or d_in == d_out or order[prev] != order[m] - len(run) - 1:
            break
        run.append(prev)
    return run


def attention_heads(gemms: Sequence[Gemm]) -> dict[str, tuple[int, int]]:
    """(heads, key/value heads) of each attention module: from its own attributes,
    else from its query and key projections' widths over the head dimension."""
    widths = {g.module: dict(g.module_params).get("out_features") for g in gemms if g.phase == "forward"}
    out: dict[str, tuple[int, int]] = {}
    for g in gemms:
        if g.module in out or g.phase != "forward" or g.role not in ("attn_scores", "after_softmax"):
            continue
        heads = _heads(g, widths)
        if heads is not None:
            out[g.module] = heads
    return out


def _heads(g: Gemm, widths: dict[str, int | None]) -> tuple[int, int] | None:
    """(heads, key/value heads) of the attention that ran ``g``, None where nothing says."""
    params = dict(g.module_params)
    d = _first(params, HEAD_DIM_PARAMS) or (g.k if g.role == "attn_scores" else 0)
    heads = (_first(params, HEADS_PARAMS) or _projected(widths, g.module, Q_PROJECTIONS, d)
             or _projected(widths, g.module, QKV_PROJECTIONS, 3 * d))
    if not heads:
        return None
    groups = params.get("num_key_value_groups")
    kv = (_first(params, KV_HEADS_PARAMS) or (heads // groups if groups else 0)
          or _projected(widths, g.module, K_PROJECTIONS, d) or heads)
    return heads, kv


def _first(params: dict[str, int], names: tuple[str, ...]) -> int:
    return next((int(params[n]) for n in names if params.get(n)), 0)


def _projected(widths: dict[str, int | None], module: str, children: tuple[str, ...], head_dim: int) -> int:
    if head_dim <= 0:
        return 0
    width = next((widths[_child(module, c)] for c in children if widths.get(_child(module, c))), None)
    return width // head_dim if width and width % head_dim == 0 else 0


def features_axis(g: Gemm, side: str = "out") -> str | None:
    """The axis (``"m"``, ``"n"`` or ``"k"``) of a linear layer's GEMM that carries its
    ``out_features`` (``side="out"``) or ``in_features`` (``"in"``) in this phase; None
    for a GEMM of no linear layer's phase."""
    if g.phase not in _LINEAR_AXES:
        return None
    out_axis, in_axis = (_CONV1D_AXES if "nf" in dict(g.module_params) else _LINEAR_AXES)[g.phase]
    return out_axis if side == "out" else in_axis


def shard_one(g: Gemm, tp: int, in_attention: bool = False, style: str | None = None,
              width: int | None = None) -> Gemm:
    """``g`` on one of ``tp`` GPUs; ``in_attention``: ``g`` belongs to an attention
    module, whose batched GEMMs run per head; ``style``: the layer's parallel style
    (default: by its name); ``width``: a column-parallel layer's out_features on one
    rank where it is not 1/``tp`` of them (replicated key/value heads)."""
    if g.role in ("attn_scores", "attn_values") or g.op.startswith("sdpa") or (in_attention and g.op in BATCHED_OPS):
        return replace(g, batch=ceil_div(g.batch, tp)) if g.batch >= tp else g
    expert = _expert_axis(g)
    if expert is not None:
        return set_dim(g, expert, ceil_div(getattr(g, expert), tp))
    style = style or parallel_style(g.module)
    axis = features_axis(g, "out" if style == "column" else "in") if style is not None else None
    if axis is None:
        return g
    if style == "column" and width is not None:
        return set_dim(g, axis, width)
    return set_dim(g, axis, ceil_div(getattr(g, axis), tp))


def _expert_axis(g: Gemm) -> str | None:
    """For an experts module's grouped GEMM, the axis that carries each expert's
    intermediate size (gate and up fused: twice it), which expert tensor
    parallelism splits; None for other GEMMs."""
    if not g.op.startswith(("_grouped_mm", "_scaled_grouped_mm")):
        return None
    size = _first(dict(g.module_params), EXPERT_PARAMS)
    return next((axis for axis in ("n", "k", "m") if size and getattr(g, axis) in (size, 2 * size)), None)
