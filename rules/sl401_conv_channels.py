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
the smallest multiple that the estimator finds as fast as any larger one.

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
extra copies. Measured on an H200 (torch 2.11, bf16, batch 64, 56x56, forward +
backward, GPU kernel time): ``Conv2d(30, 64, 3)`` takes 0.327 ms channels-last
against 0.229 ms for ``Conv2d(32, 64, 3)`` (1.43x; 1.13x in NCHW);
``Conv2d(64, 100, 3)`` 0.613 ms against 0.431 ms for 104 output channels (1.42x;
1.08x in NCHW). The example ConvNet (channels 30, 60, 100) steps in 0.447 ms;
padded to 32, 64, 104 in 0.382 ms (NCHW, 1.17x) or 0.300 ms (channels-last,
1.49x); its conv1 and conv2 alone gain 1.28x and 1.29x. Later H100/H200 runs of
the examples below: 1.77x for the first two, 1.53x for ``Conv2d(250, 256)`` in
fp16, 1.15x in tf32, 1.27x for the ``Conv3d``. The estimate charges cuDNN's
misaligned kernels the profile's ``conv_misaligned_efficiency`` of the aligned
pace (0.6 in bf16/fp16, 0.85 in tf32 on Hopper), memory-bound or not: 1.63x,
1.66x, 1.65x, 1.17x and 1.33x for those examples, 1.23x / 1.24x for conv1 /
conv2 (H200 profile); 1.29x and 1.33x for the first two in NCHW, where 1.13x and
1.08x were measured. The stem exception, measured (``Conv2d(C, 64, 3, stride=2)`` at 224x224):
3 channels take 0.805 ms in NCHW, padded to 4 or 8 slower (0.971, 0.986 ms); in
channels-last 0.654 ms, 4 channels 0.589 ms and 8 channels 0.477 ms.

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

from dataclasses import dataclass, replace
from math import prod
from typing import Iterable, Sequence, cast

from shapelint.estimate import best_size, total_ms
from shapelint.hardware import Hardware, ceil_div
from shapelint.records import Finding, Gemm, Operand, Suggestion
from shapelint.rule_api import Example, RuleContext, graded, make_finding

CODE = "SL401"
NAME = "conv-channels"
SEVERITY = "error"

#: below this estimated speedup a finding is a warning, not an error
ERROR_SPEEDUP = 1.25
#: search for the padded channel count up to the next multiple of this many channels
SEARCH_SPAN = 256
#: a stem's input channels (RGB images...) up to this many are left alone: cuDNN has
#: kernels for 3- and 4-channel inputs, and padding the image buys little
STEM_MAX_IN_CHANNELS = 4

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


# -- the implicit GEMMs of one convolution -------------------------------------
#
# Every convolution GEMM multiplies a "P" channel count by the kernel size R·S and
# takes a "Q" channel count as is (per group): P = in_channels, Q = out_channels for
# a convolution, the other way round for a transposed one (which runs the dgrad GEMM
# forward and the fwd GEMM for its input gradient). The operands are the activations
# as they lie in memory (rows = N·H·W, ld = channels, each group's share of the channels;
# see shapelint.gemm_shapes):
#   fwd    m = rows,  n = Q/g,     k = P/g·RS   A = P side [rows', P], out = Q side [rows, Q]
#   dgrad  m = rows,  n = P/g·RS,  k = Q/g      A = Q side [rows, Q], out = P side [rows', P]
#   wgrad  m = Q/g,   n = P/g·RS,  k = rows     A = Q sideᵀ (ld Q), B = P side [rows', P]


@dataclass(frozen=True)
class ConvCall:
    """One convolution (its recorded geometry), whose forward and backward GEMMs share it."""

    module: str
    extra: tuple[tuple[str, object], ...]

    def _get(self, key: str) -> object:
        return dict(self.extra)[key]

    def _shape(self, key: str) -> tuple[int, ...]:
        return tuple(int(d) for d in cast(Sequence[int], self._get(key)))

    @property
    def transposed(self) -> bool:
        return bool(self._get("transposed"))

    @property
    def groups(self) -> int:
        return int(cast(int, self._get("groups")))

    @property
    def in_channels(self) -> int:
        return self._shape("input")[1]

    @property
    def out_channels(self) -> int:
        w = self._shape("weight")
        return w[1] * self.groups if self.transposed else w[0]

    @property
    def kernel(self) -> int:
        return prod(self._shape("weight")[2:])

    @property
    def p(self) -> int:
        return self.out_channels if self.transposed else self.in_channels

    @property
    def q(self) -> int:
        return self.in_channels if self.transposed else self.out_channels

    def with_channels(self, c_in: int, c_out: int) -> tuple[tuple[str, object], ...]:
        """The recorded geometry with other channel counts."""
        n, _, *spatial = self._shape("input")
        kernel = self._shape("weight")[2:]
        g = self.groups
        x = dict(self.extra)
        x["input"] = (n, c_in, *spatial)
        x["weight"] = (c_in, c_out // g, *kernel) if self.transposed else (c_out, c_in // g, *kernel)
        return tuple(x.items())


def gemm_kind(g: Gemm, transposed: bool) -> str:
    """Which of the three implicit GEMMs ``g`` is (a transposed convolution swaps fwd and dgrad)."""
    if g.op.endswith("grad_weight"):
        return "wgrad"
    if g.op.endswith("grad_input"):
        return "fwd" if transposed else "dgrad"
    return "dgrad" if transposed else "fwd"


def conv_calls(gemms: Sequence[Gemm]) -> list[tuple[ConvCall, list[Gemm]]]:
    """Each convolution of the step with its GEMMs (forward and backward), by module
    and recorded geometry."""
    calls: dict[tuple[str, object], list[Gemm]] = {}
    for g in gemms:
        if g.role == "conv" and {"input", "weight", "groups", "transposed"} <= dict(g.extra).keys():
            calls.setdefault((g.module, g.extra), []).append(g)
    return [(ConvCall(module, cast(tuple[tuple[str, object], ...], extra)), members)
            for (module, extra), members in calls.items()]


def rebuild(g: Gemm, c: ConvCall, c_in: int, c_out: int) -> Gemm:
    """GEMM ``g`` of convolution ``c`` with ``c_in`` input and ``c_out`` output channels
    (the rows, N·H·W, stay as they are)."""
    p, q = (c_out, c_in) if c.transposed else (c_in, c_out)
    groups = c.groups
    pg, qg, rs = p // groups, q // groups, c.kernel
    kind = gemm_kind(g, c.transposed)
    extra = c.with_channels(c_in, c_out)

    def act(op: Operand, channels: int) -> Operand:
        """An activation operand with ``channels`` channels (each group's share of them)."""
        per = channels // groups
        if op.transposed:  # the Q side of wgrad, transposed
            return replace(op, rows=per, ld=channels, batch_stride=per if groups > 1 else 0)
        return replace(op, cols=per, ld=channels, batch_stride=per if groups > 1 else 0)

    def mat(op: Operand, rows: int, cols: int, ld: int) -> Operand:
        """A weight-shaped operand (one matrix per group)."""
        return replace(op, rows=rows, cols=cols, ld=ld, batch_stride=rows * cols if groups > 1 else 0)

    if kind == "fwd":  # reads the P side, writes the Q side; B = Wᵀ
        return replace(g, n=qg, k=pg * rs, a=act(g.a, p), b=mat(g.b, pg * rs, qg, pg * rs), out=act(g.out, q),
                       extra=extra)
    if kind == "dgrad":  # reads the Q side, writes the P side; B = W
        return replace(g, n=pg * rs, k=qg, a=act(g.a, q), b=mat(g.b, qg, pg * rs, pg * rs), out=act(g.out, p),
                       extra=extra)
    # wgrad reads the Q side transposed and the P side
    return replace(g, m=qg, n=pg * rs, a=act(g.a, q), b=act(g.b, p), out=mat(g.out, qg, pg * rs, pg * rs),
                   extra=extra)


def misaligned_channels(c: ConvCall, align: int) -> dict[str, int]:
    """The channel parameters of ``c`` this rule would pad (per group not a multiple of
    ``align``; a stem's few input channels and depthwise convolutions excepted)."""
    g = c.groups
    if c.in_channels // g == 1 or c.out_channels // g == 1:
        return {}  # depthwise: no tensor-core GEMM
    out = {}
    if (c.in_channels // g) % align and c.in_channels > STEM_MAX_IN_CHANNELS:
        out["in_channels"] = c.in_channels
    if (c.out_channels // g) % align:
        out["out_channels"] = c.out_channels
    return out


# -- the rule ------------------------------------------------------------------


def check(gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Finding]:
    for call, members in conv_calls(gemms):
        g = members[0]
        if not hardware.uses_tensor_cores(g.dtype):
            continue
        align = hardware.align_elems(g.dtype_bytes)
        sides = misaligned_channels(call, align)
        if sides:
            f = _finding(call, members, sides, align, hardware)
            if f.est_ms and (f.est_ms - (f.est_ms_after or 0.0)) >= context.min_loss * f.est_ms:
                yield f


def _finding(call: ConvCall, members: list[Gemm], sides: dict[str, int], align: int, hw: Hardware) -> Finding:
    """One finding per convolution: every misaligned channel count padded (the kernel
    runs at the speed of its worst-aligned operand, so padding one side of two gains
    little); the suggestion names the output channels when they are misaligned."""
    step = align * call.groups
    sizes = {"in_channels": call.in_channels, "out_channels": call.out_channels}
    for name in sides:  # the other side at its first aligned size while this one is searched
        sizes[name] = ceil_div(sizes[name], step) * step

    def after(changed: dict[str, int]) -> list[Gemm]:
        return [rebuild(h, call, changed["in_channels"], changed["out_channels"]) for h in members]

    for name, value in sides.items():
        sizes[name] = best_size(value, lambda c: total_ms(after({**sizes, name: c}), hw), step,
                                search=max(SEARCH_SPAN, step))
    g = members[0]
    main = "out_channels" if "out_channels" in sides else "in_channels"
    params = dict(g.module_params)
    # a conv module's own attribute; a custom module's attribute of that value otherwise
    param = main if params.get(main) == sides[main] else (g.param(sides[main]) or main)
    also = [f"{n} {v} → {sizes[n]}" for n, v in sides.items() if n != main]
    phases = "/".join(sorted({h.phase for h in members}))
    f = make_finding(
        CODE, NAME, SEVERITY, members, after(sizes), hw,
        f"{param} = {sides[main]} is not a multiple of {align} channels (16-byte rows in {g.dtype})"
        + (f", nor is {' / '.join(n + ' = ' + str(v) for n, v in sides.items() if n != main)}" if also else "")
        + f": the convolution's implicit GEMMs ({phases}) run on slower tensor-core kernels"
        + (f"; pad {', '.join(also)} too" if also else ""),
        Suggestion(param, sides[main], sizes[main]),
        {"channels": sides[main], "align_elems": align, "extra_channels": sizes[main] - sides[main],
         "padded": {n: [v, sizes[n]] for n, v in sides.items()}, "groups": call.groups,
         "kernel_elems": call.kernel},
    )
    return graded(f, ERROR_SPEEDUP)
