"""GPU profiles: every hardware number comes from a profile file.

Each GPU is one YAML file in ``shapelint/profiles/`` (datasheet numbers with their
sources, and measurements where we have them); ``_arch.yaml`` holds the calibrated
per-architecture behaviour of cuBLAS (misalignment penalties, memory efficiency),
which a profile inherits unless it carries its own values. A profile written by
``shapelint calibrate`` is just another file (``--gpu-profile``). ``Hardware`` is
frozen and hashable by value, so that times can be cached by profile.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shapelint.errors import ShapelintError, one_line
from shapelint.files import parse_yaml, read_text
from shapelint.hardware.check import check_profile

PROFILE_DIR = Path(__file__).parent / "profiles"
DEFAULT_GPU = "h100"


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
    #: a copy or pointwise kernel that reads or writes a strided (sliced, transposed) tensor
    strided_copy_efficiency: float
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


REQUIRED = ("name", "aliases", "arch", "sms", "l2_bytes", "memory_bandwidth_gbps", "tensor_tflops",
            "fp32_tflops", "alignment_bytes", "tiles", "wave_weight", "achievable", "sources")


@functools.cache
def _shipped_yaml(path: Path) -> Any:
    """Our own profile files: the C safe loader when PyYAML has one (fast; only
    for trusted files, see files.parse_yaml)."""
    import yaml

    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _arch_table() -> dict[str, Any]:
    doc = _shipped_yaml(PROFILE_DIR / "_arch.yaml")
    return dict(doc)


def profile_from_dict(doc: dict[str, Any], key: str, file: str = "") -> Hardware:
    """A profile from its YAML mapping; every value is checked first
    (:mod:`shapelint.hardware.check`), so a bad one is a one-line error naming its key."""
    where = file or key
    if not isinstance(doc, dict):
        raise ShapelintError(f"{where}: a GPU profile must be a mapping, got {type(doc).__name__}")
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise ShapelintError(f"{where}: GPU profile lacks {', '.join(missing)}")
    check_profile(doc, where)
    arch = _arch_table().get(str(doc["arch"]), _arch_table()["default"])

    def table(key: str) -> dict[int, dict[int, float]]:
        # a calibrated profile carries its own measured penalties
        rows = doc.get(key) or arch[key]
        return {int(b): {int(a): float(e) for a, e in row.items()} for b, row in rows.items()}

    try:
        return Hardware(
            key=key,
            name=str(doc["name"]),
            aliases=tuple(str(a).lower() for a in doc["aliases"]),
            arch=str(doc["arch"]),
            sms=int(doc["sms"]),
            l2_bytes=int(doc["l2_bytes"]),
            memory_bandwidth_gbps=float(doc["memory_bandwidth_gbps"]),
            tensor_tflops={str(k): float(v) for k, v in (doc["tensor_tflops"] or {}).items()},
            fp32_tflops=float(doc["fp32_tflops"]),
            alignment_bytes=int(doc["alignment_bytes"]),
            tiles=tuple((int(a), int(b)) for a, b in doc["tiles"]),
            wave_weight=float(doc["wave_weight"]),
            achievable=float(doc["achievable"]),
            sources=tuple(str(s) for s in doc["sources"]),
            measured=dict(doc.get("measured") or {}),
            misaligned_efficiency=table("misaligned_efficiency"),
            misaligned_output_efficiency=table("misaligned_output_efficiency"),
            conv_misaligned_efficiency={int(b): float(e) for b, e in
                                        (doc.get("conv_misaligned_efficiency") or arch["conv_misaligned_efficiency"]).items()},
            attention_misaligned_efficiency=float(doc.get("attention_misaligned_efficiency",
                                                          arch["attention_misaligned_efficiency"])),
            conv_transpose_efficiency=float(doc.get("conv_transpose_efficiency", arch["conv_transpose_efficiency"])),
            memory_efficiency=float(doc.get("memory_efficiency", arch["memory_efficiency"])),
            min_gemm_us=float(doc.get("min_gemm_us", arch["min_gemm_us"])),
            attention_efficiency=float(doc.get("attention_efficiency", arch["attention_efficiency"])),
            gemm_efficiency=float(doc.get("gemm_efficiency", arch["gemm_efficiency"])),
            misaligned_memory_efficiency=table("misaligned_memory_efficiency"),
            step=StepProfile(**{k: float(v) for k, v in {**arch.get("step", {}), **(doc.get("step") or {})}.items()}),
            file=file,
        )
    except (TypeError, ValueError, AttributeError) as exc:
        raise ShapelintError(f"{where}: malformed GPU profile: {one_line(exc)}") from exc


@functools.cache
def builtin_profiles() -> dict[str, Hardware]:
    out = {}
    for path in sorted(PROFILE_DIR.glob("*.yaml")):
        if path.name.startswith("_"):
            continue
        out[path.stem] = profile_from_dict(_shipped_yaml(path), path.stem, str(path))
    return out


def known_names() -> list[str]:
    names = set()
    for key, hw in builtin_profiles().items():
        names.add(key)
        names.update(hw.aliases)
    return sorted(names)


def resolve(name: str) -> Hardware:
    """A GPU by its short, case-insensitive name (``h100``, ``a100-40gb``...)."""
    wanted = name.strip().lower()
    for key, hw in builtin_profiles().items():
        if wanted == key or wanted in hw.aliases:
            return hw
    raise ShapelintError(f"unknown GPU {name!r}; known: {', '.join(known_names())}")


def load_profile_file(path: str) -> Hardware:
    """``--gpu-profile FILE``: a regular file of at most a few MiB, a YAML mapping."""
    p = Path(path)
    if not p.exists():
        raise ShapelintError(f"--gpu-profile {path}: no such file")
    doc = parse_yaml(read_text(p, f"--gpu-profile {path}"), path)
    if not isinstance(doc, dict):
        raise ShapelintError(f"{path}: a GPU profile must be a mapping")
    return profile_from_dict(doc, p.stem, str(p))


def local_gpu() -> Hardware | None:
    """The profile of the local CUDA GPU, when there is one and we know it."""
    import torch

    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name().lower()
    best = None
    for key, hw in builtin_profiles().items():
        words = [w for w in hw.name.lower().replace("nvidia", "").split() if w not in ("sxm", "sxm5", "pcie")]
        if words and all(w in name for w in words[:2]):
            if best is None or len(hw.name) > len(best.name):
                best = hw
    return best


def default_gpu() -> Hardware:
    return local_gpu() or resolve(DEFAULT_GPU)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _frozen(value: Any) -> Any:
    """``value`` with every dict and list turned into (sorted) tuples: hashable."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value

