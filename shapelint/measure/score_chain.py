"""A hand-written attention's score chain, replayed on the GPU for ``--verify``: the
memory-bound ops the model ran between its QKᵀ and PV matmuls (``Finding.fuses``, as
the capture recorded them: casts to fp32 and back, scaling, a mask or bias, the
softmax, ``native_dropout``, a column of attention-sink logits concatenated and the
row max subtracted), one torch op each, in order and in the recorded dtypes; autograd
then runs their backward as the model's did. The fused alternative gets what the
chain needs: a mask where the chain masks or adds a bias, dropout where it drops."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from shapelint.model.records import Finding, Op
from shapelint.physics.attention import BIAS_OPS, DROPOUT_OPS, MASK_FILL_OPS, MASKING_OPS, WITH_BIAS

#: recorded op names that cast (their output's element size says to what)
_CASTS = ("_to_copy", "to", "copy_", "clone", "contiguous", "_to_dtype")
_SOFTMAX = ("_softmax", "softmax")
#: a row max over the scores, subtracted by the chain's next ``sub`` (gpt-oss's eager softmax)
_MAX = ("max", "amax")
#: the probability the replay drops (training dropout; its rate does not change the traffic)
DROPOUT_P = 0.1


@dataclass(frozen=True)
class Chain:
    """The forward ops of one attention's score chain, and what the fused call needs."""

    steps: tuple[tuple[str, int], ...]  # (op name, output element bytes)

    @property
    def masked(self) -> bool:
        return any(name in MASKING_OPS for name, _ in self.steps)

    @property
    def dropout(self) -> bool:
        return any(name in DROPOUT_OPS for name, _ in self.steps)


def chain_of(fuses: Sequence[Op]) -> Chain:
    """The forward chain of the first attention among ``fuses`` (the score chains of a
    finding's attentions, in the order they ran; a grouped finding holds every layer's,
    one layer is what --verify times): the ops on the scores' path, in order, up to where
    the next attention's chain starts. Whoever owns them: an op the chain runs under
    another owner stays in it, as an ``nn.Softmax`` built inside ``forward`` (CodeGen's:
    the capture names it ``Softmax``; filtered by the attention's owner, the replay had
    dropped the softmax, and all before the attention's first own op where the scores
    were scaled first)."""
    path: set[int] = set()
    steps: list[tuple[str, int]] = []
    for op in (op for op in fuses if not op.backward):
        if steps and not any(s in path for s, _ in op.reads):
            break
        steps.append((op.name, _out_bytes(op)))
        path.update(s for s, _ in op.writes)
    return Chain(tuple(steps))


def finding_chain(f: Finding, dtype_bytes: int) -> Chain:
    """The chain ``--verify`` replays for a finding: the recorded one, or (a finding
    priced without an op stream) scaling and a softmax in the compute dtype."""
    if f.fuses:
        return chain_of(f.fuses)
    return Chain((("mul", dtype_bytes), ("_softmax", dtype_bytes)))


def _out_bytes(op: Op) -> int:
    """Element size of the op's (first) output: what a cast wrote."""
    return max(1, op.writes[0][1] // op.out_numel) if op.writes and op.out_numel else op.element_bytes


def replay(chain: Chain, scores: Any, dtypes: dict[int, Any], tq: int, tk: int, bias: Any = None) -> Any:
    """``scores`` through the chain's ops, each writing the recorded dtype (``dtypes``:
    element bytes → torch dtype), as one kernel where the model's was one (an fp32 mask
    added to bf16 scores promotes in the add). ``bias``: what the chain adds (the fused
    call's mask, where it needs its gradient, added first where no op of the chain adds it:
    the QKᵀ ``baddbmm`` did); a constant [Tq, Tk] fp32 one otherwise."""
    import torch
    import torch.nn.functional as F

    x = scores if bias is None or any(name in BIAS_OPS for name, _ in chain.steps) else scores + bias
    mask = torch.ones(tq, tk, dtype=torch.bool, device=x.device).tril()
    bias = torch.randn(tq, tk, dtype=torch.float32, device=x.device) if bias is None else bias
    steps: dict[str, Callable[[Any, Any], Any]] = {
        **dict.fromkeys(_CASTS, lambda t, d: t.to(d)),
        **dict.fromkeys(_SOFTMAX, lambda t, d: torch.softmax(t, dim=-1, dtype=d)),
        **dict.fromkeys(MASK_FILL_OPS, lambda t, d: t.masked_fill(~mask, float("-inf"))),
        **dict.fromkeys(DROPOUT_OPS, lambda t, d: F.dropout(t, DROPOUT_P, training=True)),
        **dict.fromkeys(BIAS_OPS, lambda t, d: t + bias.to(d)),
        # scores concatenated with a column of logits (attention sinks), and the row max
        # taken and subtracted before the softmax (max.dim, whose backward scatters)
        "cat": lambda t, d: torch.cat([t, t.new_zeros(*t.shape[:-1], 1)], dim=-1),
        **dict.fromkeys(_MAX, lambda t, d: t - t.max(dim=-1, keepdim=True).values),
    }
    shifted = False  # the max was just subtracted: the chain's next sub is that
    for name, out_bytes in chain.steps:
        dtype = dtypes.get(out_bytes, x.dtype)
        if name == "sub" and shifted:
            shifted = False
            continue
        shifted = name in _MAX
        x = steps.get(name, lambda t, d: t * 0.125)(x, dtype)  # another pointwise op: one pass
        if name in _SOFTMAX and x.shape[-1] > tk:  # the extra columns sliced off, as PV reads the keys'
            x = x[..., :tk]
    return x


def fused_bias(f: Finding, chain: Chain, training: bool, scores: tuple[int, ...], dtype: Any,
               device: str) -> tuple[Any, tuple[Any, ...]]:
    """(the fused call's mask, the tensors whose gradient both sides compute besides q,
    k and v): a mask where the chain adds one or the fix's call takes one (its records
    carry ``with_bias``: a QKᵀ ``baddbmm`` added it), and the mask itself where, training,
    the fix's bias needs its gradient (``bias_grad``:
    ``shapelint.physics.score_chain.bias_needs_grad``)."""
    learned = training and any("bias_grad" in dict(g.extra) for g in f.after)
    masked = chain.masked or any(dict(g.extra).get(WITH_BIAS) for g in f.after)
    mask = fused_mask(masked, scores[-2], scores[-1], dtype, device, scores if learned else ())
    return mask, (mask,) if learned and mask is not None else ()


def fused_mask(masked: bool, tq: int, tk: int, dtype: Any, device: str, grad_shape: tuple[int, ...] = ()) -> Any:
    """The mask the fused call takes where the chain masks or adds a bias (an additive
    [Tq, Tk] one; None otherwise); where the bias needs its gradient (``grad_shape``: the
    scores' shape, as SpeechT5's per-head relative-position term has), one of that shape
    that needs it, which sends SDPA to the memory-efficient kernel as the model's fix does."""
    import torch

    if not masked:
        return None
    if grad_shape:
        return torch.randn(*grad_shape, dtype=dtype, device=device, requires_grad=True)
    return torch.randn(tq, tk, dtype=dtype, device=device)


__all__ = ["DROPOUT_P", "Chain", "chain_of", "finding_chain", "fused_bias", "fused_mask", "replay"]
