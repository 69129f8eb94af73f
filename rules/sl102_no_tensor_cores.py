"""GEMMs run on the CUDA cores: their dtype has no tensor cores on this GPU.

## What it does
Checks every GEMM of the step for a compute dtype the GPU's tensor cores do not
take (``fp32`` with TF32 off on any GPU; ``tf32`` on Volta/Turing, which have
fp16-only tensor cores; ``fp64``), and reports each module once, with the
estimated speedup of running its GEMMs in bf16 (fp16 where the GPU has no bf16
tensor cores: V100, T4) and, where the GPU has TF32 tensor cores, of simply
turning TF32 on.

## Why is this bad?
Without tensor cores a GEMM runs at the CUDA-core fp32 rate, an order of
magnitude below the tensor-core rate. Measured on our H200 (torch 2.11,
shared/data/gemm_truth.json): aligned model-size GEMMs run at 48-53 TFLOP/s in
fp32 with TF32 off, 260-360 in TF32 and 620-720 in bf16 (787 at 8192^3): 13x
or more between fp32 and bf16. Alignment does not matter in fp32 (there is
nothing to lose), so no other rule speaks for these GEMMs.

## Example
```python
model = nn.Linear(4096, 4096)           # trained in plain fp32
y = model(x)
```

## Use instead
```python
with torch.autocast("cuda", dtype=torch.bfloat16):  # fp16 on V100 / T4
    y = model(x)
# or, keeping fp32 weights and activations:
torch.backends.cuda.matmul.allow_tf32 = True
```
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from shapelint.check.rule_api import Example, RuleContext, by_module, phases
from shapelint.hardware import Hardware
from shapelint.model.records import Change, Gemm, Proposal, Severity, Suggestion

CODE = "SL102"
NAME = "no-tensor-cores"
SEVERITY: Severity = "warning"

#: the reduced precisions to suggest, in order of preference (first one with tensor cores)
LOW_PRECISIONS = ("bf16", "fp16")
#: the TF32 switch, as the message names it
TF32_SWITCH = "torch.backends.cuda.matmul.allow_tf32 = True"

BAD = [
    Example("nn.Linear(4096, 4096)", "torch.randn(8192, 4096)", dtype="fp32",
            expect={"parameter": "dtype", "from": "fp32", "to": "bf16"}, min_speedup=5.0),
    # alignment does not matter in fp32, the missing tensor cores do
    Example("nn.Sequential(nn.Linear(1023, 3072), nn.GELU(), nn.Linear(3072, 1023))",
            "torch.randn(4096, 1023)", dtype="fp32", gpu="h200",
            expect={"parameter": "dtype", "from": "fp32", "to": "bf16"}, min_speedup=2.0),
    # Volta has fp16-only tensor cores: TF32 does not exist there
    Example("nn.Linear(2048, 2048)", "torch.randn(8192, 2048)", dtype="tf32", gpu="v100",
            expect={"parameter": "dtype", "from": "tf32", "to": "fp16"}, min_speedup=3.0),
    Example("nn.Linear(1024, 4096)", "torch.randn(4096, 1024)", dtype="fp32", gpu="t4",
            expect={"parameter": "dtype", "from": "fp32", "to": "fp16"}, min_speedup=3.0),
]
GOOD = [
    Example("nn.Linear(4096, 4096)", "torch.randn(8192, 4096)"),  # bf16
    # TF32 runs on the tensor cores from Ampere on
    Example("nn.Linear(4096, 4096)", "torch.randn(8192, 4096)", dtype="tf32"),
    Example("nn.Linear(2048, 2048)", "torch.randn(8192, 2048)", dtype="fp16", gpu="v100"),
    Example("nn.Linear(1024, 4096)", "torch.randn(4096, 1024)", dtype="fp16", gpu="t4"),
]


def low_precision(hw: Hardware) -> str | None:
    """The reduced precision to suggest on this GPU: bf16, else fp16 (V100, T4)."""
    return next((d for d in LOW_PRECISIONS if hw.uses_tensor_cores(d)), None)


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Proposal]:
    target = low_precision(hardware)
    if target is None:
        return
    slow = [g for g in gemms if not hardware.uses_tensor_cores(g.dtype)]
    for _module, covered in by_module(slow).items():
        for dtype in sorted({g.dtype for g in covered}):
            same = tuple(g for g in covered if g.dtype == dtype)
            yield _proposal(same, dtype, target, hardware)


def _retyped(covered: tuple[Gemm, ...], dtype: str) -> tuple[Gemm, ...]:
    return tuple(replace(h, dtype=dtype) for h in covered)


def _proposal(covered: tuple[Gemm, ...], dtype: str, target: str, hw: Hardware) -> Proposal:
    why = "TF32 off" if dtype == "fp32" else f"no {dtype} tensor cores on this GPU"
    change = Change(
        Suggestion("dtype", dtype, target), _retyped(covered, target),
        f"{len(covered)} {dtype} GEMMs ({phases(covered)}) run on the CUDA cores ({why}): "
        f"run them in {target} (autocast)",
        (("dtype", dtype), ("suggested_dtype", target)),
    )
    alternatives: tuple[Change, ...] = ()
    if dtype == "fp32" and hw.uses_tensor_cores("tf32"):
        alternatives = (Change(Suggestion("dtype", dtype, "tf32"), _retyped(covered, "tf32"),
                               f"keep fp32 tensors and set `{TF32_SWITCH}` (TF32 tensor cores)"),)
    return Proposal(CODE, NAME, SEVERITY, covered, change, alternatives=alternatives)
