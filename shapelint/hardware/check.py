"""A GPU profile's values, checked before any estimate divides by them.

``--gpu-profile FILE`` is a user's file (often edited by hand after ``shapelint
calibrate``): a zero SM count, an empty tile list or a negative TFLOP/s must end in
one line naming the key, not in a ``ZeroDivisionError`` deep in the estimator.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from shapelint.errors import ShapelintError
from shapelint.files import show
from shapelint.hardware.profile import STEP_KEYS

#: the scalar efficiencies a profile (or ``_arch.yaml``) may set, fractions in (0, 1]
EFFICIENCIES = ("achievable", "attention_misaligned_efficiency", "conv_transpose_efficiency",
                "memory_efficiency", "attention_efficiency", "conv_memory_efficiency", "conv_gemm_1x1_efficiency",
                "depthwise_nchw_efficiency", "depthwise_nchw_min_efficiency", "depthwise_nhwc_min_efficiency",
                "depthwise_nhwc_efficiency", "grouped_nhwc_efficiency", "batched_memory_efficiency",
                "batched_misaligned_k_efficiency")
#: typical model GEMMs measured against the 8192³ peak: slightly above 1 is possible
GEMM_EFFICIENCY_MAX = 1.5
#: the efficiency tables, ``{element bytes: {aligned bytes: fraction}}``
TABLES = ("misaligned_efficiency", "misaligned_output_efficiency", "misaligned_memory_efficiency")
#: larger than any GPU: a typo, not a GPU
MAX_SMS = 100_000


def check_profile(doc: Mapping[str, Any], where: str) -> None:
    """Raise a one-line :class:`ShapelintError` for the first bad value in ``doc``."""
    for key, check in _CHECKS.items():
        if key in doc:
            check(doc[key], f"{where}: {key}")
    for key in EFFICIENCIES:
        if key in doc:
            fraction(doc[key], f"{where}: {key}")
    for key in TABLES:
        if doc.get(key) is not None:
            _table(doc[key], f"{where}: {key}")
    for layout in ("nchw", "nhwc"):  # the depthwise rate's floor may not top its ceiling
        top, low = doc.get(f"depthwise_{layout}_efficiency"), doc.get(f"depthwise_{layout}_min_efficiency")
        if isinstance(top, (int, float)) and isinstance(low, (int, float)) and low > top:
            raise ShapelintError(f"{where}: depthwise_{layout}_min_efficiency ({low:g}) is above "
                                 f"depthwise_{layout}_efficiency ({top:g})")


def number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ShapelintError(f"{what} must be a number, got {show(value)}")
    return float(value)


def positive(value: Any, what: str) -> float:
    if number(value, what) <= 0:
        raise ShapelintError(f"{what} must be positive, got {show(value)}")
    return float(value)


def fraction(value: Any, what: str, top: float = 1.0) -> float:
    if not 0 < number(value, what) <= top:
        raise ShapelintError(f"{what} must be in (0, {top:g}], got {show(value)}")
    return float(value)


def positive_int(value: Any, what: str, top: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ShapelintError(f"{what} must be a positive integer, got {show(value)}")
    if top is not None and value > top:
        raise ShapelintError(f"{what} = {value} is larger than any GPU's ({top})")
    return value


def _text(value: Any, what: str) -> None:
    if not (isinstance(value, str) and value.strip()):
        raise ShapelintError(f"{what} must be a non-empty string, got {show(value)}")


def _texts(value: Any, what: str) -> None:
    if not isinstance(value, list):
        raise ShapelintError(f"{what} must be a list of strings, got {show(value)}")
    for i, item in enumerate(value):
        _text(item, f"{what}[{i}]")


def _count(value: Any, what: str) -> None:
    positive_int(value, what)


def _rate(value: Any, what: str) -> None:
    positive(value, what)


def _sms(value: Any, what: str) -> None:
    positive_int(value, what, MAX_SMS)


def _alignment(value: Any, what: str) -> None:
    if positive_int(value, what) & (value - 1):
        raise ShapelintError(f"{what} must be a power of two, got {value}")


def _tiles(value: Any, what: str) -> None:
    if not isinstance(value, list) or not value:
        raise ShapelintError(f"{what} must be a non-empty list of [rows, columns] pairs, got {show(value)}")
    for i, tile in enumerate(value):
        if not (isinstance(tile, list) and len(tile) == 2):
            raise ShapelintError(f"{what}[{i}] must be a [rows, columns] pair, got {show(tile)}")
        for dim in tile:
            positive_int(dim, f"{what}[{i}]")


def _tflops(value: Any, what: str) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise ShapelintError(f"{what} must be a mapping of dtype to TFLOP/s, got {show(value)}")
    for dtype, rate in value.items():
        _text(dtype, f"{what} key")
        positive(rate, f"{what}.{dtype}")


def _measured(value: Any, what: str) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise ShapelintError(f"{what} must be a mapping, got {show(value)}")
    for key, rate in value.items():
        if isinstance(key, str) and key.endswith(("_tflops", "_tbps")) and rate is not None:
            positive(rate, f"{what}.{key}")


def _wave_weight(value: Any, what: str) -> None:
    if not 0 <= number(value, what) <= 1:
        raise ShapelintError(f"{what} must be in [0, 1], got {show(value)}")


def _gemm_efficiency(value: Any, what: str) -> None:
    fraction(value, what, GEMM_EFFICIENCY_MAX)


def _min_gemm_us(value: Any, what: str) -> None:
    if number(value, what) < 0:
        raise ShapelintError(f"{what} must not be negative, got {show(value)}")


def _step(value: Any, what: str) -> None:
    if not isinstance(value, dict):
        raise ShapelintError(f"{what} must be a mapping, got {show(value)}")
    for key, x in value.items():
        if key not in STEP_KEYS:
            raise ShapelintError(f"{what}: unknown key {key!r} (known: {', '.join(STEP_KEYS)})")
        if key.endswith("_efficiency"):
            fraction(x, f"{what}.{key}")
        elif key.endswith("_speedup"):  # a gain: below 1 a part would cost more than the whole
            if number(x, f"{what}.{key}") < 1:
                raise ShapelintError(f"{what}.{key} must be at least 1, got {show(x)}")
        elif number(x, f"{what}.{key}") < 0:
            raise ShapelintError(f"{what}.{key} must not be negative, got {show(x)}")


def _conv_table(value: Any, what: str) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or not value:
        raise ShapelintError(f"{what} must be a mapping of element bytes to a fraction, got {show(value)}")
    for size, eff in value.items():
        positive_int(size, f"{what} key")
        fraction(eff, f"{what}.{size}")


def _table(value: Any, what: str) -> None:
    if not isinstance(value, dict) or not value:
        raise ShapelintError(f"{what} must be a mapping {{element bytes: {{aligned bytes: fraction}}}}, "
                             f"got {show(value)}")
    for size, row in value.items():
        positive_int(size, f"{what} key")
        if not isinstance(row, dict) or not row:
            raise ShapelintError(f"{what}.{size} must be a mapping {{aligned bytes: fraction}}, got {show(row)}")
        for aligned, eff in row.items():
            positive_int(aligned, f"{what}.{size} key")
            fraction(eff, f"{what}.{size}.{aligned}")


_CHECKS: dict[str, Callable[[Any, str], object]] = {
    "name": _text,
    "aliases": _texts,
    "arch": _text,
    "sms": _sms,
    "l2_bytes": _count,
    "memory_bandwidth_gbps": _rate,
    "tensor_tflops": _tflops,
    "fp32_tflops": _rate,
    "alignment_bytes": _alignment,
    "tiles": _tiles,
    "wave_weight": _wave_weight,
    "sources": _texts,
    "measured": _measured,
    "conv_misaligned_efficiency": _conv_table,
    "min_gemm_us": _min_gemm_us,
    "gemm_efficiency": _gemm_efficiency,
    "step": _step,
    # the bytes (MB) at which a depthwise kernel reaches half its top rate
    "depthwise_nchw_half_mb": positive,
    "depthwise_nhwc_half_mb": positive,
}


__all__ = ["EFFICIENCIES", "TABLES", "check_profile", "fraction", "number", "positive", "positive_int"]
