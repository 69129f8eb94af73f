"""The whole-step model (shapelint.price.step): op bytes, fusion under compile, the
launch floor, the optimizer, pad_mm, slice side costs, and the report's step numbers."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from _rules import run_rule
from shapelint.rules import sl301_attention_head_dim as sl301
from torch import nn

from shapelint import hardware
from shapelint.capture.precision import AUTOCAST_PRECISIONS, to_precision
from shapelint.capture.run import Capture, capture
from shapelint.capture.sdpa import compile_builds_mask
from shapelint.load.run import load
from shapelint.model.records import Op, Slice
from shapelint.physics.attention import AttentionCall, compiled_call, gpu_kernel, math_kernel
from shapelint.pipeline.run import trace
from shapelint.price import StepModel, best_after, inductor_note
from shapelint.price.gemm import gemm_ms
from shapelint.price.host import serialised_ms
from shapelint.price.inductor import compiled_gemm_ms, fused_regions, inductor_laid_out, pad_mm_padded
from shapelint.price.kernels import attention_ms, memory_kernel_ms, op_ms, optimizer_ms, work_ms
from shapelint.price.step import Step, slice_ms, step_time
from tests._cli_helpers import run

H100 = hardware.resolve("h100")
MB = 1 << 20


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 128)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) * 2


def test_capture_records_every_kernel_with_its_bytes() -> None:
    cap, _ = trace(lambda: (Block(), torch.randn(32, 64)), precision="bf16")
    ops = [(o.name, o.kind, o.backward, o.bytes) for o in cap.ops]
    # autocast over fp32 weights: x, W and b are cast to bf16 (read 4 + write 2 bytes per element)
    assert ops[:3] == [("_to_copy", "copy", False, 128 * 6), ("_to_copy", "copy", False, 64 * 128 * 6),
                       ("_to_copy", "copy", False, 32 * 64 * 6)]
    assert ops[3] == ("addmm", "gemm", False, 128 * 2 + 32 * 64 * 2 + 64 * 128 * 2 + 32 * 128 * 2)
    assert ops[4] == ("relu", "pointwise", False, 2 * 32 * 128 * 2)
    assert ops[5] == ("mul", "pointwise", False, 2 * 32 * 128 * 2)
    assert cap.ops[3].gemms == (0,)
    assert cap.ops[6].name == "ones_like" and all(o.backward for o in cap.ops[7:])  # the seed, then autograd
    assert sum(1 for o in cap.ops if o.kind == "gemm") == 2  # forward addmm, grad_weight mm (x needs no grad)
    assert cap.params == ((64 * 128, 4), (128, 4))  # fp32 weights, as the default step keeps them
    assert "bf16" in AUTOCAST_PRECISIONS


def _op(i: int, kind: str, reads: tuple[tuple[int, int], ...], writes: tuple[tuple[int, int], ...],
        backward: bool = False, numel: int = 0, out_numel: int = 0, name: str = "") -> Op:
    nbytes = sum(b for _, b in reads) + sum(b for _, b in writes)
    return Op(i, name or kind, kind, backward, nbytes, reads, writes,  # type: ignore[arg-type]
              numel=numel, out_numel=out_numel or numel)


def test_fusion_keeps_intermediates_on_chip() -> None:
    # a → pointwise → b → pointwise → c → reduction → d ; gemm reads c ; e (bwd) reads a
    ops = [
        _op(0, "pointwise", ((1, 4 * MB),), ((2, 4 * MB),), numel=MB),
        _op(1, "pointwise", ((2, 4 * MB),), ((3, 4 * MB),), numel=MB),
        _op(2, "reduction", ((3, 4 * MB),), ((4, MB),), numel=MB, out_numel=MB // 4),
        _op(3, "gemm", ((3, 4 * MB),), ((5, 4 * MB),)),
        _op(4, "pointwise", ((5, 4 * MB),), ((6, 4 * MB),), numel=MB),
        _op(5, "pointwise", ((1, 4 * MB),), ((7, 4 * MB),), backward=True, numel=MB),
    ]
    first, second, third = fused_regions(ops)
    # reads a (4 MB); writes c (read by the GEMM) and d (read by nobody: a result); b stays on
    # chip; the pointwise ops over the reduction's input are its prologue: one kernel
    assert (first.ops, first.bytes, first.pointwise, first.reductions) == ((0, 1, 2), 4 * MB + 4 * MB + MB, 0,
                                                                          ((MB, MB // 4),))
    assert first.kernels(H100) == 1
    assert (second.ops, second.bytes, second.kernels(H100)) == ((4,), 8 * MB, 1)
    assert third.ops == (5,)  # a new pass starts a new region


def test_inductor_kernels_per_iteration_space() -> None:
    """One backward region of a biased Linear over 8192 tokens x 768 (bf16): a GELU
    backward, the bias gradient and its fp32 cast, the weight gradient's cast (twice), a
    row sum; the kernels Inductor's fusion and split rules make of it."""
    tokens, width = 8192, 768
    act = tokens * width
    ops = [
        _op(0, "pointwise", ((1, 2 * act), (2, 2 * act)), ((3, 2 * act),), True, act, name="gelu_backward"),
        _op(1, "reduction", ((3, 2 * act),), ((4, 2 * width),), True, act, width, name="sum"),  # bias grad
        _op(2, "copy", ((4, 2 * width),), ((5, 4 * width),), True, width, name="_to_copy"),  # its fp32 cast
        _op(3, "copy", ((6, 2 * width * width),), ((7, 4 * width * width),), True, width * width, name="_to_copy"),
        _op(4, "copy", ((6, 2 * width * width),), ((7, 4 * width * width),), True, width * width, name="_to_copy"),
        _op(5, "reduction", ((3, 2 * act),), ((8, 4 * tokens),), True, act, tokens, name="sum"),  # a row sum
    ]
    (region,) = fused_regions(ops)
    # op 4 repeats op 3 (same op on the same tensor): one node after CSE
    assert region.ops == (0, 1, 2, 3, 5)
    # the weight cast (768x768) is the only iteration space no reduction absorbs: the GELU
    # backward is the prologue of both reductions, the bias cast the epilogue of the first
    assert region.pointwise == 1 and region.reductions == ((act, width), (act, tokens))
    # the bias gradient has 768 outputs (< 64 x 132 SMs) of 8192 elements each: split in two;
    # the row sum has 8192 outputs of 768 each: one kernel
    assert H100.sms == 132
    assert region.kernels(H100) == 1 + 2 + 1


def test_eager_step_is_the_larger_of_gpu_and_host_time() -> None:
    ops = [_op(i, "pointwise", ((i, MB),), ((i + 100, MB),)) for i in range(10)]
    st = Step([], ops, [], training=False)
    t = step_time(st, H100, "eager")
    kernel = memory_kernel_ms(2 * MB, H100.step.elementwise_efficiency, H100)
    assert t.kernels == 10
    assert math.isclose(t.gpu_ms, 10 * kernel + 10 * H100.step.kernel_gap_us * 1e-3)
    assert math.isclose(t.host_ms, 10 * H100.step.host_us_per_kernel * 1e-3)
    assert t.ms == max(t.gpu_ms, t.host_ms) and t.bound == "host"  # 2 MB kernels: 0.7 us each on an H100
    compiled = step_time(st, H100, "compile")
    assert compiled.kernels == 1  # ten independent pointwise ops in one pass: one fused kernel
    assert math.isclose(dict(compiled.by_class)["fused"], memory_kernel_ms(20 * MB, H100.step.elementwise_efficiency, H100))


def _hf_capture(folder: Path, cfg: dict[str, object]) -> Capture:
    """The bf16 training step of a Hugging Face config written to ``folder``, at 2 x 64 tokens."""
    path = folder / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(cfg))
    loaded = load(path, batch=2, seq=64)
    with loaded.fake_mode:
        return capture(loaded.model, to_precision(loaded.model, loaded.inputs, "bf16"), precision="bf16")


def test_a_host_read_serialises_the_eager_step() -> None:
    # (kernel ms, kernels, host ms) in issue order, 1 ms of host per kernel, no gap; one long kernel
    issued = [(0.01, 1, 1.0), (5.0, 1, 1.0), (0.01, 1, 1.0), (0.01, 1, 1.0)]
    # no read: the host runs ahead across steps, the step is the larger of 5.03 and 4
    # read before op 2: the cycle is 2, 3, 0, 1 from an idle GPU; op 1 (5 ms) starts when
    # the host issues it at 4 ms, and the next step's read waits for it: 9 ms
    assert serialised_ms(issued, (2,), 0.0) == pytest.approx(9.0)
    # a second read before op 2 waits for op 1: 0 → 1.01, 1 → 7.0, wait, 2 → 8.01, 3 → 9.01
    assert serialised_ms(issued, (0, 2), 0.0) == pytest.approx(9.01)
    assert serialised_ms(issued, (0,), 0.0) == pytest.approx(7.02)
    # 2 ms of host time that launches nothing before op 0: read before op 0, it runs while
    # the GPU finishes the step (7.02); read before it, the GPU waits for it: op 1 starts
    # at 4 ms instead of 2
    fixed = [(0.0, 0, 2.0), *issued]
    assert serialised_ms(fixed, (1,), 0.0) == pytest.approx(7.02)
    assert serialised_ms(fixed, (0,), 0.0) == pytest.approx(9.02)


def test_host_time_is_per_kernel_plus_per_parameter_tensor() -> None:
    # 10 pointwise kernels and 80 parameter tensors (40 of 768x768, 40 of 768) under AdamW
    ops = [_op(i, "pointwise", ((i, MB),), ((i + 100, MB),)) for i in range(10)]
    params = [(768 * 768, 4)] * 40 + [(768, 4)] * 40
    st = Step([], ops, params)
    _, launches = optimizer_ms(params, "adamw", H100)
    assert launches == 3  # 80 tensors, 36 a launch
    s = H100.step
    # the shipped H100 numbers (benchmarks/host_fit.py's structure, 11 models, at the level
    # benchmarks/host_level.py sets from every measured step)
    assert (s.host_us_per_kernel, s.host_us_per_tensor) == (34.0, 46.0)
    assert (s.compile_host_us_per_kernel, s.compile_host_us_per_tensor) == (4.0, 160.0)
    eager = step_time(st, H100, "eager")
    assert eager.kernels == 13
    assert eager.host_ms == pytest.approx(13 * 0.034 + 80 * 0.046)  # 0.442 + 3.68
    compiled = step_time(st, H100, "compile")
    assert compiled.kernels == 1 + 3
    # 80 tensors cost 12.8 ms of host, the kernels 0.016 ms: the graphs' inputs dominate
    assert compiled.host_ms == pytest.approx(4 * 0.004 + 80 * 0.160)
    # without training there is no optimizer and no per-tensor cost
    assert step_time(Step([], ops, params, training=False), H100, "eager").host_ms == pytest.approx(10 * 0.034)


def test_calibrate_scales_the_host_costs_by_the_measured_speed() -> None:
    from shapelint.measure.calibrate import host_table

    table = host_table(H100, 0.8, 1.25)
    # and the narrow band of one measured host (issue 26: the range collapses around it)
    assert table == {"host_us_per_kernel": 27.2, "host_us_per_tensor": 36.8,
                     "compile_host_us_per_kernel": 5.0, "compile_host_us_per_tensor": 200.0,
                     "compile_host_us_per_graph": 312.5, "host_speed_fastest": 0.85, "host_speed_slowest": 1.15}
    assert set(host_table(H100, 1.0, None)) == {"host_us_per_kernel", "host_us_per_tensor", "host_speed_fastest",
                                                "host_speed_slowest"}


def test_transformers_packed_sequence_check_is_a_host_read(tmp_path) -> None:
    # transformers >= 5 reads `(position ids are packed).all()` on the host in a causal LM's
    # forward without a mask (measured on an H100: GPT-2 8x1024 72.3 ms with it, 64.8 without)
    configs = {"gpt2": {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 128,
                        "architectures": ["GPT2LMHeadModel"]},
               "bert": {"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                        "intermediate_size": 128, "vocab_size": 128, "architectures": ["BertForMaskedLM"]}}
    for name, cfg in configs.items():
        cap = _hf_capture(tmp_path / name, cfg)
        step = Step(cap.gemms, cap.ops, cap.params, syncs=cap.syncs)
        eager, compiled = step_time(step, H100, "eager"), step_time(step, H100, "compile")
        if name == "bert":
            assert cap.syncs == () and eager.syncs == 0
            continue
        (at,) = cap.syncs  # after the embeddings (gathers, their sum), before the first layer's work
        assert at > 0 and not any(o.backward or o.kind in ("gemm", "attention") for o in cap.ops[:at])
        assert (eager.syncs, compiled.syncs) == (1, 0)  # compiled code reads nothing on the host
        assert eager.ms >= max(eager.gpu_ms, eager.host_ms)


def test_optimizer_bytes_and_launches() -> None:
    params = [(768 * 768, 4)] * 40 + [(768, 4)] * 40
    ms, launches = optimizer_ms(params, "adamw", H100)
    nbytes = 7 * 4 * 40 * (768 * 768 + 768)
    assert math.isclose(ms, 1e3 * nbytes / (3350e9 * H100.step.optimizer_efficiency))
    assert launches == max(math.ceil(80 / 36), math.ceil((40 * 9 + 40) / 320)) == 3
    assert optimizer_ms(params, "sgd", H100)[0] == pytest.approx(ms * 3 / 7)
    assert optimizer_ms(params, "none", H100) == (0.0, 0)


def _lm_head(vocab: int) -> list:
    cap, _ = trace(lambda: (nn.Linear(768, vocab, bias=False), torch.randn(8192, 768)), precision="bf16")
    return cap.gemms


def test_pad_mm_pads_misaligned_compute_bound_gemms_only() -> None:
    fwd, dgrad = _lm_head(50257)[:2]
    padded, copies = pad_mm_padded(fwd, H100) or (None, 0.0)
    assert padded is not None and (padded.m, padded.n, padded.k) == (8192, 50264, 768)
    assert copies > 0 and gemm_ms(padded, H100) + copies < gemm_ms(fwd, H100) / 1.1
    aligned = _lm_head(50264)[0]
    assert pad_mm_padded(aligned, H100) is None
    # a memory-bound GEMM (one token) is left alone, as pad_mm's is_mm_compute_bound does
    assert pad_mm_padded(replace(fwd, m=1), H100) is None


def test_pad_mm_decides_on_the_eager_pad_and_runs_inductors() -> None:
    # GPT-2 medium's LM head (hidden 1024): the weight gradient dlogits^T @ x has a transposed
    # operand (ld 50257). pad_mm times the eager constant_pad_nd, a slow transposing copy
    # (0.143 of the bandwidth), and still pads; the pad it runs is an Inductor kernel (0.906)
    cap, _ = trace(lambda: (nn.Linear(1024, 50257, bias=False), torch.randn(8192, 1024, requires_grad=True)),
                   precision="bf16")
    dw = next(g for g in cap.gemms if g.phase == "grad_weight")
    assert (dw.m, dw.k, dw.n, dw.a.transposed, dw.a.ld) == (50257, 8192, 1024, True, 50257)
    padded, copies = pad_mm_padded(dw, H100) or (None, 0.0)
    assert padded is not None and (padded.m, padded.k, padded.n) == (50264, 8192, 1024)
    nbytes = 2 * 50257 * 8192 * 2
    st = H100.step
    assert copies == memory_kernel_ms(nbytes, st.elementwise_efficiency, H100)  # about 0.54 ms
    timed = memory_kernel_ms(nbytes, st.transpose_copy_efficiency, H100)  # about 3.4 ms
    assert gemm_ms(dw, H100) > 1.1 * (gemm_ms(padded, H100) + timed)
    # GPT-2 small's (hidden 768): the eager pad costs as much as it saves, and pad_mm leaves
    # it (measured 4.23 ms against 4.23 padded, benchmarks/pad_mm_decisions.py)
    small = _head_step(50257, loss_break=True).gemms[1]
    assert small.phase == "grad_weight" and pad_mm_padded(small, H100) is None


class _Head(nn.Module):
    """An LM head and its loss, optionally behind a graph break (as GPT-2's is in transformers 5)."""

    def __init__(self, vocab: int, loss_break: bool) -> None:
        super().__init__()
        self.head, self.loss_break = nn.Linear(768, vocab, bias=False), loss_break

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(x)
        if self.loss_break:
            from shapelint.capture.recorder import note_graph_break

            note_graph_break()
        return nn.functional.cross_entropy(logits.float(), torch.zeros(x.shape[0], dtype=torch.long))


def _head_step(vocab: int, loss_break: bool) -> Step:
    cap, _ = trace(lambda: (_Head(vocab, loss_break), torch.randn(8192, 768)), precision="bf16")
    return Step(cap.gemms, cap.ops, cap.params, breaks=cap.breaks)


def test_inductor_lays_out_a_transposed_operand_made_in_its_graph() -> None:
    # dW = dlogits^T @ x: pad_mm leaves it (its transposed pad copy costs more than it saves:
    # H100, torch 2.11, 4.23 ms against 4.23 ms padded for GPT-2), but when the loss that makes
    # dlogits is in the same graph the vocabulary fix measured no gain (BERT 1.004-1.007x,
    # RoBERTa 0.995x): the op making dlogits writes it in the order the GEMM reads aligned
    one = _head_step(50257, loss_break=False)
    fwd, dw = one.gemms  # x needs no gradient: forward and weight gradient
    assert (dw.phase, dw.a.transposed, dw.a.ld, dw.a.cols) == ("grad_weight", True, 50257, 8192)
    assert pad_mm_padded(dw, H100) is None
    # dW's x is a forward tensor (the backward graph's input); the forward's W^T is autocast's
    # bf16 copy of the weight, made in the graph too (its leading dimension, 768, is aligned)
    assert one.made_in_graph == {fwd.index: ("b",), dw.index: ("a",)}
    assert inductor_laid_out(fwd, ("b",), H100) is None
    laid = inductor_laid_out(dw, ("a",), H100)
    assert laid is not None and (laid.a.transposed, laid.a.ld) == (False, 8192) and laid.b == dw.b
    assert compiled_gemm_ms(dw, H100, ("a",)) == gemm_ms(laid, H100) < gemm_ms(dw, H100) / 4
    # behind a graph break dlogits is the backward graph's input, laid out as the loss made it
    two = _head_step(50257, loss_break=True)
    assert len(two.breaks) == 1 and two.made_in_graph == {fwd.index: ("b",)}
    assert compiled_gemm_ms(two.gemms[1], H100, two.made_in_graph.get(1, ())) == gemm_ms(two.gemms[1], H100)
    # an aligned operand needs nothing
    assert inductor_laid_out(_head_step(50264, loss_break=False).gemms[1], ("a",), H100) is None


@pytest.mark.slow
def test_a_compiled_finding_says_what_inductor_does_itself(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    # BERT's loss is in the model's graph: pad_mm pads the forward and input-gradient GEMMs
    # of the LM head, and the weight gradient's dlogits is written aligned (measured 1.004-1.012x)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "bert", "num_hidden_layers": 1, "hidden_size": 768,
                                "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30522,
                                "max_position_embeddings": 512, "architectures": ["BertForMaskedLM"]}))
    code, out, _ = run([str(path), "--format", "json", "--compile", "--min-step-share", "0", "--batch", "8",
                        "--seq", "512"], capsys)
    (f,) = json.loads(out)["findings"]
    assert f["step_note"] == ("under torch.compile, Inductor's pad_mm pads 2 of these 3 GEMMs itself, and Inductor "
                              "writes the transposed operand of the other in an aligned layout; this is what remains")
    assert f["step_ms_saved"] < 0.01
    assert inductor_note(0, 1, 1) == "Inductor writes the transposed operand of this GEMM in an aligned layout"
    assert inductor_note(1, 1, 3) == ("Inductor's pad_mm pads 1 of these 3 GEMMs itself, and Inductor writes the "
                                       "transposed operand of 1 of these 3 GEMMs in an aligned layout")
    assert inductor_note(3, 0, 3) == "Inductor's pad_mm pads these GEMMs itself"


def test_hugging_face_loss_without_a_loss_type_breaks_the_graph(tmp_path) -> None:
    # transformers warns (once) in loss_function for a class it cannot map to a loss, and
    # dynamo breaks the graph there: GPT-2 compiled to 2 graphs, BERT to 1 (H100, torch 2.11)
    def breaks(cfg: dict) -> tuple[int, ...]:
        path = tmp_path / f"{cfg['model_type']}.json"
        path.write_text(json.dumps(cfg))
        loaded = load(path, batch=1, seq=16)
        with loaded.fake_mode:
            inputs = to_precision(loaded.model, loaded.inputs, "bf16")
            return capture(loaded.model, inputs, precision="bf16", training=True, defined_at=loaded.defined_at).breaks

    gpt2 = breaks({"model_type": "gpt2", "n_layer": 1, "n_embd": 64, "n_head": 4, "vocab_size": 1001,
                   "architectures": ["GPT2LMHeadModel"]})
    llama = breaks({"model_type": "llama", "num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4,
                    "intermediate_size": 128, "vocab_size": 1001, "architectures": ["LlamaForCausalLM"]})
    assert len(gpt2) == 1 and llama == ()


def test_slice_side_cost() -> None:
    s = Slice(8192, 50257, 50264, 2)
    st, bw = H100.step, 3350e9
    strided = 1e3 * 8192 * 50257 * 2 * (1 / st.strided_copy_efficiency - 1 / st.elementwise_efficiency) / bw
    fill = memory_kernel_ms(8192 * 50264 * 2, st.elementwise_efficiency, H100)
    copy_in = memory_kernel_ms(2 * 8192 * 50257 * 2, st.strided_copy_efficiency, H100)
    assert math.isclose(slice_ms(s, H100, "eager", True), strided + fill + copy_in)
    # measured on an H100 (docs/step-measurements.md): +1.43 to +1.53 ms eager for GPT-2 at 8x1024
    assert 1.2 < slice_ms(s, H100, "eager", True) < 1.6
    assert math.isclose(slice_ms(s, H100, "compile", True),
                        memory_kernel_ms(8192 * 50264 * 2, st.strided_copy_efficiency, H100))


@pytest.mark.slow
def test_gpt2_config_step_eager_and_compiled(examples, capsys: pytest.CaptureFixture[str]) -> None:
    docs = {}
    for mode in ("eager", "compile"):
        flags = ["--compile"] if mode == "compile" else []
        code, out, _ = run([str(examples / "gpt2" / "config.json"), "--format", "json", *flags], capsys)
        assert code == 1
        docs[mode] = json.loads(out)
    eager, compiled = docs["eager"], docs["compile"]
    assert eager["summary"]["mode"] == "eager" and compiled["summary"]["mode"] == "compile"
    (fe,), (fc,) = eager["findings"], compiled["findings"]
    # the GEMM numbers are the same in both modes; the step saving is not
    assert fe["est_speedup"] == fc["est_speedup"] > 5
    # measured on an H100: eager 66.0 -> 54.6 ms (1.21x), compiled 1.06-1.14x (kernel sums 1.15x)
    s = eager["summary"]
    assert 50 < s["step_ms"] < 80 and 1.12 < s["step_speedup"] < 1.32
    assert math.isclose(fe["step_ms_saved"], s["step_ms"] - s["step_ms_after"], rel_tol=1e-3)
    c = compiled["summary"]
    assert c["step_ms"] < s["step_ms"] and 1.0 < c["step_speedup"] < 1.2
    # pad_mm pads the forward and input-gradient GEMMs; the weight gradient's transposed pad
    # copy costs more than it saves, and the profiler showed that GEMM unpadded (4.28 ms)
    assert "pad_mm pads 2 of these 3 GEMMs" in fc["step_note"] and fc["step_ms_saved"] < fe["step_ms_saved"] / 2
    # GEMM-only keys are unchanged and say so
    assert s["est_scope"] == "GEMMs only" and s["est_speedup"] > 2


# -- attention: the kernel eager and under torch.compile, and its price -------------------


def _call(**kw: object) -> AttentionCall:
    base: dict[str, object] = dict(d_qk=64, d_v=64, seq_q=1024, seq_k=1024, element_bytes=2, half=True,
                                   has_mask=False, mask_requires_grad=False, mask_broadcasts=True, dropout_p=0.0,
                                   is_causal=True, requires_grad=True, efficient_aligned=True)
    return AttentionCall(**{**base, **kw})  # type: ignore[arg-type]


def test_compile_gives_hugging_face_calls_a_mask_and_the_kernel_follows() -> None:
    # as measured on an H100 (torch 2.11, transformers 5.17; docs/step-measurements.md)
    causal = _call()
    assert gpu_kernel(causal) == "cudnn" and gpu_kernel(compiled_call(causal, True)) == "cudnn"
    assert compiled_call(causal, True).is_causal is False and compiled_call(causal, True).has_mask
    # head_dim 100: flash pads it eager; with the mask nothing fused takes it
    hd100 = _call(d_qk=100, d_v=100)
    assert (gpu_kernel(hd100), gpu_kernel(compiled_call(hd100, True))) == ("flash", "math")
    # BERT: a bidirectional mask expanded over the keys (last-dim stride 0): math
    bert = _call(is_causal=False, seq_q=512, seq_k=512, dropout_p=0.1)
    assert (gpu_kernel(bert), gpu_kernel(compiled_call(bert, False))) == ("cudnn", "math")
    # dropout 0.1 with the causal mask: cuDNN (torch 2.11's _fused_sdp_choice, measured)
    assert gpu_kernel(compiled_call(_call(dropout_p=0.1), True)) == "cudnn"
    assert gpu_kernel(compiled_call(_call(is_causal=False), False)) == "math"


def _attention_step(causal: bool, dropout: float, d: int = 64, masked: bool = True) -> Step:
    class Attn(nn.Module):
        def forward(self, q: torch.Tensor) -> torch.Tensor:
            return nn.functional.scaled_dot_product_attention(q, q, q, is_causal=causal, dropout_p=dropout)

    token = compile_builds_mask.set(masked)
    try:
        cap, _ = trace(lambda: (Attn(), torch.randn(2, 4, 256, d, requires_grad=True)), precision="bf16")
    finally:
        compile_builds_mask.reset(token)
    return Step(cap.gemms, cap.ops, cap.params)


def test_attention_price_eager_masked_and_math() -> None:
    st = _attention_step(causal=True, dropout=0.1)
    forward = [g for g in st.gemms if g.phase == "forward"]
    assert [dict(g.extra) for g in forward[:1]] == [
        {"is_causal": True, "kernel": "cudnn", "compiled": "cudnn", "dropout": 0.1}]
    drop = H100.step.attention_dropout_ps * 1e-9  # ms per score element
    assert H100.step.attention_dropout_ps == 0.8 and H100.step.masked_attention_efficiency == 0.83
    # eager: the fused GEMMs (causal: 0.55 of the tiles) and dropout over the tiles computed
    eager, kernels = attention_ms(forward, H100, "eager")
    assert kernels == 1
    assert math.isclose(eager, sum(gemm_ms(g, H100) for g in forward) + 8 * 256 * 256 * 0.55 * drop)
    # compiled with the mask: every tile, at 0.83 of the rate, dropout on every tile
    full = [replace(g, extra=(("is_causal", False),) + g.extra[1:]) for g in forward]
    masked, _ = attention_ms(forward, H100, "compile")
    assert math.isclose(masked, sum(gemm_ms(g, H100) for g in full) / 0.83 + 8 * 256 * 256 * drop)
    # a bidirectional call: the math kernel under compile, forward GEMMs fp32, backward bf16
    st = _attention_step(causal=False, dropout=0.0)
    call = [st.gemms[i] for op in st.ops if op.kind == "attention" for i in op.gemms]
    assert {dict(g.extra)["compiled"] for g in call} == {"math"}
    backward = [g for g in call if g.phase != "forward"]
    ms, kernels = attention_ms(backward, H100, "compile")
    work = math_kernel(backward, backward_dtype="bf16")
    assert [g.dtype for g in work.gemms] == ["bf16"] * 4 and kernels == 4 + 1
    assert work.traffic_bytes == 8 * 256 * 256 * 4 * 3  # the softmax backward: 3 passes over fp32 scores
    assert math.isclose(ms, work_ms(work, H100))
    assert [g.dtype for g in math_kernel(call[:2], backward_dtype="bf16").gemms] == ["fp32", "fp32"]
    # without a mask under compile (not a Hugging Face model), compile prices the eager kernel
    plain = _attention_step(causal=True, dropout=0.0, masked=False)
    fwd = [g for g in plain.gemms if g.phase == "forward"]
    assert "compiled" not in dict(fwd[0].extra)
    assert attention_ms(fwd, H100, "compile") == attention_ms(fwd, H100, "eager")


def test_hugging_face_masks_under_compile(tmp_path) -> None:
    configs = {"gpt2": {"model_type": "gpt2", "n_layer": 1, "n_embd": 64, "n_head": 4, "vocab_size": 128,
                        "architectures": ["GPT2LMHeadModel"]},
               "bert": {"model_type": "bert", "num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4,
                        "intermediate_size": 128, "vocab_size": 128, "architectures": ["BertForMaskedLM"]}}
    kernels = {}
    for name, cfg in configs.items():
        cap = _hf_capture(tmp_path / name, cfg)
        kernels[name] = {(dict(g.extra)["kernel"], dict(g.extra).get("compiled")) for g in cap.gemms
                         if g.op.startswith("sdpa.")}
    # eager: no mask (is_causal / none), as on a GPU; compiled: transformers builds one (GPT-2's
    # dropout 0.1 with it: cuDNN, as torch 2.11 ran it; BERT's expanded padding vector: math)
    assert kernels == {"gpt2": {("cudnn", "cudnn")}, "bert": {("cudnn", "math")}}


class Lookup(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(1000, 64)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        logits = self.emb(ids).float() @ self.emb.weight.float().t()
        return nn.functional.cross_entropy(logits, ids)


def test_gathers_read_only_what_they_index() -> None:
    cap, _ = trace(lambda: (Lookup(), torch.randint(0, 1000, (32,))), precision="fp32")
    ops = {o.name: o for o in cap.ops}
    # the embedding reads 32 rows of the 1000 x 64 table (what it writes), and the 32 ids
    assert ops["embedding"].bytes == 32 * 64 * 4 + 32 * 8 + 32 * 64 * 4
    # the loss reads one logit per row of the 32 x 1000 log-probabilities, not all of them
    assert ops["nll_loss_forward"].kind == "reduction"
    assert ops["nll_loss_forward"].bytes == 32 * 4 + 32 * 8 + 2 * 4  # logits read, ids, loss and total weight
    # its backward zero-fills the 32 x 1000 gradient and writes one value a row: a fill, no reads
    assert ops["nll_loss_backward"].kind == "fill" and ops["nll_loss_backward"].bytes == 32 * 1000 * 4
    assert all(b == 0 for _, b in ops["nll_loss_backward"].reads)


def test_head_dim_fix_under_compile_leaves_the_math_kernel(tmp_path) -> None:
    cfg = {"model_type": "llama", "hidden_size": 1600, "intermediate_size": 512, "num_hidden_layers": 1,
           "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 128,
           "architectures": ["LlamaForCausalLM"]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    loaded = load(path, batch=2, seq=1024)
    with loaded.fake_mode:
        cap = capture(loaded.model, to_precision(loaded.model, loaded.inputs, "bf16"), precision="bf16")
    step = Step(cap.gemms, cap.ops, cap.params)
    (finding,) = run_rule(sl301, cap.gemms, H100)
    assert {dict(cap.gemms[i].extra)["compiled"] for i in finding.gemms} == {"math"}  # head_dim 100, a mask
    eager, compiled = StepModel(step, H100, "eager"), StepModel(step, H100, "compile")
    _, gpu_eager = eager.priced(finding)
    f_compiled, gpu_compiled = compiled.priced(finding)
    assert "math kernel" in f_compiled.step_note and gpu_compiled > 2 * gpu_eager > 0
    # after the change the attention runs fused under the mask: every tile, at the masked rate
    times = best_after([finding])
    forward = next(op for op in step.ops if op.kind == "attention")
    call = [step.gemms[i] for i in forward.gemms]
    ms, kernels = attention_ms(call, H100, "compile", times)
    assert kernels == 1 and math.isclose(ms, sum(times[g.index] for g in call) / (0.55 * 0.83))


class Rotate(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = x.view(8, 64, 4, 16).transpose(1, 2)  # [B, H, T, d]: a permuted view, as RoPE sees q
        return (q * 2.0).transpose(-1, -2).contiguous()  # the unit stride moves: a real transpose


def test_pointwise_on_a_permuted_view_is_vectorised_and_a_transpose_is_strided() -> None:
    """TensorIterator merges a permuted view and the output it allocates like it back into
    one contiguous run: ``q * 2.0`` is vectorised; the copy that moves the unit stride off
    the innermost dimension is not."""
    cap, _ = trace(lambda: (Rotate(), torch.randn(8, 64, 64)), precision="fp32", training=False)
    (mul,) = [o for o in cap.ops if o.name == "mul"]
    (copy,) = [o for o in cap.ops if o.name == "clone"]
    assert mul.kind == "pointwise" and not mul.strided and mul.bytes == 2 * 8 * 64 * 64 * 4
    assert op_ms(mul, H100) == memory_kernel_ms(mul.bytes, H100.step.elementwise_efficiency, H100)
    assert copy.kind == "copy" and copy.strided and copy.bytes == 2 * 8 * 64 * 64 * 4
    assert op_ms(copy, H100) == memory_kernel_ms(copy.bytes, H100.step.strided_copy_efficiency, H100)


def test_flash_copies_a_head_dim_it_pads() -> None:
    st = _attention_step(causal=True, dropout=0.0, d=100, masked=False)
    forward = [g for g in st.gemms if g.phase == "forward"]
    assert dict(forward[0].extra)["kernel"] == "flash"
    ms, kernels = attention_ms(forward, H100, "eager")
    # q, k, v into the 104-wide layout and the output out of it: 4 copies of [8, 256, 100 + 104] bf16
    copy = memory_kernel_ms(8 * 256 * (100 + 104) * 2, H100.step.strided_copy_efficiency, H100)
    assert kernels == 1 + 4 and math.isclose(ms, sum(gemm_ms(g, H100) for g in forward) + 4 * copy)
    # a finding that changes these GEMMs fixes the head dimension: no copies after it
    times = {g.index: gemm_ms(g, H100) for g in forward}
    assert attention_ms(forward, H100, "eager", times) == (sum(times.values()), 1)
