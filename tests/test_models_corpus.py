"""The real-model corpus (tests/corpus: Hugging Face configs at their published
hyperparameters), each built at small depth: it lints with exit 0 or 1, its GEMM
FLOPs equal FlopCounterMode's on the same step, and its attention is recorded as
the kernel a GPU runs."""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from shapelint.app.cli import main
from shapelint.capture.precision import to_precision
from shapelint.capture.run import capture
from shapelint.load.hf_inputs import token_count
from shapelint.load.run import load
from shapelint.model.records import Gemm

pytest.importorskip("transformers")

#: one pytest-xdist worker runs the whole corpus: each architecture's transformers
#: modules are imported once (about 9 s for the 44 models), not once per worker
#: (tests/test_models_tp.py and tests/test_locate.py build corpus models too; they join the group)
pytestmark = [pytest.mark.xdist_group("corpus"), pytest.mark.slow]

CORPUS = Path(__file__).resolve().parent / "corpus"
MODELS = sorted(p.name for p in CORPUS.iterdir() if (p / "config.json").is_file())
BATCH, SEQ, DEPTH = 2, 64, 2

#: config keys that set a depth, shrunk to DEPTH to keep the suite fast
DEPTH_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers", "decoder_layers",
              "num_decoder_layers")


def shrink(doc: dict[str, Any]) -> dict[str, Any]:
    """The config at DEPTH layers (per stack, per stage, per sub-config)."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            out[key] = shrink(value)
        elif key in DEPTH_KEYS and isinstance(value, int):
            out[key] = min(value, DEPTH)
        elif key == "depths":  # Swin, ConvNeXt, ResNet: blocks per stage
            out[key] = [1] * len(value)
        elif key == "attention_window" and isinstance(value, list):  # Longformer, LED: one per layer
            out[key] = value[:DEPTH]
        elif key == "attention_types":  # GPT-Neo: [[pattern, repeats]] must cover every layer
            out[key] = [[value[0][0], DEPTH // len(value[0][0])]]
        else:
            out[key] = value
    return out


def write_small(root: Path) -> dict[str, Path]:
    """Every corpus config at DEPTH layers, ``root/<model>/config.json``."""
    paths = {}
    for name in MODELS:
        (root / name).mkdir()
        paths[name] = root / name / "config.json"
        paths[name].write_text(json.dumps(shrink(json.loads((CORPUS / name / "config.json").read_text())), indent=2))
    return paths


@pytest.fixture
def small(small_corpus: dict[str, Path]) -> dict[str, Path]:
    """conftest.py's session-wide copy: tests/test_models_tp.py traces the same files,
    so :func:`traced` captures each model once for both modules."""
    return small_corpus


def test_the_corpus_has_30_architectures_and_more() -> None:
    types = {json.loads((CORPUS / m / "config.json").read_text())["model_type"] for m in MODELS}
    assert len(MODELS) >= 40 and len(types) >= 35


# -- FlopCounterMode on the same step ----------------------------------------------------

def _sdpa_flops(q: Any, k: Any, v: Any, *_: Any, **__: Any) -> int:
    return flop_counter.sdpa_flop_count(q, k, v)


def _sdpa_backward_flops(grad: Any, q: Any, k: Any, v: Any, *_: Any, **__: Any) -> int:
    return flop_counter.sdpa_backward_flop_count(grad, q, k, v)


#: shapelint's attention ops counted with FlopCounterMode's own SDPA formulas
ATTENTION_FLOPS = {
    torch.ops.shapelint.fused_attention: _sdpa_flops,
    torch.ops.shapelint.fused_attention_backward: _sdpa_backward_flops,
}


@functools.cache
def traced(path: Path, batch: int | None = BATCH, seq: int | None = SEQ) -> tuple[tuple[Gemm, ...], dict[str, int]]:
    """The capture and FlopCounterMode's per-op totals, from one run of the step
    (once per model: several tests, here and in tests/test_models_tp.py, read them;
    the records are frozen and kept in a tuple). ``batch``/``seq`` None: the loader's
    defaults (``benchmarks/real_corpus.py``)."""
    loaded = load(path, batch=batch, seq=seq)
    with loaded.fake_mode:
        inputs = to_precision(loaded.model, loaded.inputs, "bf16")
        counter = FlopCounterMode(display=False, custom_mapping=ATTENTION_FLOPS)
        with counter:
            cap = capture(loaded.model, inputs, precision="bf16", defined_at=loaded.defined_at)
    counts = {str(op).split(".")[-1]: n for op, n in counter.get_flop_counts()["Global"].items()}
    return tuple(cap.gemms), counts


def _packet(g: Gemm) -> str:
    return {"sdpa": "fused_attention"}.get(g.op.split(".")[0], g.op.split(".")[0])


def expected_counter(gemms: Sequence[Gemm]) -> dict[str, int]:
    """What FlopCounterMode reports for these GEMMs, per op: the same FLOPs, except
    where the counter is known wrong. It counts a grouped (or depthwise) convolution's
    weight gradient groups times over (``conv_backward_flop`` multiplies every input
    channel by every output channel), and it does not count ``_grouped_mm`` at all
    (mixture-of-experts layers)."""
    out: Counter[str] = Counter()
    for g in gemms:
        name = _packet(g)
        if g.op.startswith("sdpa.") and g.phase != "forward":
            name = "fused_attention_backward"
        if name == "_grouped_mm":
            continue
        groups = int(dict(g.extra).get("groups", 1)) if g.op == "convolution_backward.grad_weight" else 1
        out[name] += g.flops * groups
    return dict(out)


@pytest.mark.parametrize("name", MODELS)
def test_corpus_model_flops_equal_flop_counter(name: str, small: dict[str, Path]) -> None:
    gemms, counts = traced(small[name])
    assert gemms
    assert counts == expected_counter(gemms)
    grouped = [g for g in gemms if g.op == "_grouped_mm"]
    assert "_grouped_mm" not in counts and (not grouped or all(g.flops > 0 for g in grouped))


@pytest.mark.parametrize("name", MODELS)
def test_corpus_model_lints_with_exit_0_or_1(name: str, small: dict[str, Path], capsys: pytest.CaptureFixture[str]
                                             ) -> None:
    code = main([str(small[name]), "--batch", str(BATCH), "--seq", str(SEQ), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code in (0, 1) and code == (1 if doc["findings"] else 0)
    assert doc["summary"]["gemm_count"] == len(doc["gemms"]) > 0


# -- how the GPU runs them ------------------------------------------------------------------

def attention(gemms: Sequence[Gemm]) -> Counter[tuple[str, bool, int, int]]:
    """(kernel, causal, head dim of QKᵀ, head dim of PV) of every forward attention."""
    return Counter((str(dict(g.extra)["kernel"]), bool(dict(g.extra)["is_causal"]), g.k, pv.n)
                   for g, pv in zip(*(([x for x in gemms if x.op == op]) for op in ("sdpa.qk", "sdpa.pv"))))


@pytest.mark.parametrize(("name", "kernel", "causal", "d_qk", "d_v"), [
    # causal LMs: SDPA is_causal=True without a mask, as transformers calls it on a GPU
    ("llama-2-7b", "cudnn", True, 128, 128),
    ("mistral-7b", "cudnn", True, 128, 128),  # the 4096 window is longer than the sequence
    # head_dim 256: cuDNN's sm90 backward takes (256, 256)
    ("gemma-2b", "cudnn", True, 256, 256),
    # DeepSeek's MLA: q/k 128 + 64 rope dims, v 128; fused, in bf16
    ("deepseek-v2-lite", "cudnn", True, 192, 128),
    # a relative-position bias that needs a gradient: cuDNN and flash refuse it; the
    # cross-attentions' zero bias needs none: cuDNN (as measured on an H100 for T5-base)
    ("t5-small", "efficient,cudnn", False, 64, 64),
    ("swin-tiny-patch4-window7-224", "efficient", False, 32, 32),
    # ALiBi: an additive bias needing no gradient, which cuDNN takes
    ("falcon-rw-1b", "cudnn", False, 64, 64),
    # attention dropout 0.1: cuDNN, as torch 2.11 runs it (docs/attention-kernels.md)
    ("bert-base-uncased", "cudnn", False, 64, 64),
    ("gpt2", "cudnn", True, 64, 64),
    ("vit-base-patch16-224", "cudnn", False, 64, 64),
])
def test_attention_is_the_gpu_kernel(name: str, kernel: str, causal: bool, d_qk: int, d_v: int,
                                     small: dict[str, Path]) -> None:
    gemms, _ = traced(small[name])
    calls = attention(gemms)
    assert set(calls) == {(k, causal, d_qk, d_v) for k in kernel.split(",")}
    assert all(g.dtype == "bf16" for g in gemms if g.op.startswith("sdpa."))


@pytest.mark.parametrize(("name", "per_layer", "rest"), [
    # 7 Linear x 3 GEMMs + 7 attention GEMMs a layer; the LM head's 3
    ("llama-2-7b", 7 * 3 + 7, 3),
    # GPT-2: c_attn, c_proj, c_fc, mlp c_proj x 3 + 7; tied LM head 3
    ("gpt2", 4 * 3 + 7, 3),
    # GPT-Neo has no SDPA path: 6 Linear x 3, and eager QKᵀ and PV (bmm's: 2 forward, 4 backward)
    ("gpt-neo-125m", 6 * 3 + 2 + 4, 3),
])
def test_gemm_counts(name: str, per_layer: int, rest: int, small: dict[str, Path]) -> None:
    gemms, _ = traced(small[name])
    assert len(gemms) == DEPTH * per_layer + rest


def test_whisper_takes_its_30_second_window(small: dict[str, Path]) -> None:
    loaded = load(small["whisper-small"], batch=BATCH, seq=SEQ)
    assert tuple(loaded.inputs["input_features"].shape) == (BATCH, 80, 3000)
    assert tuple(loaded.inputs["decoder_input_ids"].shape) == (BATCH, SEQ)


def test_clip_takes_text_and_images_each_at_its_own_length(small: dict[str, Path]) -> None:
    loaded = load(small["clip-vit-base-patch32"], batch=BATCH, seq=SEQ * 4)
    assert tuple(loaded.inputs["input_ids"].shape) == (BATCH, 77)  # CLIP's text positions
    assert tuple(loaded.inputs["pixel_values"].shape) == (BATCH, 3, 224, 224)


def test_after_softmax_marks_only_the_attention_matmul(small: dict[str, Path]) -> None:
    gemms, _ = traced(small["gpt-neo-125m"])
    marked = [g for g in gemms if g.role == "after_softmax"]
    # the PV bmm of each layer's eager attention, nothing downstream of it
    assert [(g.op, g.phase) for g in marked] == [("bmm", "forward")] * DEPTH
    router = traced(small["mixtral-8x7b"])[0]
    assert not [g for g in router if g.role == "after_softmax"]


@pytest.mark.parametrize(("name", "tokens"), [
    ("whisper-small", None),  # speech features: no token dimension in the input
    ("vit-base-patch16-224", None),
    ("t5-small", BATCH * SEQ),
    ("clip-vit-base-patch32", BATCH * SEQ),
])
def test_token_count_per_modality(name: str, tokens: int | None, small: dict[str, Path]) -> None:
    assert token_count(load(small[name], batch=BATCH, seq=SEQ).inputs) == tokens
