"""Convolutions run on NCHW tensors, which the tensor cores cannot read directly.

## What it does
Finds the 2-D convolutions of the step (forward, grad-input, grad-weight) whose
activations are in PyTorch's default NCHW layout (``torch.contiguous_format``)
while they run in bf16, fp16 or tf32, and prices each by the kernel its layout gets
(``shapelint.physics.conv_kernels``): cuDNN's NHWC kernels transpose every NCHW
activation they read or write, and a weight larger than 1x1, each in a kernel of its
own (a read and a write at ``conv_transpose_efficiency`` of the copy bandwidth, a
kernel's fixed time and the gap before the next); a depthwise convolution runs PyTorch's own NCHW kernel
against cuDNN's NHWC one (``depthwise_nchw_efficiency`` against
``depthwise_nhwc_efficiency``); a large 1x1 convolution runs as cuBLASLt GEMMs on
NCHW without transposes (nothing to gain); a grouped one whose group width is not a
multiple of 64 runs slower channels-last (``grouped_nhwc_efficiency``), which the
estimate counts against the gain. The fix is
``model.to(memory_format=torch.channels_last)`` and channels-last inputs; one
finding for the model covers every such convolution. Its saving on the step is the
model traced again channels-last (``Change.memory_format``): batch norms and pointwise
ops take their channels-last kernels with the convolutions (``shapelint.price.relaid``).

Convolutions whose channel counts are not 16-byte multiples are left to SL401:
there channels-last alone was measured to gain nothing (below); pad first. A
stem's few input channels (``in_channels <= 4``) do not count as misaligned
(SL401's exception): a channels-last stem was measured faster. 1-D and 3-D
convolutions are skipped: ``torch.channels_last`` is a 4-D format (a ``Conv1d``'s
activations have none; wav2vec2's feature encoder measured 1.00x).

## Why is this bad?
Every transpose reads and writes the whole activation, and PyTorch's NCHW
depthwise kernel runs at a third of cuDNN's NHWC rate. Measured (H100, torch 2.11,
cuDNN 9.19, bf16, batch 64, forward + backward, GPU kernel time; estimated with
the H100 profile in brackets, without the gaps between kernels that kernel time
leaves out): ``Conv2d(64, 64, 3)`` at 56x56 1.59x (1.51x); a 1x1 ``Conv2d(1024,
256)`` at 14x14 1.56x (1.51x); at 56x56 a 1x1 ``Conv2d(256, 64)`` 1.00x (1.00x);
depthwise 3x3 with 144 channels at 72x72 2.86x (3.28x), 5x5 with 288 at 36x36 3.22x
(3.20x); grouped 3x3 with 56 channels per group 0.75x (0.50x), with 64 per group
1.21x (1.50x). ResNet-50 at batch 8 (``--verify``, each call timed alone): 1.80x
(1.88x). The MBConv stack's whole training step (batch 256, 224x224, H100): 132.7 ms
NCHW, 53.5 ms with the whole model channels-last (estimated 129.6 and 55.2 ms).
ResNet-50 at batch 64: 30.9 ms NCHW, 18.6-27.5 ms channels-last on three hosts (its
channels-last step is near host-bound; estimated 33.2 and 25.2 ms), at batch 128 59.5
and 34.2 ms (estimated 63.7 and 41.0: its convolutions are priced high). The example ConvNet's misaligned
channels (30, 60, 100) step in 0.447 ms either way (H200); padded to 32, 64, 104,
in 0.382 ms NCHW and 0.300 ms channels-last. The runs are in docs/benchmarks.md
and docs/step-model.md.

## Example
```python
model = ResNet50().cuda()
out = model(images)  # images: [N, 3, H, W], contiguous
```

## Use instead
```python
model = ResNet50().cuda().to(memory_format=torch.channels_last)
out = model(images.to(memory_format=torch.channels_last))
```
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from shapelint.check.rule_api import Example, RuleContext
from shapelint.hardware import Hardware
from shapelint.model.records import Change, Gemm, Proposal, Severity, Suggestion
from shapelint.physics.conv import ConvCall, as_channels_last, conv_calls, misaligned_channels
from shapelint.physics.conv_kernels import BATCH_NORM, conv_kernel

CODE = "SL402"
NAME = "conv-channels-last"
SEVERITY: Severity = "warning"

#: modules named in the message (the rest are counted)
MODULES_SHOWN = 3

BAD = [
    # measured 2.18x
    Example("nn.Conv2d(64, 64, 3, padding=1)", "torch.randn(64, 64, 56, 56).requires_grad_()",
            expect={"parameter": "memory_format", "from": "contiguous", "to": "channels_last"}, min_speedup=1.2),
    # a ResNet-style stem: its 3 input channels are SL401's exception, its output aligned; measured 2.03x
    Example("nn.Sequential(nn.Conv2d(3, 64, 7, stride=2, padding=3), nn.ReLU(), nn.Conv2d(64, 128, 3, padding=1))",
            "torch.randn(32, 3, 224, 224)", dtype="fp16",
            expect={"parameter": "memory_format", "to": "channels_last"}, min_speedup=1.2),
    # measured 1.48x
    Example("nn.Conv2d(128, 128, 3, padding=1)", "torch.randn(64, 128, 28, 28)", dtype="tf32",
            expect={"to": "channels_last"}, min_speedup=1.1),
    # depthwise: PyTorch's own NCHW kernel against cuDNN's NHWC one, measured 2.86x (H100)
    Example("nn.Conv2d(144, 144, 3, padding=1, groups=144)", "torch.randn(64, 144, 72, 72).requires_grad_()",
            expect={"to": "channels_last"}, min_speedup=2.0),
]
GOOD = [
    Example("nn.Conv2d(64, 64, 3, padding=1)",
            "torch.randn(64, 64, 56, 56).to(memory_format=torch.channels_last).requires_grad_()"),
    # plain fp32 runs on the CUDA cores, which take NCHW as it is
    Example("nn.Conv2d(64, 64, 3, padding=1)", "torch.randn(64, 64, 56, 56)", dtype="fp32"),
    # misaligned channels: pad first (SL401); channels-last alone does not help them
    Example("nn.Conv2d(30, 60, 3, padding=1)", "torch.randn(64, 30, 56, 56)"),
    # a large 1x1 runs as cuBLASLt GEMMs on NCHW tensors: nothing to gain (measured 1.00x)
    Example("nn.Conv2d(256, 64, 1)", "torch.randn(64, 256, 56, 56)"),
    # 1-D: no channels-last format for 3-D tensors
    Example("nn.Conv1d(512, 512, 3, stride=2)", "torch.randn(8, 512, 16000)"),
    Example("nn.Linear(1024, 4096)", "torch.randn(4096, 1024)"),
]


def _nchw(members: Sequence[Gemm]) -> bool:
    return any(op.copied for g in members for op in (g.a, g.b, g.out))


def _message(flagged: Sequence[tuple[ConvCall, list[Gemm]]], modules: list[str], context: RuleContext) -> str:
    """What runs slower on NCHW tensors (cuDNN's transposes, PyTorch's depthwise kernel),
    and the change."""
    shown = ", ".join(modules[:MODULES_SHOWN]) + (f" and {len(modules) - MODULES_SHOWN} more"
                                                  if len(modules) > MODULES_SHOWN else "")
    kinds = {conv_kernel(call) for call, _ in flagged}
    why = [w for w, kind in (("cuDNN transposes their activations to NHWC for the tensor cores on every call",
                              bool(kinds & {"implicit_gemm", "grouped"})),
                             ("PyTorch runs the depthwise ones on its own NCHW kernel, about a third of the rate "
                              "of cuDNN's NHWC one", "depthwise" in kinds)) if kind]
    bn = " (its batch norms then run their channels-last kernels too)" \
        if any(op.name in BATCH_NORM for op in context.ops) else ""
    return (f"{len(modules)} convolution{'s' if len(modules) > 1 else ''} ({shown}) run on NCHW tensors: "
            f"{', and '.join(why) or 'they run other kernels than channels-last'}; convert the model and its "
            f"inputs with .to(memory_format=torch.channels_last){bn}")


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Proposal]:
    flagged: list[tuple[ConvCall, list[Gemm]]] = []
    for call, members in conv_calls(gemms):
        g = members[0]
        if not hardware.uses_tensor_cores(g.dtype) or not _nchw(members) or call.spatial_dims != 2:
            continue
        if misaligned_channels(call, hardware.align_elems(g.dtype_bytes)):
            continue  # SL401: pad first
        flagged.append((call, members))
    if not flagged:
        return
    covered = tuple(g for _, members in flagged for g in members)
    modules = list(dict.fromkeys(call.module for call, _ in flagged))
    yield Proposal(CODE, NAME, SEVERITY, covered, Change(
        Suggestion("memory_format", "contiguous", "channels_last"),
        tuple(as_channels_last(g) for g in covered),
        _message(flagged, modules, context),
        (("modules", modules), ("copy_bytes", sum(g.copy_bytes for g in covered))),
        memory_format="channels_last",
    ))
