"""What a rule is, and what rule modules import.

A rule is one module under ``rules/`` (shipped as ``shapelint.rules``) with:

- ``CODE`` (``SL101``), ``NAME`` (``misaligned-leading-dim``), ``SEVERITY`` (the most
  its findings can be: the pricer lowers an error that gains little to a warning);
- a docstring: a one-line summary, then ``## What it does``, ``## Why is this bad?``
  (with the measured number), ``## Example`` and ``## Use instead``;
- ``BAD`` and ``GOOD``: lists of :class:`Example` that one generated test runs;
- ``check(gemms, hardware, context) -> Iterable[Proposal]``: a pure detector. It says
  what is wrong, on which records, and the change (a :class:`~shapelint.model.records.Change`
  or a :class:`~shapelint.model.records.SizeSearch` for the pricer to size). It never
  estimates a time, never decides whether a proposal is worth reporting
  (``shapelint.price`` does both, by one policy) and never imports another rule:
  shared physics lives in ``shapelint.physics``;
- named thresholds as module constants.

``shapelint.check.run`` turns each module into a typed :class:`Rule`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import ModuleType
from typing import Any, Protocol, get_args

from shapelint.errors import ShapelintError
from shapelint.hardware import Hardware
from shapelint.model.parallel import ParamGroup, WholeAttention
from shapelint.model.records import (
    ATTN_ROLES,
    Change,
    Dim,
    Gemm,
    Op,
    Proposal,
    Severity,
    SizeSearch,
    Suggestion,
)
from shapelint.physics.alignment import is_aligned
from shapelint.physics.quantization import Cause, shape_waste, waste
from shapelint.physics.reshape import resize, resized_dims
from shapelint.physics.roofline import compute_bound
from shapelint.physics.score_chain import gemm_markers


@dataclass(frozen=True)
class Example:
    """A model snippet a rule must flag (``BAD``) or pass (``GOOD``).

    ``model`` and ``inputs`` are Python expressions evaluated with ``torch``, ``nn``,
    ``F`` and the rule module itself (as ``_rule``) in scope, on fake tensors. For
    ``BAD`` examples, ``expect`` holds the suggestion the rule must make:
    ``{"parameter": ..., "from": ..., "to": ...}`` (any subset), and ``min_speedup``
    the least estimated speedup the priced finding must claim.
    """

    model: str
    inputs: str
    dtype: str = "bf16"
    gpu: str = "h100"
    training: bool = True
    expect: dict[str, Any] = field(default_factory=dict)
    min_speedup: float = 1.0
    #: tensor-parallel degree the example is linted at (its GEMMs are one GPU's shard)
    tp: int = 1
    #: FSDP2 degree the example's step is priced at (with its communication)
    fsdp: int = 1


@dataclass(frozen=True)
class RuleContext:
    """What rules may know besides the GEMMs and the GPU."""

    precision: str = "bf16"
    training: bool = True
    tokens: int | None = None
    #: sizes of the model's embedding tables (vocabularies)
    vocab_sizes: frozenset[int] = frozenset()
    #: tensor-parallel degree: suggested sizes must divide by it
    tp: int = 1
    #: the layers tensor parallelism split (their GEMMs are one GPU's shard)
    sharded: frozenset[str] = frozenset()
    #: the step's op stream (memory-bound ops, GEMM and attention markers), in order:
    #: what a rule reads to say which ops its change folds away (``Change.fuses``)
    ops: tuple[Op, ...] = ()
    #: attention modules left whole on every rank because ``tp`` does not divide their heads
    whole_attention: tuple[WholeAttention, ...] = ()
    #: FSDP2 degree, and the groups ``fully_shard`` gathers (the root first, then one per block)
    fsdp: int = 1
    fsdp_groups: tuple[ParamGroup, ...] = ()

    @cached_property
    def gemm_markers(self) -> dict[int, Op]:
        """Each GEMM record's marker in :attr:`ops`, by the record's index (built once:
        a rule walks the op stream per attention)."""
        return gemm_markers(self.ops)

    def is_vocab_dim(self, value: int) -> bool:
        """``value`` is a vocabulary size, or one GPU's shard of one."""
        return any(value in (v, -(-v // self.tp)) for v in self.vocab_sizes)

    def is_shard_of_aligned(self, value: int, g: Gemm, hw: Hardware) -> bool:
        """``value`` sizes ``g`` as one GPU's shard of a tensor-parallel layer whose whole
        size (``value`` × ``tp``) is aligned: SL601 reports it, SL101 leaves it."""
        return self.tp > 1 and g.module in self.sharded and (value * self.tp) % hw.align_elems(g.dtype_bytes) == 0


class CheckFunction(Protocol):
    def __call__(self, gemms: Sequence[Gemm], hardware: Hardware, context: RuleContext) -> Iterable[Proposal]: ...


@dataclass(frozen=True)
class Rule:
    """One rule, as read (and type-checked) from its module."""

    code: str
    name: str
    severity: Severity
    doc: str
    bad: tuple[Example, ...]
    good: tuple[Example, ...]
    check: CheckFunction
    module: ModuleType = field(compare=False, repr=False)

    @property
    def summary(self) -> str:
        return self.doc.strip().splitlines()[0] if self.doc.strip() else self.name

    @classmethod
    def from_module(cls, mod: ModuleType) -> Rule:
        """The rule a module defines; a ShapelintError naming what is missing or wrong."""
        where = f"rule module {mod.__name__}"
        missing = [a for a in ("CODE", "NAME", "SEVERITY", "BAD", "GOOD", "check") if not hasattr(mod, a)]
        if missing:
            raise ShapelintError(f"{where} lacks {', '.join(missing)}")
        if not isinstance(mod.CODE, str) or not isinstance(mod.NAME, str):
            raise ShapelintError(f"{where}: CODE and NAME must be strings")
        if mod.SEVERITY not in get_args(Severity):
            raise ShapelintError(f"{where}: SEVERITY must be one of {', '.join(get_args(Severity))}")
        examples = [*mod.BAD, *mod.GOOD]
        if not all(isinstance(e, Example) for e in examples):
            raise ShapelintError(f"{where}: BAD and GOOD must hold shapelint.check.rule_api.Example objects")
        if not callable(mod.check):
            raise ShapelintError(f"{where}: check must be a function")
        return cls(mod.CODE, mod.NAME, mod.SEVERITY, mod.__doc__ or "", tuple(mod.BAD), tuple(mod.GOOD),
                   mod.check, mod)


def by_module(gemms: Iterable[Gemm]) -> dict[str, list[Gemm]]:
    """GEMMs grouped by owning module, in first-seen order."""
    out: dict[str, list[Gemm]] = {}
    for g in gemms:
        out.setdefault(g.module, []).append(g)
    return out


def few_tokens_note(tokens: int, step_tokens: int | None) -> str:
    """Why a layer sees fewer tokens than the step, for SL201's message: an output layer
    run on the last position only (nanoGPT's ``GPT.forward`` without targets)."""
    if not step_tokens or tokens >= step_tokens or step_tokens % tokens:
        return ""
    return (f"; this layer sees {tokens} of the step's {step_tokens} tokens (1 in {step_tokens // tokens}: one "
            f"position per sequence, as a language model called without targets runs its output layer on the "
            f"last position only): in a training step, pass the targets (labels) so it runs on every token")


def phases(gemms: Iterable[Gemm]) -> str:
    """``forward/grad_weight``: the phases of ``gemms``, for messages."""
    return "/".join(sorted({g.phase for g in gemms}))


def layer_sizes(own: Sequence[Gemm], context: RuleContext) -> list[int]:
    """Output dimensions (m, n) of a module's GEMMs that are its constructor
    parameters, vocabulary sizes left out (SL501's), and the token count too (a size
    equal to it cannot be told apart from it, so resizing would change both)."""
    values = {v for g in own for v in (g.m, g.n)
              if g.param(v) and not context.is_vocab_dim(v) and v != context.tokens}
    return sorted(values)


#: GEMMs whose sizes are set by attention, not by a layer parameter
QUANTIZATION_SKIP_ROLES = ATTN_ROLES | {"after_softmax"}


def quantization_proposals(
    code: str, name: str, severity: Severity, cause: Cause, min_waste: float, gemms: Sequence[Gemm],
    hw: Hardware, context: RuleContext, search: Callable[[int], int], below: Callable[[int], int],
    describe: Callable[[Sequence[Gemm], str, int, int, float], str],
) -> Iterator[Proposal]:
    """Proposals for the layer sizes whose ``cause`` quantization (``"tile"`` or
    ``"wave"``) throws away at least ``min_waste`` of their compute-bound GEMMs' math:
    a size up to the next multiple of ``search(value)`` that brings the waste under
    ``min_waste`` (gained per unit of work), and at most ``below(value)`` under it
    the smaller one.
    ``describe(covered, parameter, value, to, waste)`` writes the message."""
    usable = [g for g in gemms if hw.uses_tensor_cores(g.dtype) and g.role not in QUANTIZATION_SKIP_ROLES
              and is_aligned(g, hw) and compute_bound(g, hw)]
    for own in by_module(usable).values():
        for value in layer_sizes(own, context):
            covered = tuple(g for g in own if value in (g.m, g.n, g.k))
            lost = waste(covered, hw, cause)
            if lost < min_waste:
                continue
            param = covered[0].param(value) or "size"

            def at(sizes: tuple[int, ...], covered: tuple[Gemm, ...] = covered, value: int = value,
                   param: str = param, lost: float = lost) -> Change:
                (to,) = sizes
                return Change(Suggestion(param, value, to), tuple(resize(g, value, to) for g in covered),
                              describe(covered, param, value, to, lost),
                              (("dimension", value), ("waste", lost), ("cause", cause)))

            def fits(c: int, covered: tuple[Gemm, ...] = covered, value: int = value) -> bool:
                shapes = ((*resized_dims(g, value, c), g.batch) for g in covered)
                return shape_waste(shapes, hw, cause) < min_waste

            dim = Dim(value, hw.align_elems(covered[0].dtype_bytes), search(value), context.tp, below(value))
            yield Proposal(code, name, severity, covered, SizeSearch((dim,), at, fits), gain="throughput")
