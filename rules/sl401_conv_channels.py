"""A convolution's channel count is not a multiple of 16 bytes.

## What it does
Checks every convolution's implicit GEMMs (forward, grad-input, grad-weight) on
the tensor cores for input or output channels (per group) that are not a
multiple of 16 bytes: 8 channels in bf16/fp16, 4 in tf32. Channels are the
leading dimension of the activations in the GEMMs (``ld = C``: the operands are
the tensors as they lie in memory) and, times the kernel size, of the weights
(``k = C_in·R·S``), so the padded layer is estimated by rebuilding its GEMMs with
the new channel count (a transposed convolution runs the input-gradient GEMM
forward and a plain convolution for its input gradient). The suggested count is
the smallest multiple that the pricer finds as fast as any larger one.

Known exceptions: the input channels of a stem (``in_channels <= 4``, e.g. an RGB
image): cuDNN has dedicated kernels for 3- and 4-channel inputs, and padding the
image means an extra copy of every input batch for a layer that is usually a
small part of the step, so only the stem's output channels are checked.
Depthwise convolutions (one channel per group) run no tensor-core GEMM and are
skipped. A convolution is reported once, with all its misaligned channel counts
padded in the estimate (the kernel runs at the pace of its worst-aligned
operand, so padding one side of two gains little).

## Why is this bad?
cuDNN's tensor-core convolution kernels want 16-byte aligned channel rows; other
counts run on kernels that load fewer bytes at a time, or pad internally with
extra copies. Measured (H200, torch 2.11, bf16, batch 64, 56x56, forward +
backward, GPU kernel time): ``Conv2d(30, 64, 3)`` takes 0.327 ms channels-last
against 0.229 ms for ``Conv2d(32, 64, 3)`` (1.43x; 1.13x in NCHW);
``Conv2d(64, 100, 3)`` 0.613 ms against 0.431 ms for 104 output channels (1.42x;
1.08x in NCHW). The example ConvNet (channels 30, 60, 100) steps in 0.447 ms, and
padded to 32, 64, 104 in 0.382 ms (NCHW, 1.17x) or 0.300 ms (channels-last,
1.49x). On H100 and H200 the examples below measure 1.77x for the first two,
1.53x for ``Conv2d(250, 256)`` in fp16, 1.15x in tf32 and 1.27x for the
``Conv3d``; the estimate charges cuDNN's misaligned kernels the profile's
``conv_misaligned_efficiency`` of the aligned pace (0.6 in bf16/fp16, 0.85 in tf32
on Hopper) and gives 1.63x, 1.66x, 1.65x, 1.17x and 1.33x. In NCHW it gives 1.29x
and 1.33x for the first two, where 1.13x and 1.08x were measured. The stem
exception (``Conv2d(C, 64, 3, stride=2)`` at 224x224): 3 channels take 0.805 ms in
NCHW and padded to 4 or 8 are slower (0.971, 0.986 ms); channels-last takes
0.654 ms, 0.589 ms with 4 channels and 0.477 ms with 8. The runs are in
docs/benchmarks.md.

## Example
```python
nn.Conv2d(30, 60, kernel_size=3, padding=1)
```

## Use instead
```python
nn.Conv2d(32, 64, kernel_size=3, padding=1)  # pad the channels (zeros) to multiples of 8
```
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from shapelint.check.rule_api import Example, RuleContext, phases
from shapelint.hardware import Hardware
from shapelint.model.records import (
    Change,
    Dim,
    Gemm,
    Proposal,
    Severity,
    SizeSearch,
    Suggestion,
)
from shapelint.physics.conv import ConvCall, conv_calls, misaligned_channels, rebuild

CODE = "SL401"
NAME = "conv-channels"
SEVERITY: Severity = "error"

#: search for the padded channel count up to the next multiple of this many channels
SEARCH_SPAN = 256

_NHWC = ".to(memory_format=torch.channels_last).requires_grad_()"

BAD = [
    Example("nn.Conv2d(30, 64, 3, padding=1)", f"torch.randn(64, 30, 56, 56){_NHWC}",
            expect={"parameter": "in_channels", "from": 30, "to": 32}, min_speedup=1.1),
    Example("nn.Conv2d(64, 100, 3, padding=1)", f"torch.randn(64, 64, 56, 56){_NHWC}",
            expect={"parameter": "out_channels", "from": 100, "to": 104}, min_speedup=1.1),
    # measured 1.53x
    Example("nn.Conv2d(250, 256, 3, padding=1)", f"torch.randn(64, 250, 28, 28){_NHWC}", dtype="fp16",
            expect={"parameter": "in_channels", "from": 250, "to": 256}, min_speedup=1.3),
    # tf32 rows are 4 elements to 16 bytes; measured 1.15x
    Example("nn.Conv2d(256, 250, 3, padding=1)", f"torch.randn(64, 256, 28, 28){_NHWC}", dtype="tf32",
            expect={"parameter": "out_channels", "from": 250, "to": 252}, min_speedup=1.1),
    Example("nn.ConvTranspose2d(64, 30, 4, stride=2, padding=1)", f"torch.randn(32, 64, 32, 32){_NHWC}",
            expect={"parameter": "out_channels", "from": 30, "to": 32}, min_speedup=1.1),
    # NCHW, 3-D
    Example("nn.Conv3d(30, 64, 3, padding=1)", "torch.randn(8, 30, 16, 32, 32).requires_grad_()",
            expect={"parameter": "in_channels", "from": 30, "to": 32}, min_speedup=1.1),
]
GOOD = [
    # a 3-channel stem is a known exception; its 64 output channels are aligned
    Example("nn.Conv2d(3, 64, 7, stride=2, padding=3)", "torch.randn(32, 3, 224, 224)"),
    Example("nn.Conv2d(64, 128, 3, padding=1)", f"torch.randn(64, 64, 56, 56){_NHWC}"),
    # tf32 needs 4-channel alignment only
    Example("nn.Conv2d(60, 100, 3, padding=1)", "torch.randn(64, 60, 28, 28)", dtype="tf32"),
    # plain fp32 runs on the CUDA cores: alignment does not matter
    Example("nn.Conv2d(30, 60, 3, padding=1)", "torch.randn(64, 30, 56, 56)", dtype="fp32"),
    # depthwise: one channel per group, no tensor-core GEMM
    Example("nn.Conv2d(30, 30, 3, padding=1, groups=30)", "torch.randn(64, 30, 56, 56)"),
]


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Proposal]:
    for call, members in conv_calls(gemms):
        g = members[0]
        if not hardware.uses_tensor_cores(g.dtype):
            continue
        align = hardware.align_elems(g.dtype_bytes)
        sides = misaligned_channels(call, align)
        if sides:
            yield _proposal(call, tuple(members), sides, align)


def _proposal(call: ConvCall, members: tuple[Gemm, ...], sides: dict[str, int], align: int) -> Proposal:
    """One proposal per convolution, every misaligned channel count padded (the kernel
    runs at the speed of its worst-aligned operand, so padding one side of two gains
    little); the suggestion names the output channels when they are misaligned."""
    step = align * call.groups
    names = list(sides)
    g = members[0]
    main = "out_channels" if "out_channels" in sides else "in_channels"
    params = dict(g.module_params)
    # a conv module's own attribute; a custom module's attribute of that value otherwise
    param = main if params.get(main) == sides[main] else (g.param(sides[main]) or main)

    def at(chosen: tuple[int, ...]) -> Change:
        sizes = {"in_channels": call.in_channels, "out_channels": call.out_channels, **dict(zip(names, chosen))}
        also = [f"{n} {v} → {sizes[n]}" for n, v in sides.items() if n != main]
        return Change(
            Suggestion(param, sides[main], sizes[main]),
            tuple(rebuild(h, call, sizes["in_channels"], sizes["out_channels"]) for h in members),
            f"{param} = {sides[main]} is not a multiple of {align} channels (16-byte rows in {g.dtype})"
            + (f", nor is {' / '.join(n + ' = ' + str(v) for n, v in sides.items() if n != main)}" if also else "")
            + f": the convolution's implicit GEMMs ({phases(members)}) run on slower tensor-core kernels"
            + (f"; pad {', '.join(also)} too" if also else ""),
            (("channels", sides[main]), ("align_elems", align), ("extra_channels", sizes[main] - sides[main]),
             ("padded", {n: [v, sizes[n]] for n, v in sides.items()}), ("groups", call.groups),
             ("kernel_elems", call.kernel)),
        )

    dims = tuple(Dim(value, step, SEARCH_SPAN) for value in sides.values())  # candidates() spans a step at least
    return Proposal(CODE, NAME, SEVERITY, members, SizeSearch(dims, at))
