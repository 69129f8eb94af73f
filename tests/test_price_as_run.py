"""Prices as the GPU runs the step (issue 26): MoE experts in fp32 through aten's
per-group fallback, with its host reads; host-bound steps as a range over hosts."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from shapelint import hardware
from shapelint.physics.gemm_shapes import extract, grouped_fallback
from shapelint.pipeline.run import trace
from shapelint.price.gemm import gemm_ms, kernels, one_group
from shapelint.price.step import Step, Timeline, step_time
from tests._cli_helpers import run

H100 = hardware.resolve("h100")


# -- MoE experts -------------------------------------------------------------------------


def _moe(experts: int = 6, top_k: int = 2, batch: int = 2, seq: int = 16) -> Any:
    config = transformers.MixtralConfig(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                                        num_key_value_heads=2, vocab_size=256, num_hidden_layers=1,
                                        num_local_experts=experts, num_experts_per_tok=top_k)

    def build() -> tuple[torch.nn.Module, Any]:
        ids = torch.randint(0, 256, (batch, seq))
        return transformers.MixtralForCausalLM(config), {"input_ids": ids, "labels": ids, "use_cache": False}
    return build


def test_experts_over_fp32_weights_are_recorded_in_fp32_per_expert() -> None:
    """Transformers casts the experts' input to the fp32 master weights and autocast does
    not cover grouped_mm: the GEMMs are fp32 (not the autocast dtype), grouped over the
    6 experts, forward and backward."""
    cap, _ = trace(_moe(experts=6, top_k=2), precision="bf16")
    grouped = [g for g in cap.gemms if g.op == "_grouped_mm"]
    # gate_up and down, forward; grad_input and grad_weight of each
    assert sorted(g.phase for g in grouped) == ["forward"] * 2 + ["grad_input"] * 2 + ["grad_weight"] * 2
    assert {g.dtype for g in grouped} == {"fp32"}
    assert {grouped_fallback(g.extra) for g in grouped if g.phase != "grad_weight"} == {(6, "m")}
    assert {grouped_fallback(g.extra) for g in grouped if g.phase == "grad_weight"} == {(6, "k")}
    tokens = 2 * 16 * 2  # batch x seq x top-k rows
    fwd = {(g.m, g.n, g.k) for g in grouped if g.phase == "forward"}
    assert fwd == {(tokens, 2 * 96, 64), (tokens, 64, 96)}
    # the other GEMMs of the step stay in the autocast dtype
    assert {g.dtype for g in cap.gemms if g.op != "_grouped_mm"} == {"bf16"}


def test_bf16_experts_run_the_grouped_kernel() -> None:
    """bf16 operands take CUTLASS's grouped kernel: one record, one kernel, no host read."""
    a = torch.empty(512, 64, dtype=torch.bfloat16, device="meta")
    b = torch.empty(8, 64, 96, dtype=torch.bfloat16, device="meta")
    out = torch.empty(512, 96, dtype=torch.bfloat16, device="meta")
    (s,) = extract("_grouped_mm", (a, b, None), {}, out)
    assert (s.m, s.n, s.k, s.batch, s.extra) == (512, 96, 64, 1, ())
    (f,) = extract("_grouped_mm", (a.float(), b.float(), None), {}, out.float())
    assert grouped_fallback(f.extra) == (8, "m")
    # a grouped convolution's record (its extra names its groups too) is one kernel
    x, w = torch.empty(2, 64, 8, 8, device="meta"), torch.empty(64, 16, 3, 3, device="meta")
    (conv,) = extract("convolution", (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 4), {},
                      torch.empty(2, 64, 8, 8, device="meta"))
    assert dict(conv.extra)["groups"] == 4 and grouped_fallback(conv.extra) is None


def test_a_fallback_record_is_priced_as_one_gemm_per_group() -> None:
    cap, _ = trace(_moe(experts=6, top_k=2), precision="bf16")
    g = next(g for g in cap.gemms if g.op == "_grouped_mm" and g.phase == "forward")
    one = one_group(g, 6, "m")
    assert (one.m, one.n, one.k, one.a.rows, one.out.rows) == (math.ceil(64 / 6), g.n, g.k, 11, 11)
    assert gemm_ms(g, H100) == pytest.approx(6 * gemm_ms(one, H100))
    assert kernels(g) == 6 and kernels(replace(g, extra=())) == 1
    w = next(g for g in cap.gemms if g.op == "_grouped_mm" and g.phase == "grad_weight")
    assert one_group(w, 6, "k").k == math.ceil(w.k / 6)


def test_the_step_waits_for_the_host_at_each_fallback_call() -> None:
    """aten copies the group offsets to the host before the per-group GEMMs: each
    fallback call is a host read, eager and compiled; the GEMM op launches one kernel
    per expert."""
    cap, _ = trace(_moe(experts=6, top_k=2), precision="bf16")
    step = Step(cap.gemms, cap.ops, cap.params, syncs=cap.syncs)
    calls = [i for i, op in enumerate(cap.ops) if op.kind == "gemm"
             and any(cap.gemms[j].op == "_grouped_mm" for j in op.gemms)]
    assert len(calls) == 6 and set(calls) <= set(step.host_reads)
    eager = step_time(step, H100, "eager")
    assert eager.syncs == len(step.host_reads)
    plain = Step([replace(g, extra=()) for g in cap.gemms], cap.ops, cap.params, syncs=cap.syncs)
    assert eager.kernels - step_time(plain, H100, "eager").kernels == 6 * (6 - 1)
    assert step_time(step, H100, "compile").syncs == len(calls)
    # compiled, transformers' fallback loops over the experts in Python: eager launches
    python = 6 * 6 * (H100.step.host_us_per_kernel - H100.step.compile_host_us_per_kernel) * 1e-3
    compiled_plain = step_time(plain, H100, "compile")
    assert step_time(step, H100, "compile").host_ms == pytest.approx(
        compiled_plain.host_ms + python + 6 * 5 * H100.step.compile_host_us_per_kernel * 1e-3)


# -- host-bound steps: a range over measured hosts ----------------------------------------


def _timeline(gpu_ms: float, host_ms: float) -> Timeline:
    t = Timeline(per_kernel_us=0.0)
    t.add("gemm", gpu_ms, 0, host_ms)
    return t


def test_a_host_bound_step_is_a_range_over_measured_hosts() -> None:
    st = H100.step
    assert (st.host_speed_fastest, st.host_speed_slowest) == (0.65, 1.35)
    t = _timeline(gpu_ms=20.0, host_ms=40.0).time(H100, "eager", (), 0.0)
    assert t.ms == 40.0 and t.bound == "host"
    assert t.ms_range == pytest.approx((26.0, 54.0))
    # the fastest host would make it GPU-bound: the GPU's time is the floor
    t = _timeline(gpu_ms=35.0, host_ms=40.0).time(H100, "eager", (), 0.0)
    assert t.ms_range == pytest.approx((35.0, 54.0))
    # GPU-bound on every measured host: one number
    t = _timeline(gpu_ms=100.0, host_ms=40.0).time(H100, "eager", (), 0.0)
    assert t.ms_range == (100.0, 100.0)
    assert t.to_json()["step_ms_range"] == [100.0, 100.0]


def test_a_calibrated_host_narrows_the_range() -> None:
    from shapelint.measure.calibrate import CALIBRATED_HOST_BAND, host_table

    table = host_table(H100, 0.6, None)
    assert table["host_us_per_kernel"] == pytest.approx(0.6 * H100.step.host_us_per_kernel)
    assert (table["host_speed_fastest"], table["host_speed_slowest"]) == CALIBRATED_HOST_BAND
    calibrated = replace(H100, step=replace(H100.step, **table))
    t = _timeline(gpu_ms=20.0, host_ms=40.0).time(calibrated, "eager", (), 0.0)
    assert t.ms_range == pytest.approx((34.0, 46.0))


def test_the_range_is_in_the_json_summary_and_the_text_line(tmp_path: Path, capsys: Any) -> None:
    target = tmp_path / "model.py"
    target.write_text(
        "import torch\n"
        "def shapelint_model(batch=4, seq=8):\n"
        "    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)])\n"
        "    return model, torch.randn(batch * seq, 64)\n")
    doc = json.loads(run(["--no-cache", "--no-isolate", "--format", "json", target], capsys)[1])
    low, high = doc["summary"]["step_ms_range"]
    assert doc["summary"]["step"]["bound"] == "host"
    assert low == pytest.approx(0.65 * doc["summary"]["step_ms"], rel=0.02)
    assert high == pytest.approx(1.35 * doc["summary"]["step_ms"], rel=0.02)
    text = run(["--no-cache", "--no-isolate", target], capsys)[1]
    assert f"({low:.1f}–{high:.1f} ms by host)" in text


# -- T5: a position bias that needs its gradient -------------------------------------------


def _t5() -> Any:
    config = transformers.T5Config(vocab_size=256, d_model=64, d_kv=16, d_ff=128, num_layers=1, num_decoder_layers=1,
                                   num_heads=4, relative_attention_num_buckets=8, decoder_start_token_id=0,
                                   pad_token_id=0)

    def build() -> tuple[torch.nn.Module, Any]:
        ids = torch.randint(0, 256, (2, 32))
        model = transformers.T5ForConditionalGeneration._from_config(config, attn_implementation="sdpa")
        return model, {"input_ids": ids, "labels": ids}
    return build


def test_a_position_bias_gradient_is_written_expanded_and_summed() -> None:
    """T5's learned bias reaches SDPA as a mask that needs its gradient: cuDNN refuses
    it; the fused kernel writes the gradient at [B, H, Tq, Tk] (priced), and autograd
    sums it to the bias's [1, H, Tq, Tk] (a recorded reduction)."""
    from shapelint.physics.attention import bias_grad_bytes
    from shapelint.price.kernels import attention_ms

    cap, _ = trace(_t5(), precision="bf16")
    biased = [g for g in cap.gemms if g.op.startswith("sdpa") and dict(g.extra).get("bias_grad")]
    assert biased and {dict(g.extra)["kernel"] for g in biased} <= {"efficient", "math"}
    assert {dict(g.extra)["bias_grad"] for g in biased} == {2}  # autocast hands SDPA the fp32 bias in bf16
    scores = next(g for g in biased if g.role == "attn_scores" and g.phase != "forward")
    assert bias_grad_bytes(scores) == 2 * 4 * 32 * 32 * 2
    sums = [op for op in cap.ops if op.name == "sum" and op.backward and op.bytes >= bias_grad_bytes(scores)]
    assert sums
    call = [g for g in cap.gemms if g.op.startswith("sdpa") and g.phase != "forward"
            and dict(g.extra).get("bias_grad") and g.module == scores.module][:4]
    plain = [replace(g, extra=tuple((k, v) for k, v in g.extra if k != "bias_grad")) for g in call]
    extra_ms = attention_ms(call, H100, "eager")[0] - attention_ms(plain, H100, "eager")[0]
    assert extra_ms == pytest.approx(max(bias_grad_bytes(scores) / (H100.memory_bandwidth_gbps * 1e9
                                                                   * H100.step.elementwise_efficiency),
                                         H100.step.min_kernel_us * 1e-6) * 1e3)


# -- small batched GEMMs ---------------------------------------------------------------------


@pytest.mark.parametrize("kind, head, measured_ms", [
    ("qk", 64, 0.2455), ("pv", 64, 0.2315), ("qk", 104, 0.2740), ("pv", 104, 0.2349), ("qk", 128, 0.2718),
    ("pv", 128, 0.2488), ("qk", 100, 0.7699), ("pv", 100, 0.4062),
])
def test_batched_gemms_stream_near_the_copy_rate(kind: str, head: int, measured_ms: float) -> None:
    """bmm of 96 x 2048 x 2048 scores with head dims 64-128 (H200, bf16,
    shared/data/gemm_truth.json): memory-bound at batched_memory_efficiency (they were
    priced 1.6-2.0x slow at a plain GEMM's rate), and head dim 100 (8-byte rows) as
    QKᵀ (K misaligned) 2.8x, as PV (V's rows misaligned) 1.7x the aligned time."""
    from shapelint.model.records import Gemm, Operand

    h200 = hardware.resolve("h200")
    m = n = k = 2048
    if kind == "qk":
        k = head
        a, b = Operand(m, k, k, batch_stride=m * k), Operand(k, n, k, transposed=True, batch_stride=n * k)
    else:
        n = head
        a, b = Operand(m, k, k, batch_stride=m * k), Operand(k, n, n, batch_stride=k * n)
    g = Gemm(0, "bmm", "forward", m, n, k, 96, "bf16", a, b, Operand(m, n, n, batch_stride=m * n), "attn", "Attention")
    assert gemm_ms(g, h200) == pytest.approx(measured_ms, rel=0.2)


# -- a compiled step estimated slower than eager says why -------------------------------------


class _Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(1024, 3 * 1024)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).view(8, 2048, 3, 16, 64).permute(2, 0, 3, 1, 4)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def test_a_compiled_step_slower_than_eager_says_why() -> None:
    """A vision-encoder-like call transformers gives a mask under torch.compile (the
    loader says so through ``compile_builds_mask``): PyTorch's math kernel, fp32 scores."""
    from shapelint.capture.sdpa import compile_builds_mask
    from shapelint.price import StepModel

    token = compile_builds_mask.set(True)
    try:
        cap, _ = trace(lambda: (_Attention(), torch.randn(8, 2048, 1024)), precision="bf16")
    finally:
        compile_builds_mask.reset(token)
    step = Step(cap.gemms, cap.ops, cap.params)
    compiled, eager = StepModel(step, H100, "compile"), StepModel(step, H100, "eager")
    assert compiled.before.ms > eager.before.ms
    assert compiled.before.note.startswith("compiled, this step is estimated slower than eager")
    assert "passes 1 attention call an explicit mask" in compiled.before.note
    assert eager.before.note == "" and compiled.before.to_json()["note"] == compiled.before.note
