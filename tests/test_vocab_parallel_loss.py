"""A column-parallel LM head under --tp: the vocabulary-parallel loss's three forward
all-reduces of one fp32 value per token (Megatron-LM's vocab_parallel_cross_entropy,
DTensor's loss_parallel) and the all-reduce of the head's input gradient, priced from
the collectives table."""

from __future__ import annotations

from pathlib import Path

import pytest

from shapelint.check.run import builtin_rules
from shapelint.model.parallel import VocabParallelHead
from shapelint.pipeline.result import Options
from shapelint.pipeline.run import lint_target

pytest.importorskip("transformers")

GPT2 = Path(__file__).parent / "corpus" / "gpt2" / "config.json"


def _lint(**layout: object):
    opts = Options(batch=8, seq=1024, **layout)  # type: ignore[arg-type]
    return lint_target(GPT2, opts, None, [r for r in builtin_rules() if r.code == "SL501"])


def test_gpt2_lm_head_at_tp2_pays_the_loss_and_input_gradient_all_reduces() -> None:
    r = _lint(tp=2)
    assert r.parallel is not None and r.parallel.vocab_heads == (VocabParallelHead("lm_head", 8192, 768),)
    comm = r.step_time.communication
    vocab = [c for c in comm.collectives if c.engine == "tp_vocab"]
    table = r.hardware.collectives
    loss_ms = 3 * table.us("all_reduce", 8192 * 4, 2) * 1e-3  # 32 KiB each: the table's latency floor
    grad_ms = table.us("all_reduce", 8192 * 768 * 4, 2) * 1e-3  # fp32, the parameters' dtype
    assert [(c.op, c.count, c.nbytes) for c in vocab] == [("all_reduce", 3, 3 * 8192 * 4),
                                                            ("all_reduce", 1, 8192 * 768 * 4)]
    assert [c.ms for c in vocab] == pytest.approx([loss_ms, grad_ms], rel=1e-9)
    assert all(c.exposed_ms == c.ms for c in vocab)  # nothing overlaps them
    tp = [c for c in comm.collectives if c.engine == "tp"]
    assert comm.exposed_ms == pytest.approx(sum(c.exposed_ms for c in tp) + loss_ms + grad_ms, rel=1e-9)
    assert 0.2 < loss_ms < 0.3 and 0.05 < grad_ms < 0.2  # 3 x 88 us; 24 MiB at about 200 GB/s


def test_sequence_parallel_gathers_the_heads_input_and_reduce_scatters_its_gradient() -> None:
    vocab = [c for c in _lint(tp=2, sp=True).step_time.communication.collectives if c.engine == "tp_vocab"]
    assert [(c.op, c.count, c.nbytes) for c in vocab] == [
        ("all_reduce", 3, 3 * 8192 * 4), ("all_gather", 1, 8192 * 768 * 2), ("reduce_scatter", 1, 8192 * 768 * 4)]


def test_one_gpu_and_data_parallel_alone_have_no_vocab_parallel_loss() -> None:
    r = _lint(dp=2)
    assert r.parallel is not None and r.parallel.vocab_heads == ()
    assert not [c for c in r.step_time.communication.collectives if c.engine == "tp_vocab"]
