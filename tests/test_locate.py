"""Findings on a Hugging Face config point at the key that sets the size (its line in
the config), with transformers' line kept as context; a finding no key explains says
so and is shown at ``model_type``. The configs are the corpus's (tests/corpus), at
two layers: the depth is edited in place, so every key keeps its line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from _cli_helpers import run

from shapelint.load.json_tokens import int_keys as json_int_keys
from shapelint.locate.config_keys import explain

pytest.importorskip("transformers")

#: on the worker that runs tests/test_models_corpus.py (pytest-xdist): these architectures'
#: transformers modules are imported there already
pytestmark = [pytest.mark.xdist_group("corpus"), pytest.mark.slow]

CORPUS = Path(__file__).resolve().parent / "corpus"
DEPTH_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers", "encoder_layers", "decoder_layers")
ARGS = ("--format", "json", "--min-step-share", "0")


def variant(tmp_path: Path, name: str, **values: Any) -> Path:
    """The corpus config ``name`` at 2 layers with ``values`` set (the first occurrence
    of each key), every line where it was."""
    text = (CORPUS / name / "config.json").read_text()
    for key in DEPTH_KEYS:
        text = re.sub(rf'("{key}":\s*)\d+', r"\g<1>2", text)
    for key, value in values.items():
        text, n = re.subn(rf'("{key}":\s*)[^,\n]+', rf"\g<1>{json.dumps(value)}", text, count=1)
        assert n == 1, key
    path = tmp_path / name / "config.json"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def lint(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict[str, Any]]:
    rc, out, err = run([path, *ARGS, *extra], capsys)
    assert rc in (0, 1), err
    return json.loads(out)["findings"]


def only(findings: list[dict[str, Any]], code: str, module: str) -> dict[str, Any]:
    (f,) = [f for f in findings if f["code"] == code and f["module"] == module]
    return f


def at_key(f: dict[str, Any], path: Path, key: str, line: int) -> None:
    """The finding is reported at ``key`` on ``line`` of ``path``, and that line holds the key."""
    assert f["source"] == {"file": str(path), "line": line}
    assert f["details"]["config_key"] == key
    assert f'"{key.rsplit(".", 1)[-1]}"' in path.read_text().splitlines()[line - 1]


def test_bert_vocabulary_at_vocab_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = variant(tmp_path, "bert-base-uncased")
    f = only(lint(path, capsys), "SL501", "cls.predictions.decoder")
    at_key(f, path, "vocab_size", 18)
    assert f["suggestion"] == {"parameter": "vocab_size", "from": 30522, "to": 30528}
    d = f["details"]
    assert d["code_parameter"] == "out_features" and d["config_formula"] == "vocab_size"
    assert d["config_keys"] == [{"key": "vocab_size", "line": 18, "value": 30522}]
    assert d["library_source"]["file"].endswith("transformers/models/bert/modeling_bert.py")
    rc, out, _ = run([path, "--min-step-share", "0"], capsys)
    assert f"SL501 error   vocab-padding {path}:18" in out
    assert "fix: vocab_size: 30522 → 30528" in out
    assert re.search(r"library line: transformers/models/bert/modeling_bert\.py:\d+ \(out_features\)", out)


def test_gpt2_vocabulary_and_a_head_dim_from_two_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = variant(tmp_path, "gpt2")
    at_key(only(lint(path, capsys), "SL501", "lm_head"), path, "vocab_size", 19)
    # 1000 wide, 10 heads: head_dim 100, a value no key holds; n_embd / n_head gives it
    wide = variant(tmp_path / "wide", "gpt2", n_embd=1000, n_head=10)
    f = only(lint(wide, capsys), "SL301", "transformer.h.*.attn")
    at_key(f, wide, "n_embd", 14)
    assert f["suggestion"] == {"parameter": "head_dim", "from": 100, "to": 104}
    assert f["details"]["config_formula"] == "n_embd / n_head"
    assert f["details"]["config_keys"] == [{"key": "n_embd", "line": 14, "value": 1000},
                                           {"key": "n_head", "line": 15, "value": 10}]


def test_llama_mlp_and_vocabulary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = variant(tmp_path, "llama-2-7b", intermediate_size=11001, vocab_size=32001)
    findings = lint(path, capsys)
    for module, param in (("gate_proj", "out_features"), ("up_proj", "out_features"), ("down_proj", "in_features")):
        f = only(findings, "SL101", f"model.layers.*.mlp.{module}")
        at_key(f, path, "intermediate_size", 11)
        assert f["suggestion"] == {"parameter": "intermediate_size", "from": 11001, "to": 11008}
        assert f["details"]["code_parameter"] == param
        assert f["details"]["library_source"]["file"].endswith("transformers/models/llama/modeling_llama.py")
    at_key(only(findings, "SL501", "lm_head"), path, "vocab_size", 20)


def test_llama_tensor_parallel_size_is_the_key_split_over_gpus(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    # 11000 / 8 = 1375 per GPU: misaligned on the shard though aligned whole (SL601's, since
    # the multi-GPU rules); the key holds the whole size
    path = variant(tmp_path, "llama-2-7b", intermediate_size=11000)
    f = only(lint(path, capsys, "--tp", "8"), "SL601", "model.layers.*.mlp.gate_proj")
    at_key(f, path, "intermediate_size", 11)
    assert f["suggestion"] == {"parameter": "intermediate_size", "from": 11000, "to": 11008}
    assert f["details"]["config_formula"] == "intermediate_size / tp 8"


def test_t5_feed_forward_at_d_ff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = variant(tmp_path, "flan-t5-base", d_ff=2047)
    findings = lint(path, capsys)
    for stack in ("encoder", "decoder"):
        f = only(findings, "SL101", f"{stack}.block.*.layer.*.DenseReluDense.wo")
        at_key(f, path, "d_ff", 6)
        assert f["suggestion"] == {"parameter": "d_ff", "from": 2047, "to": 2048}
        assert f["details"]["library_source"]["file"].endswith("transformers/models/t5/modeling_t5.py")


def test_bart_encoder_and_decoder_keys_go_to_their_own_stack(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = variant(tmp_path, "bart-base", encoder_ffn_dim=3071, decoder_ffn_dim=3071)
    findings = lint(path, capsys)
    at_key(only(findings, "SL101", "encoder.layers.*.fc1"), path, "encoder_ffn_dim", 18)
    at_key(only(findings, "SL101", "decoder.layers.*.fc1"), path, "decoder_ffn_dim", 12)


#: opus-mt-en-de's config as published (both vocabulary keys), at one layer each
MARIAN = """{
  "architectures": ["MarianMTModel"],
  "model_type": "marian",
  "vocab_size": 58101,
  "decoder_vocab_size": 58101,
  "d_model": 64,
  "encoder_layers": 1,
  "decoder_layers": 1,
  "encoder_attention_heads": 4,
  "decoder_attention_heads": 4,
  "encoder_ffn_dim": 128,
  "decoder_ffn_dim": 128,
  "max_position_embeddings": 64,
  "pad_token_id": 58100,
  "decoder_start_token_id": 58100,
  "eos_token_id": 0,
  "share_encoder_decoder_embeddings": true
}
"""


def test_one_vocabulary_under_two_keys_is_changed_under_both(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Marian sizes its output layer by ``decoder_vocab_size`` and its shared embedding by
    ``vocab_size``: padding one alone would leave the LM head misaligned (or untie it)."""
    path = tmp_path / "marian" / "config.json"
    path.parent.mkdir()
    path.write_text(MARIAN)
    f = only(lint(path, capsys, "--batch", "2", "--seq", "32"), "SL501", "lm_head")
    at_key(f, path, "vocab_size", 4)
    assert f["suggestion"] == {"parameter": "vocab_size", "from": 58101, "to": 58104}
    assert f["details"]["config_together"] == [{"key": "decoder_vocab_size", "line": 5, "value": 58101}]
    assert "config_also" not in f["details"]
    _, out, _ = run([path, "--min-step-share", "0", "--batch", "2", "--seq", "32"], capsys)
    assert "with decoder_vocab_size (line 5): the same vocabulary, changed with it" in out
    _, out, _ = run([path, "--min-step-share", "0", "--batch", "2", "--seq", "32", "--diff", "--unsafe-fixes"],
                    capsys)
    assert '-  "vocab_size": 58101,\n-  "decoder_vocab_size": 58101,\n+  "vocab_size": 58104,\n' \
           '+  "decoder_vocab_size": 58104,' in out
    assert path.read_text() == MARIAN  # --diff writes nothing


def test_clip_key_of_the_modules_own_sub_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = variant(tmp_path, "clip-vit-base-patch32", intermediate_size=2047)  # text_config's (line 16)
    f = only(lint(path, capsys), "SL101", "text_model.encoder.layers.*.mlp.fc1")
    at_key(f, path, "text_config.intermediate_size", 16)
    assert f["suggestion"] == {"parameter": "intermediate_size", "from": 2047, "to": 2048}


def test_finding_no_key_explains_is_shown_at_model_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # BLOOM's attention has no SDPA path in transformers 5 (CodeGen's gained one in 5.2x)
    path = variant(tmp_path, "bloom-560m")
    f = only(lint(path, capsys), "SL302", "transformer.h.*.self_attention")
    assert f["source"] == {"file": str(path), "line": 5}  # "model_type": "bloom"
    assert f["details"]["config_key"] is None
    assert "no key of config.json changes it" in f["details"]["config_note"]
    assert f["details"]["library_source"]["file"].endswith("transformers/models/bloom/modeling_bloom.py")
    rc, out, _ = run([path, "--format", "sarif", "--min-step-share", "0"], capsys)
    (res,) = [r for r in json.loads(out)["runs"][0]["results"] if r["ruleId"] == "SL302"]
    region = res["locations"][0]["physicalLocation"]
    assert region["region"] == {"startLine": 5} and region["artifactLocation"]["uri"].endswith("config.json")


# -- the matching itself -----------------------------------------------------------


def test_json_keys_nested_and_in_lists() -> None:
    text = '{\n  "a": 1,\n  "text_config": {\n    "hidden_size": 512,\n    "sizes": [\n      3,\n      5\n    ]\n  },\n' \
           '  "f": 1.5,\n  "s": "x: 7",\n  "n": null\n}\n'
    assert json_int_keys(text) == {"a": (1, 2), "text_config.hidden_size": (512, 4), "text_config.sizes[0]": (3, 6),
                                   "text_config.sizes[1]": (5, 7)}
    assert json_int_keys("[1, 2]") is None and json_int_keys('{"a": ') is None


def test_explain_prefers_names_and_says_when_nothing_explains() -> None:
    keys = {"hidden_size": (768, 3), "max_position_embeddings": (1000, 4), "pad_token_id": (1000, 5),
            "num_attention_heads": (12, 6), "head_dim": (64, 7), "projection_dim": (768, 8), "bos_token_id": (100, 9)}
    e = explain(768, "out_features", "SL101", "fc", keys)
    assert e is not None and e.keys == ("hidden_size",) and e.others == ("projection_dim",)
    assert explain(64, "head_dim", "SL301", "attn", keys).keys == ("head_dim",)  # type: ignore[union-attr]
    # a sequence length or a token id holding the value is a coincidence, not a cause
    assert explain(1000, "out_features", "SL101", "fc", keys) is None
    # 12 × 64 = 768 is hidden_size itself; 768 / 12 = 64 is head_dim itself: products only when no key holds it
    assert explain(100, "out_features", "SL101", "fc", keys) is None
    derived = explain(12 * 100, "out_features", "SL101", "fc", {**keys, "head_dim": (100, 7)})
    assert derived is not None and derived.formula == "num_attention_heads × head_dim" and derived.derived
