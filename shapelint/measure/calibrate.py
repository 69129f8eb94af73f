"""``shapelint calibrate``: measure the local GPU's ceilings and write a GPU profile.

Measures, with the kernel timer of ``shapelint.measure.timer`` (its method: warm-up, the
L2 flushed before every timed call, CUDA events, the median):
- dense GEMM TFLOP/s per dtype on a large aligned shape (8192³; fp32 4096³);
- device-to-device copy bandwidth (bytes read + written);
- the misalignment penalty per dtype (K = 4095 / 4100 / 4098 against 4096);
- a wave sweep (1024 x N x 8192, N = 1024..3072 by 128) to fit ``wave_weight``,
  and typical model shapes to fit ``gemm_efficiency``;
- the step table (``step:``, :class:`shapelint.hardware.profile.StepProfile`) the whole-step
  model prices the rest of a training step with (:func:`measure_step`): the bandwidth
  fraction of elementwise kernels, of the step's reductions (layer norm, log-softmax,
  bias-gradient sums, their median), of strided copies, of RoPE's fp32 ``q * cos`` on a
  transposed q (the coalesced, non-vectorised path), of a bf16 -> fp32 upcast (a
  contiguous cast), of the transposed pad copy
  Inductor's pad_mm makes, and of fused AdamW; the shortest kernel and the GPU's idle
  time between the kernels of an eager stream; and how fast this machine's CPU issues
  a host-bound eager (and compiled) training step against the step model's host costs,
  which scale by it.
The profile starts from the closest shipped profile (datasheet numbers) and adds a
``measured`` block with the date, GPU, driver and torch version. On a machine with two
GPUs or more it also measures the NCCL collectives the parallel layouts are priced
with, into the profile's ``collectives:`` section (:mod:`shapelint.measure.collectives`;
``--no-collectives`` skips them, ``--collectives-only`` measures only them, into the
profile ``--output`` names when it exists), and how fast this host runs the DDP, FSDP2
and DTensor engines' host work (:mod:`shapelint.measure.parallel_host`), which sets the
section's ``host_us``.
"""

from __future__ import annotations

import datetime
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from shapelint.errors import ShapelintError
from shapelint.files import parse_yaml, read_text, write_file
from shapelint.hardware import PROFILE_DIR, Hardware, profile_from_dict
from shapelint.measure.collectives import Sweep, base_collectives, collectives_on_this_machine
from shapelint.measure.collectives import section as collectives_section
from shapelint.measure.parallel_host import EngineSpeed, probe_engines
from shapelint.measure.timer import KernelTimer, cuda_timer, host_times, queued_ms
from shapelint.model.dtypes import TORCH_DTYPE_NAMES
from shapelint.model.records import Gemm
from shapelint.physics.gemm_shapes import matrix
from shapelint.price.gemm import gemm_time

PEAK_SHAPES = {"bf16": 8192, "fp16": 8192, "tf32": 8192, "fp32": 4096}
#: dtype -> (element bytes, {aligned bytes: K that has that alignment}) against K = 4096
MISALIGNED_K = {
    "bf16": (2, {2: 4095, 4: 4098, 8: 4100}),
    "fp16": (2, {2: 4095, 4: 4098, 8: 4100}),
    "tf32": (4, {4: 4095, 8: 4098}),
}
#: 1024 x N x 8192: few enough tiles that partial waves show (4096-row sweeps hide them)
WAVE_M, WAVE_K = 1024, 8192
WAVE_NS = list(range(1024, 3073, 128))
TYPICAL = [(8192, 4096, 4096), (8192, 11008, 4096), (8192, 4096, 11008), (4096, 5632, 2048), (16384, 3072, 1024)]


def row_major_gemm(m: int, n: int, k: int, dtype: str) -> Gemm:
    """The record of ``torch.mm`` of row-major (m, k) and (k, n) operands, as the sweep runs it."""
    return Gemm(0, "mm", "forward", m, n, k, 1, dtype, matrix(m, k, k, 1), matrix(k, n, n, 1), matrix(m, n, n, 1), "", "")


def measure(timer: KernelTimer, log: Callable[[str], None] = print) -> dict[str, Any]:
    import torch

    def mm_ms(m: int, n: int, k: int, dtype: str) -> float:
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        dt = getattr(torch, TORCH_DTYPE_NAMES[dtype])
        a = torch.randn(m, k, device="cuda", dtype=dt)
        b = torch.randn(k, n, device="cuda", dtype=dt)
        return statistics.median(timer(lambda: torch.mm(a, b)))

    def linear_ms(m: int, n: int, k: int, dtype: str) -> float:
        """y = x Wᵀ as nn.Linear runs it: W is [n, k], so B is column-major."""
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        dt = getattr(torch, TORCH_DTYPE_NAMES[dtype])
        x = torch.randn(m, k, device="cuda", dtype=dt)
        w = torch.randn(n, k, device="cuda", dtype=dt)
        return statistics.median(timer(lambda: torch.mm(x, w.t())))

    out: dict[str, Any] = {"rows": []}
    for dtype, s in PEAK_SHAPES.items():
        ms = mm_ms(s, s, s, dtype)
        out[f"{dtype}_tflops"] = round(2 * s**3 / (ms * 1e-3) / 1e12, 1)
        log(f"peak {dtype}: {out[f'{dtype}_tflops']} TFLOP/s")
    n_bytes = 1 << 30
    src = torch.empty(n_bytes // 4, dtype=torch.float32, device="cuda").normal_()
    dst = torch.empty_like(src)
    ms = statistics.median(timer(lambda: dst.copy_(src)))
    out["copy_tbps"] = round(2 * n_bytes / (ms * 1e-3) / 1e12, 3)
    log(f"copy: {out['copy_tbps']} TB/s")
    table: dict[int, dict[int, float]] = {}
    for dtype, (elem, ks) in MISALIGNED_K.items():
        base = mm_ms(8192, 4096, 4096, dtype)
        for aligned, k in ks.items():
            eff = round(base * k / 4096 / mm_ms(8192, 4096, k, dtype), 3)
            table.setdefault(elem, {})[aligned] = min(eff, table.get(elem, {}).get(aligned, 1.0))
            log(f"misaligned {dtype} K={k} ({aligned}-byte): {eff} of aligned")
    out["misaligned_efficiency"] = table
    out_table: dict[int, dict[int, float]] = {}
    for dtype, (elem, ks) in MISALIGNED_K.items():
        base = linear_ms(8192, 4096, 4096, dtype)
        for aligned, n in ks.items():  # the Linear forward with an odd out_features
            eff = round(base * n / 4096 / linear_ms(8192, n, 4096, dtype), 3)
            out_table.setdefault(elem, {})[aligned] = min(eff, out_table.get(elem, {}).get(aligned, 1.0))
            log(f"misaligned output {dtype} N={n} ({aligned}-byte): {eff} of aligned")
    out["misaligned_output_efficiency"] = out_table
    for n in WAVE_NS:
        out["rows"].append({"tag": "wave", "M": WAVE_M, "N": n, "K": WAVE_K, "dtype": "bf16",
                            "ms": mm_ms(WAVE_M, n, WAVE_K, "bf16")})
    for m, n, k in TYPICAL:
        out["rows"].append({"tag": "typical", "M": m, "N": n, "K": k, "dtype": "bf16", "ms": mm_ms(m, n, k, "bf16")})
    return out


#: elements of the bandwidth tests' tensors (bf16: 512 MiB each, far beyond any L2)
BANDWIDTH_ELEMENTS = 1 << 28
#: a training step whose GPU work is negligible, so that its time is the host's: a
#: Hugging Face GPT-2 (the models shapelint mostly sees) of GPT-2's 12 layers (about
#: 1000 kernels and 150 parameter tensors, as a real model's step has) at this width
#: and tokens; torch's own TransformerEncoder where transformers is not installed
HOST_STEP = (12, 256, 512)


#: step keys calibrate does not measure: a calibrated profile keeps its architecture's
#: values (``_arch.yaml``), which come from whole attention kernels timed with and
#: without a mask and dropout (docs/step-measurements.md), not from one probe
NOT_MEASURED = ("masked_attention_efficiency", "attention_dropout_ps", "bias_attention_efficiency",
                "efficient_attention_efficiency", "efficient_bias_attention_efficiency",
                "efficient_attention_dropout_ps", "fused_forward_solo_speedup")


def measure_step(timer: KernelTimer, base: Hardware,
                 compile: bool = True, log: Callable[[str], None] = print) -> dict[str, float]:
    """The step table, as fractions of the base profile's memory bandwidth (the base the
    step model divides by) and microseconds; the host costs as ``base``'s at this
    machine's measured speed; every key but :data:`NOT_MEASURED` (and, without
    ``compile``, the compiled host costs)."""
    out = _bandwidths(timer, base.memory_bandwidth_gbps)
    out.update(_kernel_floor())
    out.update(host_table(base, host_speed(False, base), host_speed(True, base) if compile else None))
    for key, value in out.items():
        log(f"step {key}: {value}")
    return out


def _bandwidths(timer: KernelTimer, bandwidth_gbps: float) -> dict[str, float]:
    """Bytes moved over the time taken, as a fraction of ``bandwidth_gbps``, for each
    class of memory-bound kernel the step model prices."""
    import torch

    def fraction(nbytes: float, fn: Callable[[], object]) -> float:
        ms = statistics.median(timer(fn))
        return round(nbytes / (ms * 1e-3) / (bandwidth_gbps * 1e9), 3)

    n = BANDWIDTH_ELEMENTS
    a = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    rows, cols = n // 32768, 32768
    padded = b[: (rows // 2) * (cols + 8)].view(rows // 2, cols + 8)  # sliced back to cols: a strided read
    out = {
        "elementwise_efficiency": fraction(6 * n, lambda: torch.add(a, b, out=c)),
        "reduction_efficiency": round(statistics.median(
            fraction(nbytes, fn) for nbytes, fn in _step_reductions(torch)), 3),
        "strided_copy_efficiency": fraction(4 * (rows // 2) * cols, lambda: padded[:, :cols].contiguous()),
        "transpose_copy_efficiency": fraction(*_pad_mm_transposed_pad(torch)),
        "coalesced_efficiency": fraction(*_rope_mul(torch, n)),
        # autocast's upcast of a bf16 activation: a contiguous copy with a dynamic cast
        "cast_efficiency": fraction(6 * n, lambda: a.float()),
    }
    params = [torch.zeros(4096, 4096, device="cuda", requires_grad=True) for _ in range(8)]
    for p in params:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
    from shapelint.price.step import OPTIMIZER_PASSES

    # fp32 parameters: OPTIMIZER_PASSES passes of 4 bytes over every element, as the step model prices it
    out["optimizer_efficiency"] = fraction(OPTIMIZER_PASSES["adamw"] * 4 * 8 * 4096 * 4096, opt.step)
    return out


#: the reductions of a training step at GPT-2 size (8192 tokens, hidden 768, MLP 3072,
#: vocab 50257), in the dtypes autocast runs them: a layer norm forward and backward in
#: fp32, the cross-entropy's log-softmax forward and backward over the logits, a bias
#: gradient summed over the tokens, an RMS norm's mean of squares
REDUCTION_TOKENS, REDUCTION_HIDDEN, REDUCTION_MLP, REDUCTION_VOCAB = 8192, 768, 3072, 50257


def _step_reductions(torch: Any) -> list[tuple[float, Callable[[], object]]]:
    """(bytes read + written once each, the call) of each reduction kernel the step
    model prices at ``reduction_efficiency``: their median is the number."""
    t, h, f, v = REDUCTION_TOKENS, REDUCTION_HIDDEN, REDUCTION_MLP, REDUCTION_VOCAB
    x = torch.randn(t, h, device="cuda")
    w, bias = torch.ones(h, device="cuda"), torch.zeros(h, device="cuda")
    _, mean, rstd = torch.native_layer_norm(x, (h,), w, bias, 1e-5)
    logits = torch.randn(t, v, device="cuda")
    logp = torch.log_softmax(logits, -1)
    grad_mlp = torch.randn(t, f, device="cuda", dtype=torch.bfloat16)
    squares = x.square()
    mask = [True, True, True]
    return [
        (2 * 4 * t * h, lambda: torch.native_layer_norm(x, (h,), w, bias, 1e-5)),
        (3 * 4 * t * h, lambda: torch.ops.aten.native_layer_norm_backward(x, x, (h,), mean, rstd, w, bias, mask)),
        (2 * 4 * t * v, lambda: torch.log_softmax(logits, -1)),
        (3 * 4 * t * v, lambda: torch.ops.aten._log_softmax_backward_data(logp, logp, -1, torch.float32)),
        (2 * t * f, lambda: grad_mlp.sum(0)),
        (4 * t * h, lambda: squares.mean(-1, keepdim=True)),
    ]


def _rope_mul(torch: Any, n: int) -> tuple[float, Callable[[], object]]:
    """RoPE's ``q * cos`` in fp32 as a Llama-style attention runs it: q is a [B, T, H, 128]
    projection viewed [B, H, T, 128], cos a [1, 1, T, 128] broadcast, so TensorIterator
    takes its non-vectorised, coalesced path (``shapelint.capture.op_traffic``). ``n``
    fp32 elements of q, read once and written once; cos once."""
    heads, seq, dim = 16, 1024, 128
    q = torch.randn(n // (heads * seq * dim), seq, heads, dim, device="cuda").transpose(1, 2)
    cos = torch.randn(1, 1, seq, dim, device="cuda")
    return 4 * (2 * q.numel() + cos.numel()), lambda: q * cos


def _pad_mm_transposed_pad(torch: Any) -> tuple[float, Callable[[], object]]:
    """The copy Inductor's pad_mm times and runs for a transposed operand it pads (the
    LM head's weight gradient: the logits' gradient transposed, rows padded 50257 ->
    50264): ``aten.constant_pad_nd`` of a transposed bf16 tensor into a contiguous one."""
    t, v = REDUCTION_TOKENS, REDUCTION_VOCAB
    grad = torch.randn(t, v, device="cuda", dtype=torch.bfloat16)
    return 2 * 2 * t * v, lambda: torch.ops.aten.constant_pad_nd(grad.t(), [0, 0, 0, -v % 8])


#: elements of the kernels the gap probe queues (fp32 in-place add: 128 MiB moved, tens
#: of microseconds each, longer than the host needs to launch one, so the GPU is the
#: bottleneck and the stream's idle time between kernels shows)
GAP_ELEMENTS = 1 << 24


def _kernel_floor(count: int = 2000) -> dict[str, float]:
    """The shortest kernel (a one-element add: its median duration in the profiler) and
    the GPU's idle time between two kernels of an eager stream: ``count`` queued
    kernels, elapsed / count − their median profiled duration."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    def durations(x: torch.Tensor, n: int) -> float:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                x.add_(1)
            torch.cuda.synchronize()
        times = [e.device_time for e in prof.events() if e.device_time > 0 and "add" in e.name.lower()]
        return statistics.median(times)

    tiny, big = torch.zeros(1, device="cuda"), torch.zeros(GAP_ELEMENTS, device="cuda")
    kernel, big_kernel = durations(tiny, 200), durations(big, 200)
    per: list[float] = []
    for _ in range(5):
        big.add_(1)  # the host gets ahead while this runs
        per.append(queued_ms(lambda: big.add_(1), count) * 1e3)
    return {"min_kernel_us": round(kernel, 2), "kernel_gap_us": round(max(statistics.median(per) - big_kernel, 0.0), 2)}


def host_speed(compiled: bool, hw: Hardware, steps: int = 20) -> float:
    """How fast this machine's CPU issues a training step, against ``hw``'s host model
    (``shapelint.price.step.host_costs``): the measured host time of a host-bound step
    (bf16 autocast over fp32 weights, fused AdamW) issued onto an idle GPU, over the
    host time the step model gives that step. The model's structure (per kernel, per
    parameter tensor) is fitted on measured steps (docs/benchmarks.md, "The host
    model"); this sets its level here."""
    import torch

    layers, width, tokens = HOST_STEP
    torch.manual_seed(0)
    try:
        import transformers

        config = transformers.GPT2Config(n_layer=layers, n_embd=width, n_head=4, vocab_size=8192, n_positions=tokens)
        model: Any = transformers.GPT2LMHeadModel(config)
        model.cuda()
        ids = torch.randint(0, 8192, (1, tokens), device="cuda")
        inputs: dict[str, Any] = {"input_ids": ids, "labels": ids}
    except ImportError:
        layer = torch.nn.TransformerEncoderLayer(width, 4, 4 * width, dropout=0.1, batch_first=True, norm_first=True)
        model = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).cuda()
        inputs = {"src": torch.randn(1, tokens, width, device="cuda")}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    forward = torch.compile(model) if compiled else model

    def loss_of(out: Any) -> Any:
        return out.loss if hasattr(out, "loss") else out.float().square().mean()

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_of(forward(**inputs))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(5):  # warm-up (and compilation)
        step()
    host = host_times(step, steps)
    from shapelint.pipeline.result import Options
    from shapelint.pipeline.run import lint_module
    from shapelint.price.step import step_time

    sm = lint_module(model, inputs, Options(compile=compiled), hw, []).step_model
    modelled = step_time(sm.step, hw, sm.mode, sm.optimizer).host_ms if sm is not None else 0.0
    return round(statistics.median(host) / modelled, 3) if modelled > 0 else 1.0


#: the band one measured host keeps around its own host costs between runs (the range a
#: calibrated profile prices host-bound steps with, instead of the spread over hosts):
#: SmolLM's host-bound eager step took 102.7 and 125.5 ms in one session on one H100
#: host (docs/data/host_level_h100.json), about 15% either side of their middle
CALIBRATED_HOST_BAND = (0.85, 1.15)


def host_table(hw: Hardware, eager_speed: float, compile_speed: float | None) -> dict[str, float]:
    """``hw``'s host costs scaled by the measured speeds (the step table's host keys),
    and the narrow band a measured host keeps (``CALIBRATED_HOST_BAND``)."""
    st = hw.step
    out = {"host_us_per_kernel": round(st.host_us_per_kernel * eager_speed, 2),
           "host_us_per_tensor": round(st.host_us_per_tensor * eager_speed, 2),
           "host_speed_fastest": CALIBRATED_HOST_BAND[0], "host_speed_slowest": CALIBRATED_HOST_BAND[1]}
    if compile_speed is not None:
        out.update({"compile_host_us_per_kernel": round(st.compile_host_us_per_kernel * compile_speed, 2),
                    "compile_host_us_per_tensor": round(st.compile_host_us_per_tensor * compile_speed, 2),
                    "compile_host_us_per_graph": round(st.compile_host_us_per_graph * compile_speed, 2)})
    return out


def fit(base: dict[str, Any], measured: dict[str, Any]) -> dict[str, Any]:
    """``base`` profile with the measurements and the fitted constants folded in."""
    doc = dict(base)
    tables = ("misaligned_efficiency", "misaligned_output_efficiency")
    doc["measured"] = {k: v for k, v in measured.items() if k not in ("rows", "step") and k not in tables}
    for key in tables:
        doc[key] = measured[key]
    if measured.get("step"):
        doc["step"] = {**doc.get("step", {}), **measured["step"]}
    rows = measured["rows"]
    peak = measured["bf16_tflops"]
    typical = [2 * r["M"] * r["N"] * r["K"] / (r["ms"] * 1e-3) / 1e12 / peak for r in rows if r["tag"] == "typical"]
    doc["gemm_efficiency"] = round(statistics.median(typical), 3) if typical else 0.87

    def error(weight: float) -> float:
        """How far the sweep's shape is from the estimate's (the overall scale is
        gemm_efficiency's business, so ratios are taken relative to their median)."""
        hw = profile_from_dict({**doc, "wave_weight": weight}, "calibrated")
        ratios = [gemm_time(row_major_gemm(r["M"], r["N"], r["K"], "bf16"), hw).seconds * 1e3 / r["ms"]
                  for r in rows if r["tag"] == "wave"]
        mid = statistics.median(ratios)
        return sum(abs(x / mid - 1) for x in ratios)

    doc["wave_weight"] = min((w / 10 for w in range(11)), key=error)
    return doc


def closest_key(name: str) -> str:
    """The shipped profile whose name shares the most words with the GPU's ``name``."""
    from shapelint.hardware import builtin_profiles

    low = name.lower()
    best = None
    for key, hw in builtin_profiles().items():
        words = [w for w in hw.name.lower().replace("nvidia", "").replace("(", " ").replace(")", " ").split()]
        score = sum(1 for w in words if w in low)
        if best is None or score > best[0]:
            best = (score, key)
    assert best is not None
    return best[1]


def closest_base(name: str) -> dict[str, Any]:
    """The YAML mapping of :func:`closest_key`'s profile (datasheet numbers): what a
    calibrated profile starts from."""
    return dict(yaml.safe_load((PROFILE_DIR / f"{closest_key(name)}.yaml").read_text()))


#: what ``shapelint calibrate`` measures of collectives: ``measure`` them where the
#: machine has two GPUs or more (the default), ``skip`` them (``--no-collectives``), or
#: measure ``only`` them (``--collectives-only``), into the profile ``--output`` names
COLLECTIVES = ("measure", "skip", "only")


@dataclass(frozen=True)
class Calibrated:
    """The profile written, the collectives measured for it (None: not measured), and
    the parallel engines' host speeds the probe measured (empty: not measured)."""

    hardware: Hardware
    collectives: Sweep | None
    engines: dict[str, EngineSpeed] = field(default_factory=dict)


def run(output: str, timer: KernelTimer | None = None, collectives: str = "measure", world_size: int | None = None,
        log: Callable[[str], None] = print) -> Calibrated:
    """Measure this machine and write its profile to ``output`` (see the module
    docstring); ``collectives`` one of :data:`COLLECTIVES`, on ``world_size`` GPUs
    (default: every GPU visible)."""
    import torch

    if collectives not in COLLECTIVES:
        raise ValueError(f"collectives must be one of {COLLECTIVES}, got {collectives!r}")
    if not torch.cuda.is_available():
        raise ShapelintError("calibrate needs a CUDA GPU (torch.cuda.is_available() is False)")
    name = torch.cuda.get_device_name()
    speed = None
    # the profile to write into is read and checked, and the one-GPU part measured,
    # before the collectives' sweep (up to minutes of every GPU): a bad file fails first
    if collectives == "only":
        doc, base_name = _profile_to_update(output, name)
    else:
        doc, base_name = _calibrated(name, timer or cuda_timer()), closest_key(name)
        speed = measured_host_speed(doc, profile_from_dict(closest_base(name), "base"))
    sweep = None if collectives == "skip" else collectives_on_this_machine(world_size, collectives == "only", log)
    here = profile_from_dict(doc, "base", output if base_name == output else "")
    base = here.collectives
    engines = engine_host_speeds(replace(here, collectives=base_collectives(base)), sweep.world, log) \
        if sweep is not None else {}
    if sweep is not None or (speed is not None and base is not None):
        doc["collectives"] = collectives_section(sweep, base_collectives(base), base_name, speed,
                                                 {e: s.speed for e, s in engines.items()})
    write_file(output, yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), "--output")
    return Calibrated(profile_from_dict(doc, Path(output).stem, output), sweep, engines)


def engine_host_speeds(hw: Hardware, world: int, log: Callable[[str], None]) -> dict[str, EngineSpeed]:
    """The parallel engines' host speeds on ``world`` GPUs against ``hw``'s ``host_us``
    (:mod:`shapelint.measure.parallel_host`); none, said in one line, where the probe
    fails: the collectives measured before it are kept, and the engines' host costs
    stay at the one-GPU probe's speed."""
    try:
        return probe_engines(world, hw, log)
    except Exception as e:  # noqa: BLE001 - a probe is optional: keep the sweep measured before it
        log(f"calibrate: the parallel host probe failed ({type(e).__name__}: {e}); the engines' host costs stay at "
            "the one-GPU host probe's speed")
        return {}


def measured_host_speed(doc: dict[str, Any], base: Hardware) -> float | None:
    """How fast this host issues an eager step against ``base``'s host model, as
    :func:`measure_step` measured it (read back from the step table it scaled by it);
    None where the table has no measured host cost."""
    per_kernel = (doc.get("step") or {}).get("host_us_per_kernel")
    if not per_kernel or not base.step.host_us_per_kernel:
        return None
    return round(replace(base.step, host_us_per_kernel=float(per_kernel)).host_speed_against(base.step), 3)


def _calibrated(name: str, timer: KernelTimer) -> dict[str, Any]:
    """The one-GPU measurements folded into the closest shipped profile."""
    import torch

    measured = measure(timer)
    base = closest_base(name)
    measured["step"] = measure_step(timer, profile_from_dict(base, "base"))
    measured.update({
        "date": datetime.date.today().isoformat(),
        "gpu": name,
        "driver": _driver(),
        "torch": str(torch.__version__),
        "cuda": str(torch.version.cuda),
    })
    doc = fit(base, measured)
    doc["sources"] = list(doc.get("sources", [])) + [
        f"shapelint calibrate on {name}, {measured['date']}, torch {measured['torch']}, driver {measured['driver']}"]
    return doc


def _profile_to_update(output: str, name: str) -> tuple[dict[str, Any], str]:
    """``--collectives-only``: the profile at ``output`` when there is one (checked
    whole before it is touched), else the closest shipped one; and its name."""
    path = Path(output)
    if not path.exists():
        return closest_base(name), closest_key(name)
    doc = parse_yaml(read_text(path, output), output)
    if not isinstance(doc, dict):
        raise ShapelintError(f"{output}: a GPU profile must be a mapping, got {type(doc).__name__}")
    profile_from_dict(doc, path.stem, output)
    return doc, output


def _driver() -> str:
    import subprocess

    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
