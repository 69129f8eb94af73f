"""GPU profiles: every hardware number comes from a profile file.

Each GPU is one YAML file in ``shapelint/hardware/profiles/`` (datasheet numbers with
their sources, and measurements where we have them); ``_arch.yaml`` holds the
calibrated per-architecture behaviour of cuBLAS (misalignment penalties, memory
efficiency), which a profile inherits unless it carries its own values. A profile
written by ``shapelint calibrate`` is just another file (``--gpu-profile``). Every
value is checked before use (:mod:`shapelint.hardware.check`).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from shapelint.errors import ShapelintError, one_line
from shapelint.files import parse_yaml, read_text
from shapelint.hardware.check import check_profile
from shapelint.hardware.collectives import HOST_KEYS, host_costs_at, parse_collectives
from shapelint.hardware.profile import Hardware, StepProfile

PROFILE_DIR = Path(__file__).parent / "profiles"
DEFAULT_GPU = "h100"


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


def _collectives_doc(value: Any) -> Any:
    """A profile's ``collectives:`` table, or the name of the shipped profile whose table
    it shares (``collectives: h100-sxm``: one measured table, not a copy)."""
    if isinstance(value, str) and re.fullmatch(r"[a-z0-9][a-z0-9-]*", value) and (PROFILE_DIR / f"{value}.yaml").is_file():
        return _shipped_yaml(PROFILE_DIR / f"{value}.yaml").get("collectives")
    return value


#: the shipped profile whose engines' host costs (``collectives.host_us``) a profile
#: calibrated by an older shapelint is brought up to
HOST_COSTS_PROFILE = "h100-sxm"
#: the engines' host terms of profiles calibrated before ``tp_parameter`` (2026-11-26)
EARLIER_HOST_KEYS = frozenset(HOST_KEYS) - {"tp_parameter"}


def _current_host_costs(collectives: Any, step: StepProfile, arch: dict[str, Any]) -> Any:
    """A ``collectives:`` table as this version reads it. A profile calibrated before the
    engines' host costs had their present terms (``collectives.HOST_KEYS``) gets the
    shipped costs at the host speed it was calibrated at, read off its step table (its
    per-kernel host cost over the typical host's), as ``shapelint calibrate`` scales
    them now; its measured collective tables are kept."""
    if not isinstance(collectives, dict) or not isinstance(collectives.get("host_us"), dict):
        return collectives
    if set(collectives["host_us"]) != EARLIER_HOST_KEYS:
        return collectives  # current (or malformed: parse_collectives says so)
    typical = StepProfile(**{k: float(v) for k, v in arch["step"].items()})
    shipped = _shipped_yaml(PROFILE_DIR / f"{HOST_COSTS_PROFILE}.yaml")["collectives"]["host_us"]
    return {**collectives, "host_us": host_costs_at(shipped, step.host_speed_against(typical))}


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
    try:
        return _hardware(doc, arch, key, file)
    except (TypeError, ValueError, AttributeError) as exc:
        raise ShapelintError(f"{where}: malformed GPU profile: {one_line(exc)}") from exc


def _hardware(doc: dict[str, Any], arch: dict[str, Any], key: str, file: str) -> Hardware:
    """The checked profile ``doc`` as :class:`Hardware`; what it leaves out comes from its
    architecture's calibrated values (``arch``)."""

    def table(name: str) -> dict[int, dict[int, float]]:
        # a calibrated profile carries its own measured penalties
        rows = doc.get(name) or arch[name]
        return {int(b): {int(a): float(e) for a, e in row.items()} for b, row in rows.items()}

    def inherited(name: str) -> float:
        return float(doc.get(name, arch[name]))

    step = StepProfile(**{k: float(v) for k, v in {**arch.get("step", {}), **(doc.get("step") or {})}.items()})
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
        attention_misaligned_efficiency=inherited("attention_misaligned_efficiency"),
        conv_transpose_efficiency=inherited("conv_transpose_efficiency"),
        memory_efficiency=inherited("memory_efficiency"),
        batched_memory_efficiency=inherited("batched_memory_efficiency"),
        batched_misaligned_k_efficiency=inherited("batched_misaligned_k_efficiency"),
        conv_memory_efficiency=inherited("conv_memory_efficiency"),
        conv_gemm_1x1_efficiency=inherited("conv_gemm_1x1_efficiency"),
        depthwise_nchw_efficiency=inherited("depthwise_nchw_efficiency"),
        depthwise_nhwc_efficiency=inherited("depthwise_nhwc_efficiency"),
        grouped_nhwc_efficiency=inherited("grouped_nhwc_efficiency"),
        depthwise_nchw_half_mb=inherited("depthwise_nchw_half_mb"),
        depthwise_nhwc_half_mb=inherited("depthwise_nhwc_half_mb"),
        depthwise_nchw_min_efficiency=inherited("depthwise_nchw_min_efficiency"),
        depthwise_nhwc_min_efficiency=inherited("depthwise_nhwc_min_efficiency"),
        min_gemm_us=inherited("min_gemm_us"),
        attention_efficiency=inherited("attention_efficiency"),
        gemm_efficiency=inherited("gemm_efficiency"),
        misaligned_memory_efficiency=table("misaligned_memory_efficiency"),
        step=step,
        file=file,
        collectives=parse_collectives(_current_host_costs(_collectives_doc(doc.get("collectives")), step, arch),
                                      file or key),
    )


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


@functools.cache
def local_gpu() -> Hardware | None:
    """The profile of the local CUDA GPU, when there is one and we know it. Asked once
    per process: reading the device's name starts CUDA, and a worker process forked
    after that cannot start it again (``Cannot re-initialize CUDA in forked subprocess``
    on a GPU machine linting several targets); the workers inherit the answer."""
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


