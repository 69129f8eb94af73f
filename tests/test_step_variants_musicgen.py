"""``--verify --step`` on a composite config with two text configs (MusicGen: a T5 text
encoder and a decoder over parallel codebooks): the real model is built and trained on
the CPU at a tiny size, with a padded vocabulary sliced back on every codebook head."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from shapelint.load.real import build
from shapelint.measure import step_variants as variants
from shapelint.model.records import Finding, Slice, Suggestion

CORPUS = Path(__file__).resolve().parent / "corpus" / "musicgen-small" / "config.json"
#: the tokenizer's codebook size, and the padded size the edited copy was built with
VOCAB, PADDED = 2049, 2056
BATCH, SEQ = 2, 16


def tiny_musicgen(folder: Path) -> Path:
    """musicgen-small's config at a tiny width, its decoder vocabulary already padded
    (the *after* copy ``--verify --step`` builds)."""
    config = json.loads(CORPUS.read_text())
    config["text_encoder"].update(vocab_size=1000, d_model=32, d_ff=64, d_kv=8, num_layers=1, num_heads=4)
    config["decoder"].update(vocab_size=PADDED, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                             ffn_dim=64, max_position_embeddings=64)
    path = folder / "config.json"
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def padded_vocab(heads: tuple[str, ...]) -> Finding:
    return Finding(code="SL501", name="vocab-padding", severity="error", module=heads[0], message="",
                   gemms=(), est_ms=1.0, est_ms_after=0.5, modules=heads,
                   suggestion=Suggestion("vocab_size", VOCAB, PADDED), vocab=VOCAB,
                   slices=(Slice(BATCH * SEQ, VOCAB, PADDED, 2),))


@pytest.mark.slow  # builds MusicGen for real (T5, EnCodec, the decoder): about 6 s on 2 cores
def test_a_padded_vocabulary_is_sliced_on_every_codebook_head_and_the_step_trains(tmp_path: Path) -> None:
    built = build(tiny_musicgen(tmp_path), device="cpu", batch=BATCH, seq=SEQ)
    model = built.model
    assert type(model).__name__ == "MusicgenForConditionalGeneration"
    heads = tuple(f"decoder.lm_heads.{i}" for i in range(4))
    assert [model.get_submodule(h).out_features for h in heads] == [PADDED] * 4
    # the composite config refuses a bare get_text_config() (two text configs)
    assert variants.slice_padded_logits(built, [padded_vocab(heads[:1])]) == heads
    assert model.config.decoder.vocab_size == VOCAB  # the loss reads the tokenizer's size
    assert model.config.text_encoder.vocab_size == 1000  # the encoder's is not touched
    assert tuple(built.inputs["labels"].shape) == (BATCH, SEQ, 4)  # one label per codebook
    # the step trains the copy on the original's inputs: labels below the tokenizer's size
    labels = torch.randint(0, VOCAB, (BATCH, SEQ, 4), generator=torch.Generator().manual_seed(0))
    out = model(**{**built.inputs, "labels": labels})
    assert tuple(out.logits.shape) == (BATCH * 4, SEQ, VOCAB) and torch.isfinite(out.loss)
    out.loss.backward()  # one training step's backward, through the sliced heads
    grad = model.get_submodule(heads[3]).weight.grad
    assert grad is not None and grad.shape == (PADDED, 32) and not grad[VOCAB:].any()


@pytest.mark.slow  # lints and builds MusicGen, then trains it on the CPU: about 8 s on 2 cores
def test_verify_step_trains_musicgen_on_the_cpu(tmp_path: Path) -> None:
    """The whole ``--verify --step`` path on the CPU: lint, build the real model with the
    inputs the lint traced (codebook labels), and time real training steps."""
    from shapelint.check.run import builtin_rules
    from shapelint.hardware import resolve
    from shapelint.measure import step as vs
    from shapelint.measure import step_blocks as blocks
    from shapelint.pipeline.result import Options
    from shapelint.pipeline.run import lint_target

    r = lint_target(tiny_musicgen(tmp_path), Options(dtype="fp32", batch=BATCH, seq=SEQ), resolve("h100"),
                    builtin_rules())
    assert r.step_time is not None
    v = vs.verify_result(r, vs.RunOptions(device="cpu", schedule=blocks.Schedule(rounds=1, steps=1, warmup=1))
                         ).to_json()
    assert v["status"] == "measured" and v["device"] == "cpu" and v["steps"] == 1
    assert v["measured_ms"] > 0 and v["est_ms"] == round(r.step_time.ms, 4)
