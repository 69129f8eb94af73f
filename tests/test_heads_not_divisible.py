"""--tp that does not divide the attention heads: the attention stays whole on every rank
(its projections listed as not sharded), key/value heads fewer than the degree are
replicated, SL602 proposes a head count the degree divides and the pricer charges it the
all-reduces it adds; a vocabulary aligned whole but not per shard is SL501's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shapelint.capture.tensor_parallel import sharding
from shapelint.check.rule_api import Example
from shapelint.check.run import builtin_rules
from shapelint.hardware import resolve
from shapelint.model.parallel import HeadsChange, Layout
from shapelint.physics.heads import divides_heads, sharded_heads
from shapelint.pipeline.examples import run_example, trace_example
from shapelint.pipeline.result import Options
from shapelint.pipeline.run import lint_target

RULES = {r.code: r for r in builtin_rules()}


def dims(gemms, module: str, op: str = "", phase: str = "forward") -> tuple[int, int, int, int]:
    g = next(g for g in gemms if g.module == module and g.phase == phase and g.op.startswith(op))
    return g.m, g.n, g.k, g.batch


@pytest.mark.parametrize(("heads", "kv", "d", "tp", "want"), [
    (12, 12, 64, 8, (16, 16, 48)),  # OPT-125m / GPT-2 small: 768 = 16 x 48
    (25, 25, 64, 4, (20, 20, 80)),  # GPT-2 XL: 1600 = 20 x 80
    (14, 2, 64, 4, (16, 2, 56)),  # Qwen2.5-0.5B: 896 = 16 x 56, 2 KV heads each on 2 GPUs
    (71, 1, 64, 2, (142, 1, 32)),  # Falcon-7B: 4544 = 2^6 x 71, the only even counts have head_dim <= 32
])
def test_sharded_heads_keep_the_hidden_size_with_an_aligned_head_dim(heads, kv, d, tp, want) -> None:
    h, k, hd = sharded_heads(heads, kv, d, tp, 8)
    assert (h, k, hd) == want
    assert h * hd == heads * d and hd % 8 == 0 and divides_heads(h, k, tp) and h % k == 0


def test_divides_heads_replicates_fewer_kv_heads_than_the_degree() -> None:
    assert divides_heads(32, 8, 16)  # Llama-3-8B at TP 16: each KV head on 2 GPUs
    assert not divides_heads(32, 12, 8)  # 12 KV heads neither divide by 8 nor divide it
    assert not divides_heads(12, 12, 8)


def _traced(model: str, inputs: str, tp: int):
    return trace_example(RULES["SL602"], Example(model, inputs, tp=tp))


def test_opt_shaped_attention_at_tp8_stays_whole_and_is_listed() -> None:
    cap, ctx = _traced("_rule.TinyAttention(768, 12)", "torch.randn(8, 1024, 768)", 8)
    (whole,) = ctx.whole_attention
    assert (whole.heads, whole.kv_heads, whole.head_dim) == (12, 12, 64)
    assert dict(whole.layers) == {"q_proj": "column", "k_proj": "column", "v_proj": "column", "o_proj": "row"}
    assert whole.reduce_elems == (("o_proj", 8 * 1024 * 768),)
    assert dims(cap.gemms, "q_proj") == (8192, 768, 768, 1)  # whole: every GPU projects every head
    assert dims(cap.gemms, "<root>", "sdpa.qk") == (1024, 1024, 64, 8 * 12)
    assert ctx.sharded == frozenset()
    assert sharding(cap.gemms, 8).not_sharded == ("q_proj", "k_proj", "v_proj", "o_proj")


def test_kv_heads_fewer_than_the_degree_are_replicated_one_per_gpu() -> None:
    # Llama-3-8B's attention (32 heads, 8 KV heads of 128) at TP 16
    cap, ctx = _traced("_rule.TinyAttention(4096, 32, 8)", "torch.randn(1, 1024, 4096)", 16)
    assert ctx.whole_attention == ()
    assert dims(cap.gemms, "q_proj") == (1024, 256, 4096, 1)  # 2 query heads
    assert dims(cap.gemms, "k_proj") == (1024, 128, 4096, 1)  # their one KV head, not half of one
    assert dims(cap.gemms, "v_proj", phase="grad_weight") == (128, 4096, 1024, 1)
    assert dims(cap.gemms, "o_proj") == (1024, 4096, 256, 1)
    assert dims(cap.gemms, "<root>", "sdpa.qk") == (1024, 1024, 128, 2)


def test_sl602_proposes_16_heads_of_48_and_prices_the_shards() -> None:
    ex = Example("_rule.TinyAttention(768, 12)", "torch.randn(8, 1024, 768)", tp=8)
    cap, ctx = trace_example(RULES["SL602"], ex)
    (p,) = RULES["SL602"].check(cap.gemms, resolve("h100"), ctx)
    change = p.change
    assert (change.suggestion.parameter, change.suggestion.from_, change.suggestion.to) == ("num_heads", 12, 16)
    assert p.module == "<root>"
    assert dims(change.after, "q_proj") == (8192, 96, 768, 1)  # 2 heads of 48 per GPU
    assert dims(change.after, "k_proj", phase="grad_weight") == (96, 768, 8192, 1)
    assert dims(change.after, "o_proj") == (8192, 768, 96, 1)
    assert dims(change.after, "o_proj", phase="grad_input") == (8192, 96, 768, 1)
    assert dims(change.after, "<root>", "sdpa.qk") == (1024, 1024, 48, 16)  # 8 sequences x 2 heads
    assert dims(change.after, "<root>", "sdpa.pv") == (1024, 48, 1024, 16)
    assert change.parallel.tp_reduce_elems == (("o_proj", 8192 * 768),)
    assert change.parallel.tp_styles == (("q_proj", "column"), ("k_proj", "column"), ("v_proj", "column"),
                                         ("o_proj", "row"))
    assert change.parallel.heads == HeadsChange(12, 12, 64, 16, 16, 48)  # what --verify --step edits, typed
    (f,) = run_example(RULES["SL602"], ex)
    assert f.parallel == change.parallel and f.est_speedup > 2.0
    # the report's details keep their keys and order, written from the typed change
    assert [(k, v) for k, v in f.details().items() if k in dict(change.facts)] == [
        ("heads", 12), ("kv_heads", 12), ("head_dim", 64), ("to_heads", 16), ("to_kv_heads", 16), ("to_head_dim", 48),
        ("tp", 8)]


def test_a_token_count_equal_to_the_kv_width_is_not_resized() -> None:
    """Qwen2-7B's attention (28 heads, 4 key/value heads of 128) at --tp 8 over 512
    tokens: 512 is also the key/value width, and only k_proj and v_proj change it (the
    rule picked dimensions by value and shrank q_proj's tokens to 448)."""
    ex = Example("_rule.TinyAttention(3584, 28, 4)", "torch.randn(1, 512, 3584)", tp=8)
    cap, ctx = trace_example(RULES["SL602"], ex)
    (p,) = RULES["SL602"].check(cap.gemms, resolve("h100"), ctx)
    assert p.change.parallel is not None and p.change.parallel.heads is not None
    heads, kv, d = p.change.parallel.heads.to_heads, p.change.parallel.heads.to_kv_heads, p.change.parallel.heads.to_head_dim
    assert dims(p.change.after, "q_proj") == (512, heads // 8 * d, 3584, 1)
    assert dims(p.change.after, "q_proj", phase="grad_weight") == (heads // 8 * d, 3584, 512, 1)
    k_width = d if kv < 8 else kv // 8 * d
    assert dims(p.change.after, "k_proj") == (512, k_width, 3584, 1)


@pytest.fixture(scope="module")
def gpt2_xl(tmp_path_factory) -> Path:
    """GPT-2 XL's widths (1600 = 25 heads x 64) at 2 layers."""
    path = tmp_path_factory.mktemp("gpt2xl") / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 1600,
                                "n_head": 25, "n_layer": 2, "n_positions": 1024, "vocab_size": 50304}))
    return path


def test_gpt2_xl_at_tp4_gets_20_heads_priced_with_the_allreduces_it_adds(gpt2_xl: Path) -> None:
    pytest.importorskip("transformers")
    result = lint_target(gpt2_xl, Options(batch=32, seq=1024, tp=4), None, list(RULES.values()))
    assert result.parallel is not None and result.parallel.layout == Layout(tp=4)
    assert [w.module for w in result.parallel.whole_attention] == ["transformer.h.0.attn", "transformer.h.1.attn"]
    assert "transformer.h.0.attn.c_attn" in result.parallel.not_sharded
    (f,) = [f for f in result.findings if f.code == "SL602"]
    assert (f.suggestion.parameter, f.suggestion.from_, f.suggestion.to) == ("n_head", 25, 20)
    assert f.modules == ("transformer.h.0.attn", "transformer.h.1.attn")
    assert f.location is not None and f.location.key == "n_head"
    model = result.step_model
    before, after = model.before.communication, model.after([f]).communication
    tp_before = [c for c in before.collectives if c.engine == "tp"]
    tp_after = [c for c in after.collectives if c.engine == "tp"]
    assert [c.count for c in tp_before] == [2, 2] and [c.count for c in tp_after] == [4, 4]  # + 1 per block each way
    elems = 32 * 1024 * 1600
    table = result.hardware.collectives
    added = 2 * (table.us("all_reduce", elems * 2, 4) + table.us("all_reduce", elems * 4, 4)) * 1e-3
    assert after.exposed_ms - before.exposed_ms == pytest.approx(added, rel=1e-9)
    assert sum(c.nbytes for c in tp_after) - sum(c.nbytes for c in tp_before) == 2 * elems * (2 + 4)
    gemm_saved = f.est_ms - f.est_ms_after
    assert f.step_ms_saved is not None and 0 < f.step_ms_saved < gemm_saved


def test_a_vocabulary_aligned_whole_but_not_per_shard_is_padded_to_8_times_tp() -> None:
    # 50264 = 8 x 6283 is aligned on one GPU; at TP 4 each shard is 12566, misaligned
    ex = Example("_rule.TinyLM(50264)", "torch.randint(0, 50264, (8, 512))", tp=4)
    (f,) = run_example(RULES["SL501"], ex)
    assert (f.suggestion.from_, f.suggestion.to) == (50264, 50272)  # 12568 per GPU
    assert not run_example(RULES["SL501"], Example("_rule.TinyLM(50272)", "torch.randint(0, 50272, (8, 512))",
                                                     tp=4))
    cap, ctx = trace_example(RULES["SL501"], ex)
    assert not list(RULES["SL601"].check(cap.gemms, resolve("h100"), ctx))  # the vocabulary is SL501's


def test_a_findings_parallel_change_survives_the_cache_json() -> None:
    from shapelint.model.parallel import ParallelChange
    from shapelint.model.records import Finding
    from shapelint.model.serial import decode, encode

    f = Finding("SL602", "heads-not-divisible", "error", "h.0.attn", "m", (1, 2), 2.0, 1.0,
                parallel=ParallelChange((("h.0.attn.c_proj", 123),), (("h.0.attn.c_attn", "column"),
                                                                         ("h.0.attn.c_proj", "row")),
                                        heads=HeadsChange(25, 25, 64, 20, 20, 80)))
    assert decode(Finding, json.loads(json.dumps(encode(f, Finding)))).parallel == f.parallel


def test_replicated_kv_heads_weigh_one_head_in_each_ranks_gradients() -> None:
    from shapelint.rules.sl602_heads_not_divisible import TinyAttention

    from shapelint.capture.parallel_plan import parallel_plan
    from shapelint.pipeline.run import trace

    cap, model = trace(lambda: (TinyAttention(4096, 32, 8), __import__("torch").randn(1, 1024, 4096)))
    plan = parallel_plan(model, cap.gemms, Layout(tp=16), sharding(cap.gemms, 16), "bf16")
    # registration order reversed: o_proj, v_proj, k_proj, q_proj; fp32, [out, in] per rank
    assert plan.grads == (4096 * 256 * 4, 128 * 4096 * 4, 128 * 4096 * 4, 256 * 4096 * 4)


def test_the_after_plan_shards_the_attention_layers_once() -> None:
    from shapelint.model.parallel import ParallelChange, ParallelPlan, TensorParallelLayer
    from shapelint.price.communication import applied

    plan = ParallelPlan(Layout(tp=4), tp_layers=(TensorParallelLayer("h.0.mlp.c_proj", 10, 20),), tp_sharded=2,
                        tp_styles=(("h.0.mlp.c_fc", "column"), ("h.0.mlp.c_proj", "row")), tp_fwd_bytes=2,
                        tp_bwd_bytes=4)
    change = ParallelChange((("h.0.attn.c_proj", 100),), (("h.0.attn.c_attn", "column"), ("h.0.attn.c_proj", "row")))
    after = applied(plan, [change, change])  # the same layers twice count once
    assert after.tp_layers[1:] == (TensorParallelLayer("h.0.attn.c_proj", 200, 400),)
    assert after.tp_sharded == 4 and len(after.tp_styles) == 4


def test_under_fsdp_and_tp_sharding_the_attention_shrinks_each_ranks_groups(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    path = tmp_path / "config.json"  # 4 layers: FSDP2's groups are the blocks of a stack of at least 3
    path.write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 1600,
                                "n_head": 25, "n_layer": 4, "n_positions": 1024, "vocab_size": 50304}))
    result = lint_target(path, Options(batch=32, seq=1024, tp=4, fsdp=2), None, list(RULES.values()))
    plan = result.parallel
    assert plan is not None and plan.attention_sharded is not None
    # per block, fp32: c_attn's weight and bias and c_proj's weight go from whole to 1/4 (c_proj's bias stays whole)
    saved = ((1600 * 4800 + 4800) + 1600 * 1600) * 4 * 3 // 4
    assert [g.nbytes - s.nbytes for g, s in zip(plan.groups[1:], plan.attention_sharded.groups[1:])] == [saved] * 4
    assert sum(plan.grads) - sum(plan.attention_sharded.grads) == 4 * saved
    (f,) = [f for f in result.findings if f.code == "SL602"]
    after = result.step_model.after([f]).communication
    before = result.step_model.before.communication
    fsdp = {c.op: c.nbytes for c in before.collectives if c.engine == "fsdp"}
    fsdp_after = {c.op: c.nbytes for c in after.collectives if c.engine == "fsdp"}
    assert fsdp["reduce_scatter"] - fsdp_after["reduce_scatter"] == 4 * saved  # one per block
    assert fsdp["all_gather"] - fsdp_after["all_gather"] == 2 * 4 * saved  # forward and backward


def test_the_fix_changes_a_multi_head_attentions_key_value_heads_with_its_heads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    from shapelint.app.cli import main

    path = tmp_path / "config.json"  # a Llama with multi-head attention: num_key_value_heads == num_attention_heads
    path.write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 1600,
                                "intermediate_size": 6400, "num_hidden_layers": 4, "num_attention_heads": 25,
                                "num_key_value_heads": 25, "vocab_size": 32000}, indent=1))
    args = [str(path), "--tp", "4", "--batch", "32", "--seq", "1024", "--no-cache", "--min-step-share", "0"]
    main([*args, "--format", "json", "--no-gemms"])
    (f,) = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["code"] == "SL602"]
    assert f["suggestion"] == {"parameter": "num_attention_heads", "from": 25, "to": 20}
    assert [k["key"] for k in f["details"]["config_together"]] == ["num_key_value_heads"]
    main([*args, "--fix", "--unsafe-fixes"])
    config = json.loads(path.read_text())
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (20, 20)  # the re-lint accepted it


def test_a_config_that_sets_head_dim_itself_is_not_fixed_by_one_edit(tmp_path: Path) -> None:
    """Qwen3-style: ``head_dim`` is a key of its own. 20 heads at --tp 8 become 24 of a
    narrower head_dim; editing the head count alone would build another model than the
    one priced, so --fix leaves it and says what to change."""
    pytest.importorskip("transformers")
    from shapelint.fix.plan import plan

    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2560, "intermediate_size": 6912,
        "num_attention_heads": 20, "num_key_value_heads": 20, "head_dim": 128, "num_hidden_layers": 2,
        "vocab_size": 32000, "max_position_embeddings": 4096}))
    result = lint_target(path, Options(batch=16, seq=1024, tp=8), None, list(RULES.values()))
    (f,) = [f for f in result.findings if f.code == "SL602"]
    assert f.not_fixed is not None and "head_dim: 128" in f.not_fixed
    assert f"heads to {f.suggestion.to} and head_dim to {128 * 20 // f.suggestion.to}" in f.not_fixed
    (p,) = [p for p in plan([result], unsafe=True) if p.finding.code == "SL602"]
    assert not p.fixable and p.reason == f.not_fixed
