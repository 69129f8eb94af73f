"""The data types every stage shares: GEMM records (capture) and findings (rules).

A `Gemm` is built in exactly one place (`shapelint.capture`, from the shapes that
`shapelint.gemm_shapes` extracts); rules, the estimator and the reporters only read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PHASES = ("forward", "grad_input", "grad_weight", "recompute")

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

    def aligned(self, align_elems: int) -> bool:
        """True when the kernel's pointers and leading dimension are all multiples of
        ``align_elems`` elements (16 bytes / element size)."""
        if not self.in_memory or align_elems <= 1:
            return True
        # A single row (or column) has no second row whose start could be misaligned.
        single = (self.cols if self.transposed else self.rows) <= 1
        return (
            (single or self.ld % align_elems == 0)
            and self.offset % align_elems == 0
            and self.batch_stride % align_elems == 0
        )

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
class Source:
    file: str
    line: int

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "line": self.line}

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


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
    phase: str
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
    role: str = ""
    node: int = -1
    extra: tuple[tuple[str, object], ...] = field(default=())

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k * self.batch

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
    """Change ``parameter`` from ``from_`` to ``to`` (a constructor argument or a
    config key)."""

    parameter: str
    from_: int | str
    to: int | str

    def to_json(self) -> dict[str, object]:
        return {"parameter": self.parameter, "from": self.from_, "to": self.to}

    def __str__(self) -> str:
        return f"{self.parameter}: {self.from_} → {self.to}"


SEVERITIES = ("info", "warning", "error")


@dataclass(frozen=True)
class Finding:
    """What a rule reports: one wasteful shape choice, the GEMMs it slows down
    (``gemms``: record indices) and, where one exists, the change that fixes it.

    Rules fill ``code`` … ``suggestion`` and ``gemms``; the engine fills the
    location and groups repeated layers (``modules``, ``source``); the estimator
    fills ``est_ms``, ``est_ms_after`` and ``est_speedup`` (of the covered GEMMs).
    """

    code: str
    name: str
    severity: str
    module: str
    message: str
    gemms: tuple[int, ...]
    suggestion: Suggestion | None = None
    source: Source | None = None
    modules: tuple[str, ...] = ()
    est_ms: float | None = None
    est_ms_after: float | None = None
    est_speedup: float | None = None
    #: facts a rule adds for the report (memory cost of padding, intensity…)
    details: tuple[tuple[str, object], ...] = ()
    measured_speedup: float | None = None
    suppressed: bool = False
    #: the covered GEMMs as they would be after the suggestion (for --verify)
    after: tuple[Gemm, ...] = field(default=(), compare=False, repr=False)

    def detail(self, key: str, default: object = None) -> object:
        return dict(self.details).get(key, default)

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
            "details": {k: v for k, v in self.details},
        }
        if self.measured_speedup is not None:
            out["measured_speedup"] = _round(self.measured_speedup)
        if self.suppressed:
            out["suppressed"] = True
        return out


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)
