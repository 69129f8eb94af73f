"""Values the model's code reads on the host while it runs on fake tensors.

Library forward code reads a few values from the GPU: validation checks
(``if not torch.isfinite(x).all()``, ``torch._check_tensor_all``, transformers'
image-token check), ``if not padding_mask.any():``, a boolean mask that indexes a
tensor (``nonzero``). A fake tensor has no value, so torch raises
``DataDependentOutputException`` and the lint used to stop there, naming no line.

Here such reads get the value of a healthy training step, and each is recorded with
the line that made it (:class:`shapelint.model.trace_notes.HostRead`) for the report:

- a read of an ``all`` reduction is ``True`` (the check holds), of an ``any``
  reduction ``False`` (no exceptional element: no padding, no global-attention token,
  no inf); ``logical_not`` flips the answer, casts and views keep it;
- a fake boolean mask selects every element (``nonzero`` of ``n`` elements gives ``n``
  rows; a mask that indexes a tensor becomes those indices);
- an op whose tensors are all real (shapelint's inputs are real data: token ids,
  pixels) runs for real, up to :data:`REAL_NUMEL_CAP` output elements, so a read of a
  value derived from the inputs alone (an image-token count, a padding check) is exact;
  a 0-d tensor made of Python numbers (``torch.div(size, 2, rounding_mode="trunc")``)
  is a constant and real too.

Every answered read is a place where an eager GPU step waits for the GPU
(``note_host_sync``). Any other read of fake data (``.item()`` of a sum, a
``.tolist()`` that decides a split) decides what runs and cannot be answered: the
lint stops with one line naming the file, line and source text (:class:`HostReadError`).
So does a mask made from a routing decision (``topk``, ``argmax``... then ``==``):
every token for every expert would price each expert on the whole batch.
"""

from __future__ import annotations

import linecache
import os
import sys
import sysconfig
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    unset_fake_temporarily,
)

from shapelint.errors import ShapelintError, cap_length
from shapelint.files import PACKAGE_DIR, display_path
from shapelint.model.trace_notes import HostRead

aten = torch.ops.aten


def _overloads(packet: Any, names: tuple[str, ...]) -> frozenset[Any]:
    return frozenset(getattr(packet, n) for n in names if hasattr(packet, n))


#: reductions whose read answers "the check holds" (True) ...
_ALL = _overloads(aten.all, ("default", "dim", "dims")) | {aten._is_all_true.default}
#: ... and "no exceptional element" (False)
_ANY = _overloads(aten.any, ("default", "dim", "dims")) | {aten._is_any_true.default}
#: ops whose output reads as their input does (a cast, a view)
_SAME = _overloads(aten._to_copy, ("default",)) | _overloads(aten.view, ("default",)) | \
    _overloads(aten.squeeze, ("default", "dim", "dims")) | _overloads(aten.alias, ("default",)) | \
    _overloads(aten.detach, ("default",)) | _overloads(aten.clone, ("default",))
#: ops whose output reads as the negation of their input
_NOT = _overloads(aten.logical_not, ("default",)) | _overloads(aten.bitwise_not, ("default",))
#: ops whose outputs are a routing decision (which expert, which token)
_ROUTING = _overloads(aten.topk, ("default",)) | _overloads(aten.sort, ("default", "stable")) | \
    _overloads(aten.argsort, ("default", "stable")) | _overloads(aten.argmax, ("default",)) | \
    _overloads(aten.argmin, ("default",)) | _overloads(aten.max, ("dim",)) | _overloads(aten.min, ("dim",)) | \
    _overloads(aten.multinomial, ("default",))
_READ = aten._local_scalar_dense.default
_NONZERO = aten.nonzero.default
#: ops that take a list of indices, where a boolean mask stands for its nonzero indices
_INDEXED = _overloads(aten.index, ("Tensor",)) | _overloads(aten.index_put, ("default",)) | \
    _overloads(aten.index_put_, ("default",)) | _overloads(aten._index_put_impl_, ("default",))

# what each op is to the host-read logic, by the op's id: an OpOverload hashes in Python,
# and a set lookup per op per kind cost a GPT-2 trace 25%
_K_READ, _K_NONZERO, _K_INDEXED, _K_ROUTING, _K_ALL, _K_ANY, _K_SAME, _K_NOT = (1 << i for i in range(8))
_KINDS: dict[int, int] = {}
for _kind, _ops in ((_K_READ, {_READ}), (_K_NONZERO, {_NONZERO}), (_K_INDEXED, _INDEXED), (_K_ROUTING, _ROUTING),
                    (_K_ALL, _ALL), (_K_ANY, _ANY), (_K_SAME, _SAME), (_K_NOT, _NOT)):
    for _op in _ops:
        _KINDS[id(_op)] = _KINDS.get(id(_op), 0) | _kind

#: tagged tensors kept before the dead ones are swept out
_MAX_TAGS = 4096

#: largest output (elements, all outputs together) an op on real tensors alone computes
#: for real; a larger one (a (batch, seq, seq) mask built from the inputs) stays fake
REAL_NUMEL_CAP = 1 << 25

#: frames a read's site is never in: torch, shapelint, the standard library, and the
#: helpers transformers' modeling code calls to check a value
_NOT_SITES = tuple(os.path.normpath(p) + os.sep for p in (
    os.path.dirname(torch.__file__), str(PACKAGE_DIR), sysconfig.get_paths()["stdlib"]))
_HELPER_DIRS = (os.sep + os.path.join("transformers", "utils") + os.sep,)

#: how much of the source line an error quotes (the whole line stays under the error cap)
_SOURCE_CAP = 100

#: what a user can do about a routing read
_ROUTING_ADVICE = ("use an experts implementation without host reads (transformers: the default grouped_mm) "
                   "or lint the dense equivalent")

#: what a user can do about a read that decides what runs
_ADVICE = "fake tensors have no values: compute it from sizes or the config, or pass it in as a Python value"

#: the fake mode's own dispatch: ``call(func, types, args, kwargs)``
Call = Callable[[Any, Any, tuple[Any, ...], dict[str, Any]], Any]


_Table = dict[int, tuple[weakref.ref[torch.Tensor], bool]]


def _put(table: _Table, t: torch.Tensor, value: bool) -> _Table:
    if len(table) > _MAX_TAGS:  # forget the dead
        table = {k: v for k, v in table.items() if v[0]() is not None}
    table[id(t)] = (weakref.ref(t), value)
    return table


def _has(table: _Table, t: Any) -> bool:
    entry = table.get(id(t))
    return entry is not None and entry[0]() is t


def _called(func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any], call: Call) -> Any:
    """``call`` of ``func``; an op whose output size depends on fake values (``unique``,
    ``masked_select``, ``repeat_interleave``) is one error line naming its line."""
    try:
        return call(func, types, args, kwargs)
    except (DataDependentOutputException, DynamicOutputShapeException):
        file, line, source = read_site()
        where = f"{file}:{line}: {cap_length(source, _SOURCE_CAP)}" if source else f"{file}:{line}"
        raise HostReadError(f"the size of {func.overloadpacket.__name__}'s output depends on values: {where} "
                            f"({_ADVICE})") from None


class HostReadError(ShapelintError):
    """A value read on the host decides what the step runs (one line: where, what)."""


class HostReads:
    """The host reads of one fake mode: the answers it gave, and the fake tensors
    whose read it knows how to answer."""

    def __init__(self) -> None:
        self.reads: list[HostRead] = []
        # id(tensor) -> (the tensor, weakly; the answer its read gets)
        self._answers: _Table = {}
        # the tensors computed from a routing decision (topk, argmax, sort...)
        self._routed: _Table = {}
        #: called once per answered read (the recorder's note_host_sync while one records)
        self.on_read: Callable[[], None] | None = None

    def dispatch(self, func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any], call: Call) -> Any:
        """``call`` (the fake mode's own dispatch) for ``func``, or the answer to a read."""
        kind = _KINDS.get(id(func), 0)
        if kind & _K_READ and isinstance(args[0], FakeTensor):
            return self._read(args[0])
        if kind & _K_NONZERO and isinstance(args[0], FakeTensor):
            return self._nonzero(args[0])
        if kind & _K_INDEXED and len(args) > 1:
            args = (args[0], self._indices(args[1]), *args[2:])
        if not (args and isinstance(args[0], FakeTensor)):  # most ops: a fake first argument, nothing to look at
            tensors = _tensors(args, kwargs)
            if not any(isinstance(t, FakeTensor) for t in tensors):
                return _real_or_fake(func, types, args, kwargs, call, bool(tensors))
        out = _called(func, types, args, kwargs, call)
        if self._answers and id(args[0]) in self._answers:
            self._forget_if_changed(func, kind, args[0])
        if kind or self._routed:
            self._follow(kind, args, kwargs, out)
        return out

    def _forget_if_changed(self, func: Any, kind: int, t: Any) -> None:
        """An in-place op (``ok &= y > 3``) made a tagged tensor depend on values: its
        read is no longer the check's answer."""
        if not kind & (_K_SAME | _K_NOT) and func._schema.is_mutable:
            del self._answers[id(t)]

    def _follow(self, kind: int, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """Tag ``out`` with what a read of it answers, and as routing where it is one."""
        if kind & _K_ROUTING or (self._routed and any(_has(self._routed, t) for t in _tensors(args, kwargs))):
            self._mark_routed(out)
        if kind & (_K_ALL | _K_ANY):
            self._tag(out, bool(kind & _K_ALL))
        elif kind & (_K_SAME | _K_NOT) and self._answers:
            answer = self._answer(args[0])
            # a view or a boolean copy reads the same; a cast to a number (``.long()``) may
            # become a size, which no answer may decide
            if answer is not None and isinstance(out, torch.Tensor) and out.dtype == torch.bool:
                self._tag(out, answer ^ bool(kind & _K_NOT))

    def _mark_routed(self, out: Any) -> None:
        for o in out if isinstance(out, (tuple, list)) else (out,):
            # indices and masks only: routing weights would make every activation after them "routed"
            if isinstance(o, torch.Tensor) and not o.is_floating_point():
                self._routed = _put(self._routed, o, True)

    def _tag(self, t: torch.Tensor, answer: bool) -> None:
        self._answers = _put(self._answers, t, answer)

    def _answer(self, t: Any) -> bool | None:
        entry = self._answers.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else None

    def _read(self, t: FakeTensor) -> Any:
        answer = self._answer(t)
        file, line, source = read_site()
        if answer is None or t.numel() != 1 or t.dtype != torch.bool:
            where = f"{file}:{line}: {cap_length(source, _SOURCE_CAP)}" if source else f"{file}:{line}"
            raise HostReadError(f"a value read on the host decides what the step runs: {where} ({_ADVICE})")
        self._note(HostRead(file, line, source, str(answer)))
        return answer

    def _nonzero(self, mask: FakeTensor) -> torch.Tensor:
        """Every element of a fake mask selected: ``(numel, ndim)`` indices; a mask made
        from a routing decision (mixture-of-experts code that picks each expert's tokens)
        selects a share no answer gets right, so it is an error."""
        file, line, source = read_site()
        if _has(self._routed, mask):
            raise HostReadError(f"a routing decision read on the host decides the shapes: {file}:{line}: "
                                f"{cap_length(source, _SOURCE_CAP)} (each expert's tokens; {_ROUTING_ADVICE})")
        if self._answer(mask) is False:  # ``x.any(dim)``'s "no exceptional element": none selected
            self._note(HostRead(file, line, source, "none selected"))
            with mask.fake_mode:
                return torch.empty((0, mask.dim()), dtype=torch.long, device=mask.device)
        self._note(HostRead(file, line, source, "all selected"))
        with mask.fake_mode:
            return torch.empty((mask.numel(), mask.dim()), dtype=torch.long, device=mask.device)

    def _indices(self, indices: Any) -> Any:
        """A boolean mask in an index list as the indices it selects: a real mask's
        own (exact), a fake mask's every element (answered like ``nonzero``)."""
        if not isinstance(indices, (list, tuple)) or not any(_is_mask(i) for i in indices):
            return indices
        out: list[Any] = []
        for i in indices:
            if not _is_mask(i):
                out.append(i)
            elif isinstance(i, FakeTensor):
                rows = self._nonzero(i)
                out.extend(rows[:, d] for d in range(i.dim()))
            else:
                with unset_fake_temporarily():
                    out.extend(i.nonzero(as_tuple=True))
        return out

    def _note(self, read: HostRead) -> None:
        if read not in self.reads:
            self.reads.append(read)
        if self.on_read is not None:
            self.on_read()


def _is_mask(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8)


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors among the arguments and in lists among them (``cat``, ``index``)."""
    found = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            found.append(a)
        elif isinstance(a, (list, tuple)):
            found.extend(x for x in a if isinstance(x, torch.Tensor))
    return found


def _real_or_fake(func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any], call: Call,
                  real_inputs: bool) -> Any:
    """An op with no fake tensor argument: run for real when its inputs are real data
    (or it makes a 0-d constant of Python numbers) and its output is small, else fake."""
    try:
        out = call(func, types, args, kwargs)
    except (DataDependentOutputException, DynamicOutputShapeException):
        if not real_inputs:
            raise
        with unset_fake_temporarily():  # nonzero, unique, .item() of real data
            return func(*args, **kwargs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
        return out
    if real_inputs:
        small = sum(o.numel() for o in outs) <= REAL_NUMEL_CAP
    else:  # a factory: only a 0-d constant of Python numbers is data
        small = len(outs) == 1 and outs[0].dim() == 0 and all(isinstance(a, (int, float, bool)) for a in args)
    if not small:
        return out
    with unset_fake_temporarily():
        return func(*args, **kwargs)


def read_site() -> tuple[str, int, str]:
    """(file, line, source text) of the code that made the read: the innermost frame
    outside torch, shapelint, the standard library and transformers' check helpers."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith("<") and not name.startswith(_NOT_SITES) and not any(h in name for h in _HELPER_DIRS):
            return library_path(name), frame.f_lineno, linecache.getline(name, frame.f_lineno).strip()
        frame = frame.f_back  # type: ignore[assignment]  # the loop stops at None
    return "<unknown>", 0, ""


def library_path(file: str) -> str:
    """A file of an installed package from its package folder
    (``transformers/models/fsmt/modeling_fsmt.py``), any other as the user sees it."""
    parts = file.split(os.sep)
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return "/".join(parts[len(parts) - parts[::-1].index(marker):])
    return display_path(file)
