"""The compute dtypes, once: the names records and reports use, bytes per element,
torch's name for each, and which of them a user trains in.

Nothing here imports torch: a module that needs ``torch.dtype`` objects builds them
from :data:`TORCH_NAMES` (``getattr(torch, name)``), as :mod:`shapelint.capture.precision` does.
"""

from __future__ import annotations

#: bytes per element of each compute dtype a record can carry
DTYPE_BYTES: dict[str, int] = {
    "fp32": 4,
    "tf32": 4,
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "int8": 1,
    "fp64": 8,
}

#: the torch dtype (``getattr(torch, name)``) that a plain matmul of each compute dtype
#: reads (tf32 is fp32 data on the TF32 tensor cores; fp8 and int8 GEMMs need scaled
#: kernels, so they have none here)
TORCH_DTYPE_NAMES: dict[str, str] = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp32": "float32",
    "tf32": "float32",
    "fp64": "float64",
}

#: torch's dtype names → the name a record carries (both fp8 formats are fp8)
NAMES_OF_TORCH: dict[str, str] = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "float32": "fp32",
    "float64": "fp64",
    "int8": "int8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
}

#: the precisions a user can train in (``--dtype``)
PRECISION_NAMES: tuple[str, ...] = ("bf16", "fp16", "fp32", "tf32")

#: the dtypes FSDP2's ``MixedPrecisionPolicy`` gathers parameters and reduces gradients
#: in (``--fsdp-param-dtype``, ``--fsdp-reduce-dtype``); parameters are stored fp32
FSDP_DTYPES: tuple[str, ...] = ("fp32", "bf16", "fp16")

#: precisions trained as mixed precision: autocast over fp32 parameters and inputs
AUTOCAST_PRECISIONS: frozenset[str] = frozenset({"bf16", "fp16"})

__all__ = ["AUTOCAST_PRECISIONS", "DTYPE_BYTES", "FSDP_DTYPES", "NAMES_OF_TORCH", "PRECISION_NAMES", "TORCH_DTYPE_NAMES"]
