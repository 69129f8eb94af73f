"""The step estimate kernel by kernel: every entry the step model prices, with its class,
its time and its launches, so that a profile of the real step can be laid beside it
(``benchmarks/step_profile.py``) and an error in ``StepTime.by_class`` traced to the ops
that make it.

The entries are what ``shapelint.price.step`` itself issues, in its order (its
``Timeline``, filled by the same functions ``step_time`` calls): nothing is priced
here a second time, so the entries of each class add up to ``StepTime.by_class``. An
eager step has one entry per op of the capture; a compiled one an entry per GEMM and
attention op, one per fused region (Inductor's kernels), one for the ops run between
graphs; both end with the optimizer.

Each entry also names a finer class (``detail``) where the class mixes kernels that a
profile tells apart: a convolution's GEMM by the kernel PyTorch runs it on
(``shapelint.physics.conv_kernels``: ``conv:depthwise``, ``conv:gemm_1x1``,
``conv:grouped``, ``conv:implicit_gemm``), with the part of its time that is cuDNN's
NCHW<->NHWC transposes (``layout_ms``, which a profile shows as separate copy kernels).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from shapelint.hardware import Hardware
from shapelint.model.records import Gemm, Op
from shapelint.physics.conv import as_channels_last
from shapelint.physics.conv_kernels import kernel_of
from shapelint.price.gemm import gemm_time
from shapelint.price.host import host_costs
from shapelint.price.inductor import Fused
from shapelint.price.kernels import Mode, optimizer_ms
from shapelint.price.step import Step, Timeline, _issue_compiled, _issue_ops

#: the finer class of the part of a convolution's time that is its layout transposes
LAYOUT_DETAIL = "conv:transposes"


@dataclass(frozen=True)
class PricedKernel:
    """One entry of the step estimate: ``kind`` its class (the keys of
    ``StepTime.by_class``), ``detail`` a finer class, ``name`` the aten op (or what a
    fused region holds), ``ms`` its kernel time, ``kernels`` its launches, ``gemms``
    the GEMM records it runs, ``layout_ms`` the part of ``ms`` that is cuDNN's layout
    transposes."""

    kind: str
    detail: str
    name: str
    ms: float
    kernels: int
    backward: bool = False
    owner: str = ""
    gemms: tuple[int, ...] = ()
    shape: str = ""
    layout_ms: float = 0.0

    @property
    def label(self) -> str:
        """What identifies this kind of entry across repeated layers: its op, its class,
        its direction and its shape (not its module)."""
        return f"{self.name} [{self.detail}{', bwd' if self.backward else ''}]{' ' + self.shape if self.shape else ''}"

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "detail": self.detail, "name": self.name, "ms": round(self.ms, 5),
                "kernels": self.kernels, "backward": self.backward, "owner": self.owner, "gemms": list(self.gemms),
                "shape": self.shape, "layout_ms": round(self.layout_ms, 5)}


class _Recording(Timeline):
    """The step model's timeline, remembering the class of each entry it is given."""

    def __init__(self, per_kernel_us: float) -> None:
        super().__init__(per_kernel_us)
        self.kinds: dict[int, str] = {}

    def add(self, kind: str, ms: float, launched: int, host_ms: float = 0.0) -> None:
        self.kinds[len(self.issued)] = kind
        super().add(kind, ms, launched, host_ms)


def priced_kernels(step: Step, hw: Hardware, mode: Mode = "eager", optimizer: str = "adamw") -> list[PricedKernel]:
    """Every entry of ``step``'s estimate on ``hw`` in ``mode``, in the order the step
    model issues them (see the module docstring)."""
    per_kernel_us, _ = host_costs(hw, mode)
    t = _Recording(per_kernel_us)
    _issue_ops(t, step, hw, mode, {})
    regions = step.regions if mode == "compile" else []
    between = _issue_compiled(t, step, hw) if mode == "compile" else 0.0
    out: list[PricedKernel] = []
    for at, (ms, launched, _) in enumerate(t.issued):
        kind = t.kinds.get(at)
        if at < len(step.ops):
            if kind is not None:
                out.append(_of_op(step, step.ops[at], kind, ms, launched, hw, mode))
        elif at - len(step.ops) < len(regions):
            out.append(_of_region(step.ops, regions[at - len(step.ops)], ms, launched))
        elif launched or ms:
            out.append(PricedKernel("between_graphs", "between_graphs", "ops between graphs", ms, launched,
                                    shape=f"host {between:.2f} ms"))
    if step.training:
        opt_ms, launches = optimizer_ms(step.params, optimizer, hw)
        if launches:
            out.append(PricedKernel("optimizer", "optimizer", optimizer, opt_ms, launches,
                                    shape=f"{len(step.params)} tensors"))
    return out


def _of_op(step: Step, op: Op, kind: str, ms: float, launched: int, hw: Hardware, mode: Mode) -> PricedKernel:
    """An op of the capture as the step model priced it."""
    gemms = [step.gemms[i] for i in op.gemms]
    detail, layout = kind, 0.0
    if gemms and kind == "gemm":
        convs = [g for g in gemms if g.role == "conv"]
        detail = _conv_detail(convs[0]) if convs else "matmul"
        laid_out = mode == "compile" and step.channels_last_convs
        layout = sum(transposes_ms(as_channels_last(g) if laid_out else g, hw) for g in convs)
    elif gemms and kind == "attention":
        extra = dict(gemms[0].extra)
        kernel = extra.get("compiled") if mode == "compile" and "compiled" in extra else extra.get("kernel")
        detail = f"attention:{kernel}" if kernel else "attention"
    return PricedKernel(kind, detail, op.name, ms, launched, op.backward, op.owner, op.gemms, _shape(gemms),
                        min(layout, ms))


def _of_region(ops: Sequence[Op], region: Fused, ms: float, launched: int) -> PricedKernel:
    """A fused region of a compiled step: named by the distinct ops it holds."""
    held = [ops[i] for i in region.ops]
    names = list(dict.fromkeys(op.name for op in held))
    name = "+".join(names[:4]) + (f"+{len(names) - 4} more" if len(names) > 4 else "")
    first = held[0] if held else None
    return PricedKernel("fused", "fused", name, ms, launched, bool(first and first.backward),
                        first.owner if first else "", shape=f"{len(held)} ops, {region.bytes / 2**20:.1f} MiB")


def _conv_detail(g: Gemm) -> str:
    kernel = kernel_of(g)
    return f"conv:{kernel}" if kernel is not None else "conv"


def transposes_ms(g: Gemm, hw: Hardware) -> float:
    """The part of a GEMM's time that is its operands' copies (a convolution's cuDNN
    layout transposes): its time less the larger of its roofs."""
    t = gemm_time(g, hw)
    return max(0.0, 1e3 * (t.seconds - max(t.compute_s, t.memory_s, hw.min_gemm_us * 1e-6)))


def _shape(gemms: Sequence[Gemm]) -> str:
    """The GEMMs of an op as ``op m x n x k`` (``b x`` batched)."""
    parts = [f"{g.op} {f'{g.batch}x' if g.batch > 1 else ''}{g.m}x{g.n}x{g.k} {g.dtype}" for g in gemms[:3]]
    return "; ".join(parts) + (f"; +{len(gemms) - 3}" if len(gemms) > 3 else "")


def by_detail(entries: Iterable[PricedKernel]) -> dict[str, float]:
    """Kernel time per finer class, a convolution's layout transposes apart."""
    out: dict[str, float] = {}
    for e in entries:
        out[e.detail] = out.get(e.detail, 0.0) + e.ms - e.layout_ms
        if e.layout_ms:
            out[LAYOUT_DETAIL] = out.get(LAYOUT_DETAIL, 0.0) + e.layout_ms
    return out


def by_kind(entries: Iterable[PricedKernel]) -> dict[str, float]:
    """Kernel time per class: ``StepTime.by_class`` recomputed from the entries."""
    out: dict[str, float] = {}
    for e in entries:
        out[e.kind] = out.get(e.kind, 0.0) + e.ms
    return out


def top(entries: Iterable[PricedKernel], n: int = 15) -> list[tuple[str, int, float, PricedKernel]]:
    """The ``n`` costliest kinds of entry (``PricedKernel.label``): (label, how many,
    total ms, the first of them), costliest first."""
    groups: dict[str, tuple[int, float, PricedKernel]] = {}
    for e in entries:
        count, ms, first = groups.get(e.label, (0, 0.0, e))
        groups[e.label] = (count + 1, ms + e.ms, first)
    ranked = sorted(groups.items(), key=lambda kv: -kv[1][1])[:n]
    return [(label, count, ms, first) for label, (count, ms, first) in ranked]


__all__ = ["LAYOUT_DETAIL", "PricedKernel", "by_detail", "by_kind", "priced_kernels", "top", "transposes_ms"]
