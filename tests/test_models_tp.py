"""--tp on the corpus: every naming family shards both sides of each layer,
forward and gradients agree, an attention whose heads the degree does not divide stays
whole, experts split."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from test_models_corpus import traced

from shapelint.capture.tensor_parallel import attention_heads, parallel_style, shard, sharding
from shapelint.model.records import Gemm

pytest.importorskip("transformers")

#: on the worker that runs tests/test_models_corpus.py (pytest-xdist), which traces these models too
pytestmark = [pytest.mark.xdist_group("corpus"), pytest.mark.slow]


@pytest.fixture
def config(small_corpus: dict[str, Path]):
    """The corpus config at 2 layers: the files tests/test_models_corpus.py traces
    (:func:`traced` is cached by path: each model is captured once for both)."""
    return small_corpus.__getitem__


#: (model, a column-parallel module, a row-parallel one, its out_features, heads, kv heads)
FAMILIES = [
    ("llama-3-8b", "model.layers.0.self_attn.k_proj", "model.layers.0.mlp.down_proj", 32, 8),
    ("gpt2", "transformer.h.0.attn.c_attn", "transformer.h.0.mlp.c_proj", 12, 12),
    ("pythia-160m", "gpt_neox.layers.0.mlp.dense_h_to_4h", "gpt_neox.layers.0.attention.dense", 12, 12),
    ("bloom-560m", "transformer.h.0.self_attention.query_key_value", "transformer.h.0.self_attention.dense",
     16, 16),
    ("opt-125m", "model.decoder.layers.0.fc1", "model.decoder.layers.0.self_attn.out_proj", 12, 12),
    ("bert-base-uncased", "bert.encoder.layer.0.intermediate.dense", "bert.encoder.layer.0.output.dense", 12, 12),
    ("flan-t5-base", "encoder.block.0.layer.1.DenseReluDense.wi_0", "encoder.block.0.layer.0.SelfAttention.o",
     12, 12),
]


def _by(gemms: Sequence[Gemm], module: str) -> dict[str, tuple[int, int, int]]:
    return {g.phase: (g.m, g.n, g.k) for g in gemms if g.module == module}


@pytest.mark.parametrize(("name", "column", "row", "heads", "kv"), FAMILIES)
def test_families_shard_both_sides_consistently(name: str, column: str, row: str, heads: int, kv: int,
                                                config) -> None:
    gemms, _ = traced(config(name))
    assert (parallel_style(column), parallel_style(row)) == ("column", "row")
    assert attention_heads(gemms)[next(m for m in attention_heads(gemms))] == (heads, kv)
    tp = 4
    sharded = shard(gemms, tp)
    for module, widths in ((column, ("out_features", "nf")), (row, ("in_features", "nx"))):  # Linear, Conv1D
        params = next(dict(g.module_params) for g in gemms if g.module == module)
        size = next(params[w] for w in widths if w in params)
        full, per_gpu = _by(gemms, module), _by(sharded, module)
        assert set(full) == {"forward", "grad_input", "grad_weight"}
        for phase in full:  # exactly the axis that carries the split size shrinks, in every phase
            changed = [(a, b) for a, b in zip(full[phase], per_gpu[phase]) if a != b]
            assert changed == [(size, size // tp)], (module, phase)


def test_every_attention_gemm_splits_its_heads_forward_and_backward(config) -> None:
    gemms, _ = traced(config("gpt-neo-125m"))  # eager attention: bmm's
    sharded = shard(gemms, 4)
    bmms = [(g, s) for g, s in zip(gemms, sharded) if g.op == "bmm"]
    assert len(bmms) == 2 * 6 and all(s.batch * 4 == g.batch for g, s in bmms)


@pytest.mark.parametrize(("name", "tp", "heads", "kv", "whole"), [
    ("qwen2.5-0.5b", 4, 14, 2, True),  # 14 heads: the attention stays whole
    ("falcon-7b", 2, 71, 1, True),  # 71 heads
    ("llama-3-8b", 16, 32, 8, False),  # 8 KV heads at 16: each replicated on 2 GPUs
])
def test_degrees_that_do_not_divide_the_heads_leave_the_attention_whole(name: str, tp: int, heads: int, kv: int,
                                                                       whole: bool, config) -> None:
    gemms, _ = traced(config(name))
    sharded = sharding(gemms, tp)
    assert [(w.heads, w.kv_heads) for w in sharded.whole_attention] == ([(heads, kv)] * 2 if whole else [])
    for w in sharded.whole_attention:  # every projection of a whole attention is listed, and unsharded
        assert all(m in sharded.not_sharded and m not in sharded.styles for m, _ in w.layers)
        before = [(g.m, g.n, g.k, g.batch) for g in gemms if g.module.startswith(w.module)]
        after = [(g.m, g.n, g.k, g.batch) for g in sharded.gemms if g.module.startswith(w.module)]
        assert before == after


def test_experts_split_their_intermediate_size(config) -> None:
    gemms, _ = traced(config("mixtral-8x7b"))
    experts = [(g, s) for g, s in zip(gemms, shard(gemms, 8)) if g.op == "_grouped_mm"]
    assert experts
    for g, s in experts:
        changed = [axis for axis in "mnk" if getattr(g, axis) != getattr(s, axis)]
        assert len(changed) == 1 and getattr(g, changed[0]) in (14336, 2 * 14336)
        assert getattr(s, changed[0]) * 8 == getattr(g, changed[0])
