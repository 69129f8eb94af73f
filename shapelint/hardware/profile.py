"""A GPU as shapelint prices it: ``Hardware`` (every number from a profile file,
:mod:`shapelint.hardware.registry`) and the ``StepProfile`` of the rest of a training
step. ``Hardware`` is frozen and hashable by value, so that times can be cached by
profile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shapelint.hardware.collectives import Collectives


@dataclass(frozen=True)
class StepProfile:
    """How the rest of a training step runs on this GPU (``step:`` in ``_arch.yaml``
    or a profile; ``docs/step-measurements.md`` has the measurements): the fraction of
    the copy bandwidth each class of memory-bound kernel reaches, the shortest kernel,
    the GPU's idle time between kernels, and the host time of a step. Every
    value comes from the profile files (each architecture's ``step:`` table is complete),
    never from a default here."""

    #: pointwise, cast, fill and contiguous copy kernels
    elementwise_efficiency: float
    #: row reductions: softmax, norms, losses, sums
    reduction_efficiency: float
    #: a copy or pointwise kernel that reads or writes a strided (sliced, transposed)
    #: tensor; also one on TensorIterator's non-vectorised path with elements under 4 bytes
    strided_copy_efficiency: float
    #: a copy or pointwise kernel of 4-byte (or wider) elements on TensorIterator's
    #: non-vectorised path that reads whole sectors: a broadcast operand, or permuted
    #: views that agree on the innermost dimension (``shapelint.capture.op_traffic``)
    coalesced_efficiency: float
    #: a contiguous copy or pointwise kernel that casts (bf16 -> fp32, bf16 + fp32):
    #: TensorIterator's ``unrolled_elementwise_kernel`` with a dynamic cast
    cast_efficiency: float
    #: a copy or pointwise kernel that casts where its iteration is not one contiguous run
    #: (a bf16 score plus a broadcast fp32 ALiBi bias or mask): ``elementwise_kernel<128,
    #: vt>`` with an offset calculator and a dynamic cast of every element. It takes this
    #: much GPU time per element it iterates over, picoseconds, whatever the elements'
    #: width, or its bytes at this fraction of the bandwidth, whichever is longer
    #: (``shapelint.price.kernels.cast_offset_ms``)
    cast_offset_element_ps: float
    cast_offset_efficiency: float
    #: a copy that transposes (Inductor's pad of a transposed GEMM operand)
    transpose_copy_efficiency: float
    #: the fused multi-tensor optimizer kernels
    optimizer_efficiency: float
    #: the shortest GPU time of any kernel, microseconds
    min_kernel_us: float
    #: GPU idle time between two kernels of a GPU-bound step, microseconds
    kernel_gap_us: float
    #: host time of an eager training step: this per kernel (Python, dispatch, launch),
    #: microseconds, ...
    host_us_per_kernel: float
    #: ... plus this per parameter tensor (its gradient's accumulation, the optimizer's
    #: per-tensor work), microseconds
    host_us_per_tensor: float
    #: the same two under torch.compile: what is left per kernel is the generated code's
    #: launch; the graphs take every parameter as an input and give back its gradient
    compile_host_us_per_kernel: float
    compile_host_us_per_tensor: float
    #: ... and this per compiled graph a step calls beyond one forward and one backward
    #: graph (dynamo's graph breaks: each graph's guards, its AOTAutograd wrapper, its
    #: autograd node), microseconds; the ops run eagerly between graphs cost
    #: ``host_us_per_kernel`` each
    compile_host_us_per_graph: float
    #: fraction of a fused attention kernel's rate kept when it applies an explicit mask
    #: (it then computes every score tile: no causal skipping); 1 where not measured
    masked_attention_efficiency: float
    #: GPU time a fused attention kernel spends on attention dropout per score element
    #: it computes (the forward draws the mask, the backward draws it again), picoseconds;
    #: 0 where not measured
    attention_dropout_ps: float
    #: the host costs above are one typical host's; hosts differ: the fastest and the
    #: slowest measured host take these fractions of them (a host-bound step's estimate
    #: is a range, ``shapelint.price.step.StepTime.ms_range``). ``shapelint calibrate``
    #: measures its own host and writes the narrow band one host keeps between runs
    host_speed_fastest: float
    host_speed_slowest: float
    #: fraction of a fused attention kernel's rate kept when it adds a floating-point
    #: mask or bias to the scores (eager: attention written by hand that adds a mask,
    #: rewritten with SDPA and that mask); 1 where not measured
    bias_attention_efficiency: float = 1.0
    #: PyTorch's eager batch-norm kernels (forward and backward, ``shapelint.physics.
    #: conv_kernels.BATCH_NORM``) on NCHW and on channels-last activations; where not
    #: measured, the row-reduction rate
    batch_norm_nchw_efficiency: float = 0.45
    batch_norm_channels_last_efficiency: float = 0.45
    #: the batch-norm law by shape (``shapelint.price.batch_norm``), which replaces the two
    #: rates above for an op whose activation's shape was recorded: per kernel family
    #: (``shapelint.physics.batch_norm.FAMILIES``) the rate of one thread's loads, million
    #: elements (of each tensor pass) a second,
    #: and the fraction of the datasheet bandwidth the whole kernel reaches; a block's
    #: fixed start, microseconds. A family whose thread rate is 0 (not measured) falls
    #: back to the two rates above
    batch_norm_nchw_stats_thread_meps: float = 0.0
    batch_norm_nchw_stats_efficiency: float = 0.45
    batch_norm_nchw_backward_thread_meps: float = 0.0
    batch_norm_nchw_backward_efficiency: float = 0.45
    batch_norm_nchw_transform_thread_meps: float = 0.0
    batch_norm_nchw_transform_efficiency: float = 0.45
    batch_norm_channels_last_stats_thread_meps: float = 0.0
    batch_norm_channels_last_stats_efficiency: float = 0.45
    batch_norm_channels_last_reduce_thread_meps: float = 0.0
    batch_norm_channels_last_reduce_efficiency: float = 0.45
    batch_norm_channels_last_thread_meps: float = 0.0
    batch_norm_channels_last_stream_efficiency: float = 0.45
    batch_norm_block_us: float = 0.0
    #: an Inductor kernel that reduces over all but one dimension (batch norm's statistics
    #: over N·H·W per channel, its weight and bias gradients) with its fused pointwise
    #: ops, by the bytes its fused region reads and writes; where not measured, pointwise
    fused_norm_efficiency: float = 0.9
    #: PyTorch's memory-efficient attention kernel (what runs a bias that needs its
    #: gradient, or where cuDNN and flash refuse the call) in bf16/fp16: the fraction of
    #: the fitted fused rate (``attention_efficiency``, which cuDNN and flash share) it
    #: reaches, the fraction of that it keeps with an additive mask or bias, and its
    #: dropout's GPU time per score element per pass at head dimension 64, picoseconds
    #: (it grows with the head dimension; ``shapelint.price.gemm``). Every architecture's
    #: table sets them; 1, 1 and 0 where not measured, as for the other kernels
    efficient_attention_efficiency: float = 1.0
    efficient_bias_attention_efficiency: float = 1.0
    efficient_attention_dropout_ps: float = 0.0
    #: how much faster the fused attention forward's thread blocks run where its grid
    #: fills a small share of the SMs (one block of query rows per SM, the keys a loop
    #: inside it; ``shapelint.price.gemm.fused_forward_wave``) than at full load: a grid
    #: of one partial wave takes at least 1 / this of a full wave's time. 1 where not measured
    fused_forward_solo_speedup: float = 1.0

    def host_speed_against(self, typical: StepProfile) -> float:
        """How fast the host these costs were calibrated on issues kernels against the
        typical host ``typical`` describes: its per-kernel host cost over the typical one
        (``shapelint calibrate`` scales every host cost it does not time by this)."""
        return self.host_us_per_kernel / typical.host_us_per_kernel


STEP_KEYS = tuple(StepProfile.__dataclass_fields__)


@dataclass(frozen=True)
class Hardware:
    key: str
    name: str
    aliases: tuple[str, ...]
    arch: str
    sms: int
    l2_bytes: int
    memory_bandwidth_gbps: float
    tensor_tflops: dict[str, float]
    fp32_tflops: float
    alignment_bytes: int
    tiles: tuple[tuple[int, int], ...]
    wave_weight: float
    achievable: float
    # the rest come from the profile or its architecture in _arch.yaml (profile_from_dict),
    # never from a default here: one number in one place
    #: efficiency of a tensor-core GEMM whose worst operand is only N-byte aligned, per
    #: element size: {element_bytes: {aligned_bytes: efficiency}}
    misaligned_efficiency: dict[int, dict[int, float]]
    misaligned_output_efficiency: dict[int, dict[int, float]]
    conv_misaligned_efficiency: dict[int, float]
    attention_misaligned_efficiency: float
    #: fraction of the copy bandwidth cuDNN's NCHW <-> NHWC transposes of a convolution's
    #: operands reach (each transpose reads and writes the tensor once)
    conv_transpose_efficiency: float
    memory_efficiency: float
    #: the same for a batched GEMM (``bmm``: attention written by hand, relative-position
    #: terms), whose traffic is mostly its output, streamed near the copy rate
    batched_memory_efficiency: float
    #: the fraction of that rate a batched GEMM keeps whose contraction (K) rows are not
    #: 16-byte aligned: cuBLAS runs it on CUTLASS's narrow-load (align1/align2) kernels
    batched_misaligned_k_efficiency: float
    #: fractions of the copy bandwidth memory-bound convolution kernels reach, by the
    #: kernel each layout gets (``shapelint.physics.conv_kernels``): cuDNN's implicit GEMMs;
    #: cuBLASLt's GEMMs of a 1x1 convolution over N·H·W rows; PyTorch's own depthwise
    #: kernel (NCHW) and cuDNN's NHWC one; cuDNN's channels-last grouped kernels whose group
    #: width is not a multiple of 64
    conv_memory_efficiency: float
    conv_gemm_1x1_efficiency: float
    depthwise_nchw_efficiency: float
    depthwise_nhwc_efficiency: float
    grouped_nhwc_efficiency: float
    #: a depthwise kernel's rate grows with the bytes B it moves: ``efficiency · B /
    #: (B + half)`` (``depthwise_*_efficiency`` is the large-kernel rate, ``*_half_mb``
    #: the MB at which half of it is reached), never below the rate of the smallest
    #: kernels measured (``*_min_efficiency``) (``shapelint.price.gemm``)
    depthwise_nchw_half_mb: float
    depthwise_nhwc_half_mb: float
    depthwise_nchw_min_efficiency: float
    depthwise_nhwc_min_efficiency: float
    min_gemm_us: float
    attention_efficiency: float
    gemm_efficiency: float
    #: the memory-bound rate of a misaligned GEMM (narrower loads) as a fraction of the
    #: aligned one: {element bytes: {aligned bytes: fraction}}
    misaligned_memory_efficiency: dict[int, dict[int, float]]
    step: StepProfile
    sources: tuple[str, ...] = ()
    measured: dict[str, Any] = field(default_factory=dict)
    file: str = ""
    #: collective costs between GPUs of this kind (``collectives:``; None: not measured,
    #: no parallel layout can be priced on it)
    collectives: Collectives | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(_frozen(tuple(vars(self).values()))))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined,no-any-return]

    def uses_tensor_cores(self, dtype: str) -> bool:
        return dtype in self.tensor_tflops

    def peak_tflops(self, dtype: str) -> float:
        """The dense rate a large, aligned GEMM reaches in ``dtype`` (TFLOP/s):
        measured where the profile has a measurement, else datasheet x achievable.
        A dtype without tensor cores here runs on the CUDA cores."""
        measured = self.measured.get(f"{dtype}_tflops")
        if measured:
            return float(measured)
        if dtype in self.tensor_tflops:
            return self.tensor_tflops[dtype] * self.achievable
        if dtype in ("fp32", "tf32"):
            return float(self.measured.get("fp32_tflops") or self.fp32_tflops * self.achievable)
        if dtype == "fp8" and "fp16" in self.tensor_tflops:
            return self.tensor_tflops["fp16"] * self.achievable
        return self.fp32_tflops * self.achievable

    @property
    def bandwidth(self) -> float:
        """Device memory bandwidth in bytes/s (measured copy rate where known)."""
        tbps = self.measured.get("copy_tbps")
        return float(tbps) * 1e12 if tbps else self.memory_bandwidth_gbps * 1e9 * 0.9

    def ops_per_byte(self, dtype: str) -> float:
        """The ridge point of the roofline: FLOP per byte above which a GEMM is
        compute-bound (datasheet numbers, as NVIDIA's guides quote them)."""
        peak = self.tensor_tflops.get(dtype, self.fp32_tflops) * 1e12
        return peak / (self.memory_bandwidth_gbps * 1e9)

    def align_elems(self, dtype_bytes: int) -> int:
        return max(1, self.alignment_bytes // dtype_bytes)

    def misalignment_efficiency(self, dtype_bytes: int, aligned_bytes: int, output: bool = False,
                                memory: bool = False) -> float:
        """Fraction of the aligned rate a tensor-core GEMM keeps when its worst
        input (``output``: its output) pointer / leading dimension is only
        ``aligned_bytes``-byte aligned; ``memory``: of its memory-bound rate."""
        tables = (self.misaligned_memory_efficiency if memory
                  else self.misaligned_output_efficiency if output else self.misaligned_efficiency)
        table = tables.get(dtype_bytes)
        if aligned_bytes >= self.alignment_bytes or not table:
            return 1.0
        return table.get(aligned_bytes, min(table.values()))

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "name": self.name, "sms": self.sms, "file": self.file}


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _frozen(value: Any) -> Any:
    """``value`` with every dict and list turned into (sorted) tuples: hashable."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value

