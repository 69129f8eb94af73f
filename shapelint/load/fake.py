"""Building a model on fake tensors: nothing of its size is allocated, and the line
that constructs each submodule is remembered (findings that name a constructor
argument point there).

A target's own construction code runs under :func:`fake_construction`; a model built
on the meta device (a Hugging Face config) becomes fake afterwards (:func:`meta_to_fake`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
from torch._subclasses.fake_tensor import (
    FakeTensor,
    FakeTensorMode,
    unset_fake_temporarily,
)
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from shapelint.capture.recorder import RecordingFakeMode
from shapelint.capture.sources import user_frame_source
from shapelint.model.records import Source


@contextlib.contextmanager
def fake_construction(defined_at: dict[int, Source]) -> Iterator[FakeTensorMode]:
    """Fake tensors by default, on the CPU, and the line that constructs each
    submodule remembered (for findings that name a constructor argument).

    Construction code that reads values works too: ``torch.nn.init`` is skipped (a
    fake tensor has no values to initialise, and ``trunc_normal_`` samples with
    ``.item()``), and small index vectors (``torch.linspace``/``logspace``/``arange``
    of at most :data:`REAL_VECTOR_NUMEL` elements, e.g. timm's drop-path rates) are
    real, so nothing of a model's size is allocated."""
    mode = RecordingFakeMode()
    apply = torch.nn.Module._apply
    torch.nn.Module._apply = _fake_apply  # type: ignore[method-assign]
    try:
        with construction_sites(defined_at), _skip_init(), mode, torch.device("cpu"), _RealIndexVectors():
            yield mode
    finally:
        torch.nn.Module._apply = apply  # type: ignore[method-assign]


#: ``torch.nn.init``'s initialisers, skipped while a model is built on fake tensors
#: (code that bound one by name before shapelint started still runs it)
INITIALISERS = (
    "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
    "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_",
)


def _keep(tensor: torch.Tensor, *_: Any, **__: Any) -> torch.Tensor:
    return tensor


@contextlib.contextmanager
def _skip_init() -> Iterator[None]:
    saved = {name: getattr(torch.nn.init, name) for name in INITIALISERS}
    for name in INITIALISERS:
        setattr(torch.nn.init, name, _keep)
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch.nn.init, name, fn)


#: largest index vector (``linspace``, ``logspace``, ``arange``) or constant
#: (``torch.tensor`` of Python data) built for real during construction: drop-path
#: rates, positions, window offsets, stage widths (64 KiB of int64 at most)
REAL_VECTOR_NUMEL = 8192
_INDEX_VECTORS = frozenset({torch.linspace, torch.logspace, torch.arange})
#: factories of constants from Python data (a tensor among the data is not a constant)
_CONSTANTS = frozenset({torch.tensor, torch.as_tensor})


class _RealIndexVectors(TorchFunctionMode):
    """Builds small index vectors and constants that take no tensor arguments as real
    CPU tensors (``device=None`` or the CPU: timm passes ``device='cpu'``), and whatever
    is computed from real tensors alone stays real, so construction code can read their
    values (``.item()``, ``.tolist()``, iteration, ``unique``): timm's drop-path
    schedules, RegNet's stage widths (timm ``torch.unique``, torchvision
    ``torch.tensor([...]).diff().tolist()``)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if tensors and not any(isinstance(t, FakeTensor) for t in tensors):
            with unset_fake_temporarily():
                return func(*args, **kwargs)
        out = func(*args, **kwargs)
        if ((func in _INDEX_VECTORS or func in _CONSTANTS) and not tensors and isinstance(out, torch.Tensor)
                and out.numel() <= REAL_VECTOR_NUMEL and _on_cpu(kwargs.get("device"))):
            with unset_fake_temporarily():
                return func(*args, **kwargs)
        return out


def _on_cpu(device: Any) -> bool:
    try:
        return device is None or torch.device(device).type == "cpu"
    except (RuntimeError, TypeError):
        return False


@contextlib.contextmanager
def construction_sites(defined_at: dict[int, Source]) -> Iterator[None]:
    """Remember the user-code line that constructs each submodule."""
    from torch.nn.modules import module as module_mod

    def on_register(parent: torch.nn.Module, name: str, sub: torch.nn.Module | None) -> None:
        if sub is not None and id(sub) not in defined_at:
            src = user_frame_source()
            if src is not None:
                defined_at[id(sub)] = src

    handle = module_mod.register_module_module_registration_hook(on_register)
    try:
        yield
    finally:
        handle.remove()


def meta_to_fake(model: torch.nn.Module, mode: FakeTensorMode) -> None:
    """Turn a model built on the meta device into CPU fake tensors of ``mode``, in
    place, keeping tied parameters tied (a meta build is several times cheaper than
    dispatching every initialisation op through the fake mode). The few tensors that
    construction made on the CPU anyway (legacy ``torch.FloatTensor(...)``) become
    fake too."""
    done: dict[int, torch.nn.Parameter] = {}
    for mod in model.modules():
        for key, p in list(mod._parameters.items()):
            if p is not None:
                if id(p) not in done:
                    done[id(p)] = torch.nn.Parameter(_to_fake(p.data, mode), requires_grad=p.requires_grad)
                mod._parameters[key] = done[id(p)]
        for key, b in list(mod._buffers.items()):
            if b is not None and not isinstance(b, FakeTensor):
                mod._buffers[key] = _to_fake(b, mode)


def _to_fake(t: torch.Tensor, mode: FakeTensorMode) -> torch.Tensor:
    if t.device.type == "meta":
        return FakeTensor(mode, t, torch.device("cpu"))
    return mode.from_tensor(t)


_APPLY_MEMO: list[dict[int, tuple[torch.Tensor, torch.nn.Parameter]]] = []


def _fake_apply(self: torch.nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True
                ) -> torch.nn.Module:
    """``Module._apply`` for fake parameters (``model.to(memory_format=...)``,
    ``.half()``...): torch swaps fake parameters in place, which fails while the fake
    mode's converter holds weak references to them; replace them instead, keeping
    tied parameters tied."""
    top = not _APPLY_MEMO
    if top:
        _APPLY_MEMO.append({})
    memo = _APPLY_MEMO[0]
    try:
        if recurse:
            for child in self.children():
                child._apply(fn)
        for key, p in self._parameters.items():
            if p is None:
                continue
            if id(p) not in memo:
                with torch.no_grad():
                    memo[id(p)] = (p, torch.nn.Parameter(fn(p), requires_grad=p.requires_grad))
            self._parameters[key] = memo[id(p)][1]
        for key, b in self._buffers.items():
            if b is not None:
                self._buffers[key] = fn(b)
        return self
    finally:
        if top:
            _APPLY_MEMO.clear()
