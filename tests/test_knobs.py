"""Every reported suggestion names a knob the user owns (``shapelint.locate.knobs``): a
sequence length or a window of GEMMs between activations is not reported; hand-written
attention in a library model names the attention implementation the model class takes,
or says that none reaches it; one module gets one SL302 finding."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from _cli_helpers import run

from shapelint.locate.knobs import SEQUENCE_LIKE, _fused_switch, not_a_knob
from shapelint.model.locations import ConfigLocation
from shapelint.model.records import Finding, Suggestion

#: vit-pytorch's attention over 65 tokens (64 patches and a class token), written by hand
VIT = '''\
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim=1024, heads=16):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = (t.view(b, n, self.heads, -1).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
        att = (q @ k.transpose(-1, -2) * 0.125).softmax(dim=-1)
        return self.out((att @ v).transpose(1, 2).reshape(b, n, c))


def shapelint_model(batch: int = 64):
    return nn.Sequential(Attention(), Attention()), torch.randn(batch, 65, 1024)
'''


def findings(path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    rc, out, err = run([path, "--no-cache", "--format", "json", "--min-step-share", "0"], capsys)
    assert rc in (0, 1), err
    return json.loads(out)["findings"]


def test_names_of_sequences_and_windows() -> None:
    assert all(SEQUENCE_LIKE.search(n) for n in ("size", "window_size", "window_area", "seq_len", "num_patches",
                                                  "max_position_embeddings", "num_buckets"))
    assert not any(SEQUENCE_LIKE.search(n) for n in ("in_features", "out_features", "hidden_size", "num_tokens",
                                                      "head_dim", "out_channels", "intermediate_size"))


def test_a_sequence_length_is_no_knob(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """65 tokens are a misaligned leading dimension of the attention's batched GEMMs
    (SL101 proposed "size: 65 → 72"): the data's length, not a layer size."""
    path = tmp_path / "model.py"
    path.write_text(VIT)
    fs = findings(path, capsys)
    assert [f["code"] for f in fs] == ["SL302"]  # the attention itself is still worth fusing
    assert all(f["suggestion"]["parameter"] != "size" for f in fs)
    assert "attn_implementation" not in fs[0]["message"]  # the user's own code: no library setting


PEGASUS_X = {
    "architectures": ["PegasusXForConditionalGeneration"], "model_type": "pegasus_x", "vocab_size": 96103,
    "d_model": 768, "encoder_layers": 4, "decoder_layers": 4, "encoder_attention_heads": 12,
    "decoder_attention_heads": 12, "encoder_ffn_dim": 3072, "decoder_ffn_dim": 3072, "block_size": 512,
    "num_global_tokens": 128, "stagger_local_blocks": True, "max_position_embeddings": 16384,
    "pad_token_id": 0, "eos_token_id": 1, "decoder_start_token_id": 0,
}


@pytest.mark.slow
def test_library_attention_names_the_implementations_the_class_takes(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(PEGASUS_X, indent=1))
    fs = [f for f in findings(path, capsys) if f["code"] == "SL302"]
    by_module = {f["module"]: f for f in fs}
    assert sorted(by_module) == ["model.decoder.layers.*.encoder_attn", "model.decoder.layers.*.self_attn",
                                 "model.encoder.layers.*.self_attn"]  # one finding per module
    for f in fs:
        assert 'attn_implementation="sdpa"' not in f["message"].replace('refuses attn_implementation="sdpa"', "")
    decoder = by_module["model.decoder.layers.*.self_attn"]
    assert decoder["suggestion"]["to"] == 'attn_implementation="flash_attention_2" or "flex_attention"'
    encoder = by_module["model.encoder.layers.*.self_attn"]
    assert len(encoder["modules"]) == 4  # the staggered and the plain blocks, together
    assert "128x1664 score matrix (and the 128x1152 scores of its other layers)" in encoder["message"]
    assert "PegasusXGlobalLocalAttention writes this attention by hand" in encoder["message"]
    assert "_supports_sdpa is False" in encoder["message"]
    assert encoder["suggestion"]["to"] == "F.scaled_dot_product_attention"


def _finding(parameter: str, value: int, gemms: tuple[int, ...], key: str | None = "x") -> Finding:
    loc = ConfigLocation(key, note="" if key else "no key of config.json has the value")
    return Finding("SL501", "vocab-padding", "error", "m", "msg", gemms, 1.0, 0.5,
                   suggestion=Suggestion(parameter, value, value + 6), location=loc)


def test_a_size_of_gemms_without_a_weight_that_no_key_gives_is_no_knob() -> None:
    """MPNet's 514: the sequence length (8 x 514 tokens), equal to its position table's
    size, in the attention's batched GEMMs (forward, grad_input): no weight, no key."""
    step = {0: SimpleNamespace(phase="forward"), 1: SimpleNamespace(phase="grad_input"),
            2: SimpleNamespace(phase="grad_weight")}
    assert not_a_knob(_finding("vocab_size", 514, (0, 1), key=None), step) is not None  # type: ignore[arg-type]
    assert not_a_knob(_finding("vocab_size", 514, (0, 1, 2), key=None), step) is None  # type: ignore[arg-type]
    assert not_a_knob(_finding("vocab_size", 514, (0, 1)), step) is None  # type: ignore[arg-type]
    assert not_a_knob(_finding("window_size", 14, (0, 1)), step) is not None  # type: ignore[arg-type]
    assert not_a_knob(_finding("batch", 14, (0, 1), key=None), step) is None  # type: ignore[arg-type]
    inference = {0: SimpleNamespace(phase="forward")}
    assert not_a_knob(_finding("vocab_size", 514, (0,), key=None), inference) is None  # type: ignore[arg-type]
    assert not_a_knob(_finding("size", 65, (0,), key=None), inference) is not None  # type: ignore[arg-type]


class _Attend(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.flash = False


def test_a_fused_switch_that_is_off_is_named() -> None:
    """x-transformers' ``Attend.flash`` (``attn_flash=True``) selects F.scaled_dot_product_attention."""
    outer = torch.nn.Sequential(torch.nn.Linear(4, 4), _Attend())
    assert _fused_switch(outer) == "_Attend.flash"
    outer[1].flash = True
    assert _fused_switch(outer) is None


class _Banded(torch.nn.Module):
    """Longformer's sliding-window product of probabilities and values, reduced: the
    probabilities are a view of a (chunks, 256, 3·256+1) tensor, rows 769 apart (taken
    after the cast to bf16, as Longformer pads and views them, so autocast copies nothing)."""

    def forward(self, probs: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.bmm(probs.to(torch.bfloat16)[..., :768], v.to(torch.bfloat16))


class _Scores(torch.nn.Module):
    """Attention scores over T frames, between two activations (SpeechT5's 1023)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.bmm(q, k.transpose(1, 2))


def _misaligned(module: torch.nn.Module, *inputs: torch.Tensor) -> dict[int, list]:  # type: ignore[type-arg]
    from shapelint.hardware import resolve
    from shapelint.physics.alignment import misaligned_leading_dims
    from shapelint.pipeline.run import trace

    hw = resolve("h100")
    cap, _ = trace(lambda: (module, tuple(x.requires_grad_() for x in inputs)))
    out: dict[int, list] = {}  # type: ignore[type-arg]
    for g in cap.gemms:
        for v in misaligned_leading_dims(g, hw):
            out.setdefault(v, []).append(g)
    return out


def test_which_misaligned_leading_dims_no_knob_aligns() -> None:
    """The recall benchmark's no-knob class (issue 26): a view's row stride the algorithm
    sets (Longformer's 769 = 3·256 + 1, none of m, n, k), a frame count of GEMMs between
    activations (SpeechT5's 1023); a layer's size has its knob, also where it is only a
    gradient's operand."""
    from shapelint.locate.knobs import misalignment_without_knob

    banded = _misaligned(_Banded(), torch.randn(48, 256, 769), torch.randn(48, 768, 64))
    assert set(banded) == {769} and {(g.m, g.n, g.k) for g in banded[769] if g.phase == "forward"} == {(256, 64, 768)}
    assert "row stride of a view" in (misalignment_without_knob(769, banded[769]) or "")
    scores = _misaligned(_Scores(), torch.randn(96, 1023, 64), torch.randn(96, 1023, 64))
    assert set(scores) == {1023} and {g.phase for g in scores[1023]} == {"forward", "grad_input"}
    assert "sequence, window or position size" in (misalignment_without_knob(1023, scores[1023]) or "")
    assert "sequence" in (misalignment_without_knob(1023, scores[1023], {768, 3072}) or "")
    heads = _misaligned(_Scores(), torch.randn(96, 512, 100), torch.randn(96, 512, 100))
    assert set(heads) == {100}
    assert misalignment_without_knob(100, heads[100], {1200, 4800}) is None  # 12 heads of 100: the head count sets it
    head = _misaligned(torch.nn.Linear(64, 1023), torch.randn(4096, 64))
    assert misalignment_without_knob(1023, head[1023]) is None  # out_features
    assert misalignment_without_knob(1023, [g for g in head[1023] if g.phase == "grad_weight"]) is None
    assert misalignment_without_knob(1023, []) is None
