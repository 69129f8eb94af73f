"""Each SDPA kernel at its own measured rate (issue 26): the memory-efficient kernel's
rate, bias rate and dropout cost come from the kernels timed alone on an H100
(``benchmarks/attention_kernel_rates.py``, docs/data/attention_kernel_rates_h100_2026-11-26.json),
and every path that prices a fused attention reads them: the per-GEMM time, the step's
attention kernels, SL302's fused call and SL301's split heads."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from _rules import run_rule
from shapelint.rules import sl302_materialized_attention as sl302
from torch import nn

from shapelint.check.rule_api import RuleContext
from shapelint.hardware import resolve
from shapelint.measure.kernels import gpu_block_runner
from shapelint.model.records import Gemm
from shapelint.physics.attention import bias_grad_bytes, with_kernel
from shapelint.pipeline.run import trace
from shapelint.price.gemm import EFFICIENT_DROPOUT_HEAD_DIM, fused_dropout_ms, gemm_ms, gemm_time
from shapelint.price.kernels import attention_ms, op_ms

H100 = resolve("h100")
DATA = Path(__file__).resolve().parent.parent / "docs" / "data" / "attention_kernel_rates_h100_2026-11-26.json"


def _rows() -> list[dict]:
    return json.loads(DATA.read_text())["rows"]


def _measured(bh: int, t: int, d: int, kernel: str, mask: bool, dropout: float) -> float:
    (ms,) = [r["ms"] for r in _rows() if (r["bh"], r["t"], r["d"], r["kernel"], r["mask"], r["dropout"])
             == (bh, t, d, kernel, mask, dropout)]
    return float(ms)


class Attend(nn.Module):
    """One SDPA call over [1, BH, T, d]; ``bias``: an additive [T, T] bias (a parameter:
    it needs its gradient, so cuDNN refuses the call, as T5's and SpeechT5's do)."""

    def __init__(self, t: int, bias: bool = False, dropout: float = 0.0, causal: bool = False) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(t, t)) if bias else None
        self.dropout, self.causal = dropout, causal

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=self.bias, dropout_p=self.dropout,
                                                          is_causal=self.causal)


def _calls(bh: int, t: int, d: int, **kw: object) -> list[list[Gemm]]:
    """The step's attention kernels (forward, backward), each its GEMM records."""
    cap, _ = trace(lambda: (Attend(t, **kw), torch.randn(1, bh, t, d, requires_grad=True)),  # type: ignore[arg-type]
                   precision="bf16")
    return [[cap.gemms[i] for i in op.gemms] for op in cap.ops if op.kind == "attention" and op.gemms]


def _kernel_ms(calls: list[list[Gemm]]) -> float:
    return sum(attention_ms(call, H100, "eager")[0] for call in calls)


def test_the_profile_holds_the_measured_efficient_rates() -> None:
    """The three numbers are the data's medians: the kernel over cuDNN's time unmasked,
    its time with a bias over without, and its dropout per score element per pass per
    head-dimension element (forward draws the mask, backward draws it again)."""
    rows, step = _rows(), H100.step
    shapes = sorted({(r["bh"], r["t"], r["d"]) for r in rows})
    assert len(shapes) == 3
    slow = [_measured(*s, "efficient", False, 0.0) / _measured(*s, "cudnn", False, 0.0) for s in shapes]
    biased = [_measured(*s, "efficient", True, 0.0) / _measured(*s, "efficient", False, 0.0) for s in shapes]
    drop = [(_measured(*s, "efficient", m, 0.1) - _measured(*s, "efficient", m, 0.0)) * 1e-3 / (2 * s[0] * s[1] ** 2 * s[2])
            for s in shapes for m in (False, True)]
    assert [round(x, 2) for x in slow] == [3.8, 3.29, 3.33]  # (32, 2048, 128), (96, ...), (192, ...)
    assert step.efficient_attention_efficiency == pytest.approx(1 / statistics.median(slow), abs=0.005)
    assert step.efficient_bias_attention_efficiency == pytest.approx(1 / statistics.median(biased), abs=0.01)
    assert step.efficient_attention_dropout_ps == pytest.approx(statistics.median(drop) * 64 * 1e12, abs=0.02)
    # per element·d the six dropout costs agree within 7% of their median (per element they differ 2x)
    assert max(drop) / min(drop) < 1.15


def test_an_efficient_gemm_runs_at_its_share_of_the_fitted_rate() -> None:
    """A bias that needs its gradient sends the call to the memory-efficient kernel: its
    compute-bound GEMMs take 1 / (0.30 x 0.86) the time cuDNN's take at the fitted rate."""
    calls = _calls(96, 1024, 64, bias=True)
    assert {dict(g.extra)["kernel"] for call in calls for g in call} == {"efficient"}
    scores = calls[0][0]
    plain = with_kernel(replace(scores, extra=tuple((k, v) for k, v in scores.extra if k != "bias_grad")), "cudnn")
    eff, fitted = gemm_time(scores, H100), gemm_time(plain, H100)
    assert eff.bound == fitted.bound == "compute"
    assert eff.compute_s == pytest.approx(fitted.compute_s / (0.30 * 0.86), rel=1e-12)
    # the step's forward + backward: the GEMMs at that rate plus the bias gradient written expanded
    forward, backward = calls
    grad_ms = bias_grad_bytes(backward[0]) / (H100.memory_bandwidth_gbps * 1e9 * H100.step.elementwise_efficiency) * 1e3
    assert bias_grad_bytes(backward[0]) == 96 * 1024 * 1024 * 2  # autocast hands SDPA the bias in bf16
    assert _kernel_ms(calls) == pytest.approx(sum(gemm_ms(g, H100) for g in forward + backward) + grad_ms)


def test_efficient_dropout_grows_with_the_head_dimension() -> None:
    forward, _ = _calls(32, 1024, 128, bias=True, dropout=0.1)
    scores = forward[0]
    per_element = H100.step.efficient_attention_dropout_ps * 1e-9 * 128 / EFFICIENT_DROPOUT_HEAD_DIM
    assert fused_dropout_ms(scores, False, H100) == pytest.approx(32 * 1024 * 1024 * per_element)
    # cuDNN (and flash) draw it at the fitted attention_dropout_ps whatever the head dimension
    assert fused_dropout_ms(scores, False, H100, "cudnn") == pytest.approx(32 * 1024 * 1024 * 0.8e-9)


@pytest.mark.parametrize(("bh", "t", "d", "dropout", "within"), [
    (96, 1024, 64, 0.0, 0.10), (96, 1024, 64, 0.1, 0.10),  # SpeechT5's and WavLM's encoders
    (192, 1024, 64, 0.0, 0.10), (192, 1024, 64, 0.1, 0.10),
    # head dim 128: the fitted rate is 37% high for cuDNN itself there (0.64 ms est., 0.47 measured)
    (32, 2048, 128, 0.0, 0.35), (32, 2048, 128, 0.1, 0.25),
])
def test_the_estimates_meet_the_measured_kernel(bh: int, t: int, d: int, dropout: float, within: float) -> None:
    """The memory-efficient kernel with a bias, forward + backward, as the step prices it
    (its bias gradient included, which the timed call did not need: 3-7% of it)."""
    est = _kernel_ms(_calls(bh, t, d, bias=True, dropout=dropout))
    assert abs(est / _measured(bh, t, d, "efficient", True, dropout) - 1) < within


def test_cudnn_calls_keep_the_fitted_rate_and_dropout() -> None:
    """GPT-2's attention (causal, dropout 0.1): cuDNN, priced as before this change."""
    forward, backward = _calls(96, 1024, 64, dropout=0.1, causal=True)
    assert {dict(g.extra)["kernel"] for g in forward + backward} == {"cudnn"}
    drop = 96 * 1024 * 1024 * 0.55 * 0.8e-9
    assert attention_ms(forward, H100, "eager")[0] == pytest.approx(sum(gemm_ms(g, H100) for g in forward) + drop)
    assert gemm_ms(forward[0], H100) == pytest.approx(
        1e3 * forward[0].flops * 0.55 / (H100.peak_tflops("bf16") * 1e12 * 0.5 * 0.95
                                         * gemm_time(forward[0], H100).tile * gemm_time(forward[0], H100).wave))


# -- SL302: the kernel the fix runs --------------------------------------------------------


class RelativeBias(nn.Module):
    """SpeechT5's encoder attention: a relative-position term computed from q (it needs
    its gradient) added to the scores, softmax, dropout 0.1 on the probabilities."""

    def __init__(self, dim: int = 512, heads: int = 8, seq: int = 256) -> None:
        super().__init__()
        self.qkv, self.heads = nn.Linear(dim, 3 * dim), heads
        self.pos = nn.Parameter(torch.randn(seq, seq, dim // heads) * 0.02)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in self.qkv(x).split(c, dim=2))
        scores = q @ k.transpose(-2, -1) + torch.einsum("bhqd,qkd->bhqk", q, self.pos)
        return (self.drop(scores.softmax(-1)) @ v).transpose(1, 2).reshape(b, t, c)


def _sl302(build):  # type: ignore[no-untyped-def]
    cap, _ = trace(build, precision="bf16")
    ctx = RuleContext(precision="bf16", training=True, ops=tuple(cap.ops))
    return cap, list(run_rule(sl302, cap.gemms, H100, ctx)), list(sl302.check(cap.gemms, H100, ctx))


def test_a_bias_that_needs_its_gradient_sends_the_fix_to_the_memory_efficient_kernel() -> None:
    cap, (f,), (p,) = _sl302(lambda: (RelativeBias(seq=1024), torch.randn(8, 1024, 512)))
    assert {dict(g.extra)["kernel"] for g in f.after} == {"efficient"}
    assert all(dict(g.extra)["bias_grad"] == 2 and dict(g.extra)["with_bias"] for g in f.after)
    (grad,) = p.change.added.ops  # 1024 keys: no padding
    assert grad.bytes == 8 * 8 * 1024 * 1024 * 2 and grad.backward  # the bias gradient, expanded, bf16
    assert op_ms(grad, H100) == pytest.approx(1e3 * grad.bytes / (
        H100.memory_bandwidth_gbps * 1e9 * H100.step.elementwise_efficiency))  # as attention_ms prices it
    # the same attention with a constant mask: cuDNN, no gradient written
    _, (g,), (q,) = _sl302(lambda: (nn.Sequential(sl302.ManualAttention(512, 8, dropout=0.1)),
                                    torch.randn(8, 1024, 512)))
    assert {dict(a.extra)["kernel"] for a in g.after} == {"cudnn"} and q.change.added.ops == ()
    # both fused calls have the same GEMMs; the learned bias's runs about 3x longer (measured alone at
    # 96 x 1024 x 64: the memory-efficient kernel with a bias and dropout 1.47 ms, cuDNN with a bias
    # 0.40 ms, and dropout on cuDNN adds 0.06-0.16 ms)
    assert 2.4 < f.est_ms_after / g.est_ms_after < 3.4


def test_verify_times_the_call_the_fix_makes() -> None:
    """--verify gives the fused call a bias of the scores' shape that needs its gradient
    (PyTorch then runs the memory-efficient kernel, as the fix does) and asks for it."""
    cap, (f,), _ = _sl302(lambda: (RelativeBias(256, 8, 128), torch.randn(1, 128, 256)))
    block = gpu_block_runner("cpu")(f, {g.index: g for g in cap.gemms})
    assert block is not None
    unfused, fused = block
    grads = fused()
    assert len(grads) == 4 and grads[3].shape == (1, 8, 128, 128)
    assert [g.shape for g in unfused()] == [g.shape for g in grads]


@pytest.mark.slow
def test_speecht5_encoder_fix_is_priced_on_the_memory_efficient_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    """SpeechT5's encoder (96 batch·heads, T = 1023, head dim 64, a relative-position term
    from q, dropout 0.1): the fix runs the memory-efficient kernel with the bias and its
    gradient, which PyTorch pads to 1024 keys (a fill and a strided copy forward, one fill
    and two copies more backward). On an H100 (torch 2.11, 2026-11-26,
    benchmarks/attention_finding_profile.py) the layer's fix took 2.56 ms, 0.89 of them in
    the padding, and the hand-written layer 4.14 ms (1.62x)."""
    from tests._cli_helpers import run

    corpus = Path(__file__).resolve().parent / "corpus" / "speecht5-asr" / "config.json"
    rc, out, _ = run([corpus, "--gpu", "h100", "--format", "json"], capsys)
    (f,) = [f for f in json.loads(out)["findings"] if f["module"].endswith("layers.*.attention")]
    per_layer_after = f["est_ms_after"] / 12
    assert 2.2 < per_layer_after < 2.8  # 2.56 ms measured
    assert 1.45 < f["est_speedup"] < 2.0  # 1.62x measured; was 3.52 before the padding and the K=1023 bmm rate


def test_under_compile_the_masked_call_is_priced_on_the_kernel_that_takes_it() -> None:
    """Head dimension 160 in training: eager, cuDNN (torch 2.11 takes it forward and
    backward, as measured); under torch.compile a Hugging Face call gets a causal mask,
    which cuDNN takes: every tile, at its masked rate. Where the kernel under the mask is
    the memory-efficient one (a call cuDNN refuses), every tile at its rate with a bias."""
    from shapelint.capture.sdpa import compile_builds_mask

    token = compile_builds_mask.set(True)
    try:
        cap, _ = trace(lambda: (Attend(1024, causal=True), torch.randn(8, 16, 1024, 160, requires_grad=True)),
                       precision="bf16")
    finally:
        compile_builds_mask.reset(token)
    forward = [g for g in cap.gemms if g.op.startswith("sdpa.") and g.phase == "forward"]
    assert {(dict(g.extra)["kernel"], dict(g.extra)["compiled"]) for g in forward} == {("cudnn", "cudnn")}
    unmasked = [replace(g, extra=tuple((k, False if k == "is_causal" else v) for k, v in g.extra)) for g in forward]
    compiled, _ = attention_ms(forward, H100, "compile")
    assert compiled == pytest.approx(sum(gemm_ms(g, H100) for g in unmasked) / 0.83)
    eager, _ = attention_ms(forward, H100, "eager")
    assert compiled / eager == pytest.approx(1 / (0.55 * 0.83), rel=0.02)
    # the same call where the kernel under the mask is the memory-efficient one
    on_efficient = [replace(g, extra=tuple((k, "efficient" if k == "compiled" else v) for k, v in g.extra))
                    for g in forward]
    full = [with_kernel(g, "efficient") for g in unmasked]
    compiled, _ = attention_ms(on_efficient, H100, "compile")
    assert compiled == pytest.approx(sum(gemm_ms(g, H100) for g in full) / 0.86)
    assert compiled / eager == pytest.approx(1 / (0.55 * 0.30 * 0.86), rel=0.02)


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("efficient_attention_efficiency", 1.5, "efficient_attention_efficiency"),
    ("efficient_bias_attention_efficiency", 0.0, "efficient_bias_attention_efficiency"),
    ("efficient_attention_dropout_ps", -1.0, "efficient_attention_dropout_ps"),
])
def test_a_profile_checks_the_efficient_kernel_keys(key: str, value: float, expected: str) -> None:
    """A profile's ``step:`` table may set them (a calibrated GPU's file): a fraction, a
    fraction, a time; anything else is one error naming the key. Unset, the architecture's."""
    import yaml

    from shapelint.errors import ShapelintError
    from shapelint.hardware import PROFILE_DIR, profile_from_dict

    doc = yaml.safe_load((PROFILE_DIR / "h100-sxm.yaml").read_text())
    assert profile_from_dict(doc, "h100-sxm").step.efficient_attention_efficiency == 0.30  # from _arch.yaml
    with pytest.raises(ShapelintError, match=expected):
        profile_from_dict({**doc, "step": {**(doc.get("step") or {}), key: value}}, "h100-sxm")
    assert profile_from_dict({**doc, "step": {key: 0.5}}, "h100-sxm").step.__dict__[key] == 0.5


class MaskedMHA(nn.Module):
    """nn.MultiheadAttention with weights and a float attn_mask: F.multi_head_attention_forward
    adds the mask in its QKᵀ ``baddbmm`` (WavLM's gated position bias reaches it so);
    ``learned``: the mask is a parameter (it needs its gradient)."""

    def __init__(self, learned: bool, dim: int = 512, heads: int = 8, seq: int = 1024) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(dim, heads, batch_first=True)
        mask = torch.zeros(seq, seq)
        self.mask = nn.Parameter(mask) if learned else None
        self.register_buffer("fixed", None if learned else mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = self.mask if self.mask is not None else self.fixed
        return self.mha(x, x, x, attn_mask=mask)[0]


@pytest.mark.parametrize(("learned", "kernel"), [(False, "cudnn"), (True, "efficient")])
def test_a_mask_added_in_the_scores_baddbmm_goes_to_the_fused_call(learned: bool, kernel: str) -> None:
    cap, (f,), _ = _sl302(lambda: (MaskedMHA(learned), torch.randn(4, 1024, 512)))
    qk = next(g for g in cap.gemms if g.op == "baddbmm" and g.phase == "forward")
    assert dict(qk.extra) == {"adds_input": True}
    assert {dict(g.extra)["kernel"] for g in f.after} == {kernel}
    assert all(dict(g.extra)["with_bias"] for g in f.after)
    assert all(("bias_grad" in dict(g.extra)) == learned for g in f.after)
    # --verify adds the mask on both sides (the replayed chain has no op that adds it)
    cap, (small,), _ = _sl302(lambda: (MaskedMHA(learned, 256, 4, 512), torch.randn(2, 512, 256)))
    block = gpu_block_runner("cpu")(small, {g.index: g for g in cap.gemms})
    assert block is not None
    unfused, fused = block
    assert len(fused()) == len(unfused()) == 3 + learned


class PaddedAttend(nn.Module):
    """One SDPA call under a boolean padding mask (no gradient), as a padded batch has."""

    def __init__(self, t: int) -> None:
        super().__init__()
        self.register_buffer("keep", torch.ones(1, 1, t, t, dtype=torch.bool))

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=self.keep)


def test_a_split_heads_call_keeps_its_mask_when_the_kernel_is_picked() -> None:
    """SL301's after-kernel reads the call's mask, as the dispatcher mirror does: at head
    dimension 164 (not a multiple of 8) cuDNN refuses the call, flash takes it unmasked and
    the memory-efficient kernel refuses it too, masked (math); at 160, in training, cuDNN
    takes both (torch 2.11 on an H100)."""
    from shapelint.physics.attention import kernel_at

    cap, _ = trace(lambda: (PaddedAttend(256), torch.randn(1, 8, 256, 64, requires_grad=True)),  # type: ignore[arg-type]
                   precision="bf16")
    masked = [cap.gemms[i] for op in cap.ops if op.kind == "attention" for i in op.gemms]  # forward + backward
    plain = [g for call in _calls(8, 256, 64) for g in call]
    assert kernel_at(masked, 164) == "math"
    assert kernel_at(plain, 164) == "flash"
    assert kernel_at(masked, 160) == kernel_at(plain, 160) == "cudnn"
    assert kernel_at(masked, 64) == kernel_at(plain, 64) == "cudnn"
