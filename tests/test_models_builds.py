"""Real models that did not lint at the defaults before issue 26 (tests/corpus holds
their published configs; tests/test_models_corpus.py checks their FLOPs against
FlopCounterMode): the inputs each gets, the random steps switched off, the host reads
answered, at 2 layers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _cli_helpers import run

from shapelint.load.hf_config import build_config
from shapelint.load.hf_inputs import special_ids
from shapelint.load.run import load

pytest.importorskip("transformers")

pytestmark = [pytest.mark.xdist_group("corpus"), pytest.mark.slow]

CORPUS = Path(__file__).resolve().parent / "corpus"
BATCH, SEQ = 2, 64


def test_musicgen_gets_labels_over_its_codebooks(small_corpus: dict[str, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    loaded = load(small_corpus["musicgen-small"], batch=BATCH, seq=SEQ)
    # labels (batch, seq, codebooks); the model makes its (batch x codebooks, seq) decoder ids from them
    assert tuple(loaded.inputs["labels"].shape) == (BATCH, SEQ, 4)
    assert "decoder_input_ids" not in loaded.inputs
    rc, out, _ = run([small_corpus["musicgen-small"], "--batch", BATCH, "--seq", SEQ, "--format", "json",
                      "--no-cache"], capsys)
    summary = json.loads(out)["summary"]
    assert rc in (0, 1) and summary["trace_notes"] == []  # trained on its own loss, labels accepted
    # the decoder's LM heads: one per codebook, 4 x (batch x seq rows, vocab 2048, hidden 1024) forward
    heads = [g for g in json.loads(out)["gemms"] if g["phase"] == "forward" and g["n"] == 2048 and g["k"] == 1024]
    assert len(heads) == 4 and {g["m"] for g in heads} == {BATCH * SEQ}


def test_random_steps_are_off_where_the_config_class_defaults_them_on() -> None:
    doc = json.loads((CORPUS / "hubert-base-ls960" / "config.json").read_text())
    assert "mask_time_prob" not in doc and "layerdrop" not in doc  # HubertConfig: 0.05 and 0.1 by default
    _, config = build_config(doc, "hubert")
    assert (config.mask_time_prob, config.layerdrop) == (0.0, 0.0)
    doc = json.loads((CORPUS / "speecht5-asr" / "config.json").read_text())
    _, config = build_config(doc, "speecht5")
    assert (config.mask_time_prob, config.encoder_layerdrop, config.decoder_layerdrop) == (0.0, 0.0, 0.0)


def test_token_ids_avoid_special_ids_and_are_the_same_every_time(small_corpus: dict[str, Path]) -> None:
    first = load(small_corpus["fsmt-wmt19-en-de"], batch=8, seq=1024).inputs
    again = load(small_corpus["fsmt-wmt19-en-de"], batch=8, seq=1024).inputs
    ids = first["input_ids"]
    assert not isinstance(ids, torch._subclasses.fake_tensor.FakeTensor)  # data: real
    assert torch.equal(ids, again["input_ids"])
    _, config = build_config(json.loads((CORPUS / "fsmt-wmt19-en-de" / "config.json").read_text()), "fsmt")
    specials = special_ids(config)
    assert 1 in specials  # FSMT's pad id: among 8192 random ids it would appear with probability 18%
    assert not torch.isin(ids, torch.tensor(specials)).any()
    assert int(ids.min()) >= 0 and int(ids.max()) < 42024


def test_fsmt_padding_check_reads_the_real_inputs(small_corpus: dict[str, Path],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run([small_corpus["fsmt-wmt19-en-de"], "--batch", BATCH, "--seq", SEQ, "--format", "json",
                      "--no-cache"], capsys)
    # `if not padding_mask.any():` reads a mask of the real input ids: exact, nothing assumed
    assert rc in (0, 1) and json.loads(out)["summary"]["host_reads"] == []


def test_longformer_global_attention_check_is_answered_and_listed(small_corpus: dict[str, Path],
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run([small_corpus["longformer-base-4096"], "--batch", BATCH, "--seq", SEQ, "--format", "json",
                      "--no-cache"], capsys)
    assert rc in (0, 1)
    reads = json.loads(out)["summary"]["host_reads"]
    assert {"file": "transformers/models/longformer/modeling_longformer.py",
            "source": "is_global_attn = is_index_global_attn.flatten().any().item()", "answer": "False"} in [
        {k: r[k] for k in ("file", "source", "answer")} for r in reads]


TINY_LLAVA = {
    "architectures": ["LlavaForConditionalGeneration"], "model_type": "llava", "image_token_index": 250,
    "image_seq_length": 4, "vision_feature_select_strategy": "default", "vision_feature_layer": -2,
    "projector_hidden_act": "gelu",
    "vision_config": {"model_type": "clip_vision_model", "hidden_size": 64, "intermediate_size": 128,
                      "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 28, "patch_size": 14,
                      "projection_dim": 64},
    "text_config": {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
                    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
                    "max_position_embeddings": 256},
}


def test_a_vision_language_model_gets_one_images_tokens_per_row(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_LLAVA))
    ids = load(path, batch=BATCH, seq=16).inputs["input_ids"]
    assert (ids[:, :4] == 250).all() and not (ids[:, 4:] == 250).any()
    rc, out, _ = run([path, "--batch", BATCH, "--seq", 16, "--format", "json", "--no-cache"], capsys)
    summary = json.loads(out)["summary"]
    # get_placeholder_mask's check counts real image tokens against the features: exact, not assumed
    assert rc in (0, 1) and summary["host_reads"] == []
    # the projector runs on 2 images x 4 patch features (CLS dropped), 64 -> 64
    gemms = json.loads(out)["gemms"]
    assert any(g["module"] == "model.multi_modal_projector.linear_1" and g["phase"] == "forward"
               and (g["m"], g["n"], g["k"]) == (BATCH * 4, 64, 64) for g in gemms)
    rc, _, err = run([path, "--batch", BATCH, "--seq", 3, "--no-cache"], capsys)
    assert rc == 2 and "one image's 4 image tokens do not fit in a sequence of 3 tokens: give --seq more than 4" in err
