"""The data types every stage shares: GEMM records (capture), proposals (check) and
findings (price).

A `Gemm` is recorded in one place (`shapelint.capture.run`, from the shapes that
`shapelint.physics.gemm_shapes` extracts). Later stages never change a record: a proposal
describes a changed layer by new records derived with `dataclasses.replace`
(`shapelint.physics.reshape`), and the pricer times both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from shapelint.model.dtypes import DTYPE_BYTES
from shapelint.model.graphs import GraphBreaks as GraphBreaks
from shapelint.model.locations import ConfigLocation, Pretrained
from shapelint.model.locations import Source as Source
from shapelint.model.parallel import ParallelChange
from shapelint.model.step_ops import KernelClass as KernelClass
from shapelint.model.step_ops import Op as Op
from shapelint.model.verification import FindingVerification

Phase = Literal["forward", "grad_input", "grad_weight", "recompute"]
#: what a GEMM is known to be: a fused attention kernel's score-producing (QKᵀ, dP) or
#: score-reading GEMM, a convolution's implicit GEMM, a matmul fed by a softmax
#: (attention written by hand), or nothing special ("")
Role = Literal["", "attn_scores", "attn_values", "conv", "after_softmax"]
#: the roles of the GEMMs inside a fused attention kernel
ATTN_ROLES: frozenset[str] = frozenset({"attn_scores", "attn_values"})
Severity = Literal["info", "warning", "error"]
#: how a proposal's gain is counted: wall-clock time of the same work, or work per
#: second (padding a layer or raising the batch does more work in about the same time)
Gain = Literal["time", "throughput"]
#: a memory format a change converts the whole model and its inputs to
#: (``model.to(memory_format=torch.channels_last)``)
MemoryFormat = Literal["channels_last"]

def gemm_flops(m: int, n: int, k: int, batch: int = 1) -> int:
    """A GEMM's FLOPs: a multiply and an add per (m, n, k) point."""
    return 2 * m * n * k * batch


@dataclass(frozen=True)
class Operand:
    """How one GEMM operand (or the output) lies in memory, as cuBLAS would see it.

    ``rows`` x ``cols`` is the matrix the GEMM reads (A is m x k, B is k x n, the
    output m x n). ``ld`` is its leading dimension in elements: the row stride of a
    row-major matrix, the column stride of a transposed (column-major) one.
    ``copied`` means neither dimension has unit stride, so torch makes a contiguous
    copy first (and the copy's ``ld`` is what the kernel sees). ``offset`` is the
    element offset of the first element from an aligned allocation, and
    ``batch_stride`` the stride between the matrices of a batched GEMM (0 if none).
    ``in_memory`` is False for matrices a fused kernel keeps on chip (attention scores).
    """

    rows: int
    cols: int
    ld: int
    transposed: bool = False
    copied: bool = False
    offset: int = 0
    batch_stride: int = 0
    in_memory: bool = True

    @property
    def single_line(self) -> bool:
        """One row (or, transposed, one column): no second line whose start could be
        misaligned, so the leading dimension does not matter."""
        return (self.cols if self.transposed else self.rows) <= 1

    def to_json(self) -> dict[str, object]:
        return {
            "rows": self.rows,
            "cols": self.cols,
            "ld": self.ld,
            "transposed": self.transposed,
            "copied": self.copied,
            "offset": self.offset,
            "batch_stride": self.batch_stride,
            "in_memory": self.in_memory,
        }


@dataclass(frozen=True)
class Gemm:
    """One matrix multiply of a training (or inference) step.

    ``flops`` = 2·m·n·k·batch. ``module`` is the dotted path of the module whose
    forward created this GEMM (backward GEMMs included); ``module_params`` are that
    module's integer constructor attributes (``in_features``, ``out_features``, ...),
    so a rule can name the parameter that produced a dimension.
    ``source`` is the line of user code that ran the forward op; ``defined_at`` the
    line that constructed the owning module.
    ``role`` tags GEMMs with a known meaning: ``attn_scores``/``attn_values`` (a
    fused attention kernel), ``conv`` (an implicit GEMM), ``after_softmax`` (an
    operand came out of a softmax: attention written by hand).
    """

    index: int
    op: str
    phase: Phase
    m: int
    n: int
    k: int
    batch: int
    dtype: str
    a: Operand
    b: Operand
    out: Operand
    module: str
    module_type: str
    module_params: tuple[tuple[str, int], ...] = ()
    source: Source | None = None
    defined_at: Source | None = None
    role: Role = ""
    extra: tuple[tuple[str, object], ...] = field(default=())

    @property
    def flops(self) -> int:
        return gemm_flops(self.m, self.n, self.k, self.batch)

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def min_bytes(self) -> int:
        """Fewest bytes moved through device memory: A and B read once, C written
        once (operands a fused kernel keeps on chip are not counted)."""
        elems = 0
        for op in (self.a, self.b, self.out):
            if op.in_memory:
                elems += op.rows * op.cols
        return elems * self.batch * self.dtype_bytes

    @property
    def copy_bytes(self) -> int:
        """Bytes read and written by the copies an operand needs before the kernel (no
        unit stride; for a convolution the NCHW <-> NHWC transpose): each ``copied``
        operand once (over a convolution's groups, ``batch``: the whole tensor)."""
        return sum(2 * op.rows * op.cols * self.batch * self.dtype_bytes
                   for op in (self.a, self.b, self.out) if op.copied)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP per byte."""
        return self.flops / max(1, self.min_bytes)

    def param(self, value: int) -> str | None:
        """The owning module's constructor parameter whose value is ``value``."""
        for name, v in self.module_params:
            if v == value:
                return name
        return None

    def to_json(self) -> dict[str, object]:
        return {
            "index": self.index,
            "op": self.op,
            "phase": self.phase,
            "module": self.module,
            "module_type": self.module_type,
            "m": self.m,
            "n": self.n,
            "k": self.k,
            "batch": self.batch,
            "dtype": self.dtype,
            "flops": self.flops,
            "source": self.source.to_json() if self.source else None,
            "defined_at": self.defined_at.to_json() if self.defined_at else None,
            "role": self.role,
            "layout": {"a": self.a.to_json(), "b": self.b.to_json(), "out": self.out.to_json()},
        }


@dataclass(frozen=True)
class Suggestion:
    """Change ``parameter`` from ``from_`` to ``to`` (a constructor argument, a config
    key, or how the model is run: ``dtype``, ``batch``, ``memory_format``...)."""

    parameter: str
    from_: int | str
    to: int | str

    def to_json(self) -> dict[str, object]:
        return {"parameter": self.parameter, "from": self.from_, "to": self.to}

    def __str__(self) -> str:
        return f"{self.parameter}: {self.from_} → {self.to}"


#: facts a rule states about what it found, for the report only (JSON ``details``): no
#: other stage reads them; what another stage needs is a typed field
Facts = tuple[tuple[str, object], ...]


@dataclass(frozen=True)
class Work:
    """Device work: GEMMs, plus bytes through memory that no GEMM record carries (a
    copy), plus memory-bound ops of the step (the scaling, masking, casts, softmax and
    dropout a hand-written attention runs over its score matrix), each priced as the
    step prices it."""

    gemms: tuple[Gemm, ...] = ()
    traffic_bytes: int = 0
    ops: tuple[Op, ...] = ()


@dataclass(frozen=True)
class Change:
    """One concrete change and what it does to the records a proposal covers:
    ``after`` holds one record per covered GEMM, in the same order (so that each pair
    can be timed on a GPU), ``added`` any work the change adds besides them (the
    recomputed QKᵀ of a fused attention backward)."""

    suggestion: Suggestion
    after: tuple[Gemm, ...]
    message: str
    facts: Facts = ()
    added: Work = Work()
    #: tensors the change pads and the step must slice back (a side cost on the step)
    slices: tuple[Slice, ...] = ()
    #: the size changed is a vocabulary of this many tokens: the tokenizer keeps them, so
    #: the logits are sliced back (``--verify --step``), the embedding of the same
    #: vocabulary grows with it (``--fix``), and a pretrained model pads it in code
    vocab: int | None = None
    #: memory-bound ops of the step that the change folds into its kernel, so the step
    #: runs them no more (a hand-written attention's score chain, fused by SDPA)
    fuses: tuple[Op, ...] = ()
    #: what the change does to the parallel layout's communication (layers it shards,
    #: FSDP2 groups it merges), applied by the step model; None: nothing
    parallel: ParallelChange | None = None
    #: the change converts the whole model and its inputs to this memory format: every op
    #: that reads a converted activation changes kernel (batch norm, pointwise ops), not
    #: only the covered GEMMs, so the step model prices the step as traced in that format
    #: (``shapelint.price.saving.StepModel``)
    memory_format: MemoryFormat | None = None


@dataclass(frozen=True)
class Slice:
    """A tensor padded to ``padded`` columns and sliced back to ``cols`` every step
    (``[rows, padded]`` logits of a padded vocabulary): the forward reads the slice
    strided, and the backward writes its gradient into a zero-filled padded tensor."""

    rows: int
    cols: int
    padded: int
    element_bytes: int


@dataclass(frozen=True)
class Dim:
    """A size the pricer may choose: the multiples of ``step`` (and of ``must_divide``,
    the tensor-parallel degree) from ``value`` up to the next multiple of ``search``;
    smaller sizes, where the rule offers them, at most ``below`` under ``value``."""

    value: int
    step: int
    search: int
    must_divide: int = 1
    below: int = 0


@dataclass(frozen=True)
class SizeSearch:
    """A change whose new size the pricer picks: ``at(sizes)`` builds the change for
    one size per ``dims`` entry. ``fits(size)`` (of the first dim), when given, is the
    rule's test that a size removes the problem: the chosen size must pass it, and the
    largest passing size below ``value`` (at most the dim's ``below`` under it) is
    offered as well."""

    dims: tuple[Dim, ...]
    at: Callable[[tuple[int, ...]], Change]
    fits: Callable[[int], bool] | None = None


@dataclass(frozen=True)
class Proposal:
    """What a rule returns: what is wrong, on which records, and the change.

    ``now`` is the covered work as the GPU runs it when the records do not show it
    (a head dimension the fused kernel pads; softmax passes around hand-written
    attention); None means the records themselves. ``references`` are other ways the
    same work may run, priced for the report (``<name>_ms``); ``alternatives`` other
    changes worth naming beside the main one.
    """

    code: str
    name: str
    severity: Severity
    gemms: tuple[Gemm, ...]
    change: Change | SizeSearch
    gain: Gain = "time"
    now: Work | None = None
    source: Source | None = None
    references: tuple[tuple[str, Work], ...] = ()
    alternatives: tuple[Change, ...] = ()

    @property
    def module(self) -> str:
        return self.gemms[0].module


@dataclass(frozen=True)
class Alternative:
    """Another change the report names beside a finding's main one, priced."""

    suggestion: Suggestion
    est_speedup: float
    note: str = ""

    def to_json(self) -> dict[str, object]:
        return {**self.suggestion.to_json(), "est_speedup": _round(self.est_speedup), "note": self.note}


@dataclass(frozen=True)
class Finding:
    """A priced proposal the reporting policy kept (``shapelint.price``).

    ``est_ms`` / ``est_ms_after`` are the estimated time of the covered work before and
    after the change (per unit of work when ``gain`` is ``throughput``);
    ``gemm_ms_after`` the time after of each covered GEMM, for the step estimate.
    Repeated layers are grouped into one finding listing their ``modules``.
    """

    code: str
    name: str
    severity: Severity
    module: str
    message: str
    gemms: tuple[int, ...]
    est_ms: float
    est_ms_after: float
    suggestion: Suggestion | None = None
    source: Source | None = None
    modules: tuple[str, ...] = ()
    gain: Gain = "time"
    gemm_ms_after: tuple[float, ...] = ()
    facts: Facts = ()
    alternatives: tuple[Alternative, ...] = ()
    measured_speedup: float | None = None
    #: what --verify measured (``shapelint.measure.verify``), for the report
    verification: FindingVerification | None = None
    suppressed: bool = False
    #: the covered GEMMs as they would be after the suggestion (for --verify)
    after: tuple[Gemm, ...] = field(default=(), compare=False, repr=False)
    slices: tuple[Slice, ...] = ()
    #: what the change saves on the whole training step, ms (``shapelint.price.step``)
    step_ms_saved: float | None = None
    #: the step's estimated time, for the share this finding saves
    step_ms: float | None = None
    #: why the step saving differs from the GEMM saving (Inductor pads it; the host is the bound)
    step_note: str = ""
    #: the change's ``vocab`` (a vocabulary of this many tokens), for ``--fix`` and ``--verify --step``
    vocab: int | None = None
    #: the covered GEMMs' time as recorded, where the GPU runs them otherwise
    #: (``Proposal.now``: ``est_ms`` is that), and each reference's time (``Proposal.references``)
    recorded_ms: float | None = None
    reference_ms: tuple[tuple[str, float], ...] = ()
    #: where a config target sets the size (``shapelint.locate.config_keys``)
    location: ConfigLocation | None = None
    #: the config is a pretrained checkpoint's (``shapelint.locate.pretrained``)
    pretrained: Pretrained | None = None
    #: why ``--fix`` left the finding as it is
    not_fixed: str | None = None
    #: the change's ``fuses``: ops the step runs no more after it (priced out of the step,
    #: replayed by ``--verify``)
    fuses: tuple[Op, ...] = field(default=(), compare=False, repr=False)
    #: the change's ``parallel`` (layers it shards, FSDP2 groups it merges), for the step model
    parallel: ParallelChange | None = None
    #: the change's ``memory_format`` (the whole model converted), for the step model
    memory_format: MemoryFormat | None = None

    @property
    def est_speedup(self) -> float | None:
        return self.est_ms / self.est_ms_after if self.est_ms_after > 0 else None

    @property
    def saved_ms(self) -> float:
        return self.est_ms - self.est_ms_after

    @property
    def step_share(self) -> float | None:
        """The share of the training step this finding saves."""
        if self.step_ms_saved is None or not self.step_ms:
            return None
        return self.step_ms_saved / self.step_ms

    @property
    def step_speedup(self) -> float | None:
        if self.step_ms_saved is None or not self.step_ms or self.step_ms <= self.step_ms_saved:
            return None
        return self.step_ms / (self.step_ms - self.step_ms_saved)

    @property
    def code_parameter(self) -> str | None:
        """The layer's constructor parameter the suggestion changes in code (a finding
        moved to a config key names the key instead)."""
        if self.location is not None and self.location.code_parameter is not None:
            return self.location.code_parameter
        return self.suggestion.parameter if self.suggestion is not None else None

    def fact(self, key: str, default: object = None) -> object:
        """What the JSON ``details`` hold under ``key`` (for the report and tests; a stage
        reads the typed fields)."""
        return self.details().get(key, default)

    def details(self) -> dict[str, object]:
        """The JSON ``details``: the typed facts under their public keys, and the rule's."""
        details: dict[str, object] = {} if self.vocab is None else {"vocab": self.vocab}
        details.update(self.facts)
        if self.recorded_ms is not None:
            details["recorded_ms"] = self.recorded_ms
        details.update((f"{name}_ms", ms) for name, ms in self.reference_ms)
        for typed in (self.location, self.pretrained):
            if typed is not None:
                details.update(typed.details())
        if self.not_fixed is not None:
            details["not_fixed"] = self.not_fixed
        details["gemm_ms_after"] = list(self.gemm_ms_after)
        if self.gain == "throughput":
            details["est_speedup_kind"] = "throughput"
        if self.alternatives:
            details["alternatives"] = [a.to_json() for a in self.alternatives]
        if self.verification is not None:
            details["verify"] = self.verification.to_json()
        return details

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "code": self.code,
            "name": self.name,
            "severity": self.severity,
            "module": self.module,
            "message": self.message,
            "source": self.source.to_json() if self.source else None,
            "suggestion": self.suggestion.to_json() if self.suggestion else None,
            "est_speedup": _round(self.est_speedup),
            "est_ms": _round(self.est_ms),
            "est_ms_after": _round(self.est_ms_after),
            "modules": list(self.modules) or [self.module],
            "gemms": list(self.gemms),
            "details": self.details(),
        }
        if self.step_ms_saved is not None:
            out["step_ms_saved"] = _round(self.step_ms_saved)
            out["step_share"] = _round(self.step_share)
            if self.step_note:
                out["step_note"] = self.step_note
        if self.measured_speedup is not None:
            out["measured_speedup"] = _round(self.measured_speedup)
        if self.suppressed:
            out["suppressed"] = True
        return out


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)
