"""What a model may not do while shapelint traces it on fake CPU tensors, said on one
line instead of in torch's words (or a crash):

- **torch.compile**: compiled code cannot run on fake tensors (Inductor's kernels read
  the tensors' memory, which fake tensors do not have: the process crashed with
  SIGSEGV). A compiled module is refused before tracing; while the model runs,
  :func:`refusing_compile` makes every compiled function raise instead of compiling
  (``torch.compiler.set_stance("fail_on_recompile")``) and ``torch.compile`` itself
  raise, and :func:`explain` names what was compiled. The step as torch.compile runs it
  is priced with ``--compile`` on the uncompiled model.
- **Device moves**: the model is built and traced on the CPU; ``.to('cuda')`` fails on
  a CPU-only PyTorch (``not linked with support for cuda devices``) and leaves two
  devices elsewhere (``found at least two devices, cuda:0 and cpu``).
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import Any

import torch

from shapelint.errors import ShapelintError
from shapelint.files import display_path

#: what to do instead of compiling, in every message about it
_UNCOMPILED = ("cannot run on fake tensors: lint the uncompiled model (--compile prices the step as "
               "torch.compile runs it)")

#: what to do instead of moving tensors, in every message about it
_ON_CPU = ("shapelint traces on the CPU with fake tensors (no GPU needed): leave .to(device), .cuda() and device= "
           "out of the model and its inputs")

_STANCE = re.compile(r"torch\.compile stance is 'fail_on_recompile'")
_COMPILED_AT = re.compile(r"filename: '(?P<file>[^']*)', function name: '(?P<fn>[^']*)', line number: (?P<line>\d+)")
_TWO_DEVICES = re.compile(r"found at least two devices,? (?P<a>[\w:]+) and (?P<b>[\w:]+)")
_NO_BACKEND = re.compile(r"not linked with support for (?P<dev>\w+) devices|Torch not compiled with (?P<dev2>\w+) "
                         r"enabled|Found no NVIDIA driver|no CUDA GPUs are available")


def compiled_modules(model: torch.nn.Module) -> list[str]:
    """The modules of ``model`` that ``torch.compile`` wrapped (``""``: the model itself)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")  # not imported: nothing was compiled
    optimized = getattr(eval_frame, "OptimizedModule", None)
    if optimized is None:
        return []
    return [name for name, m in model.named_modules() if isinstance(m, optimized)]


def check_not_compiled(model: torch.nn.Module) -> None:
    names = compiled_modules(model)
    if names:
        what = "the model" if names[0] == "" else f"module {names[0]}"
        raise ShapelintError(f"{what} is compiled with torch.compile, which {_UNCOMPILED}")


@contextlib.contextmanager
def refusing_compile() -> Iterator[None]:
    """While the ``with`` body runs the model: compiled functions raise (see
    :func:`explain`) rather than compile, and so does ``torch.compile``."""
    original = torch.compile

    def refused(*_: Any, **__: Any) -> Any:
        raise ShapelintError(f"the model calls torch.compile while it runs, which {_UNCOMPILED}")

    stance: Any = contextlib.nullcontext()
    set_stance = getattr(getattr(torch, "compiler", None), "set_stance", None)
    if "torch._dynamo" in sys.modules and set_stance is not None:  # else nothing was compiled yet
        stance = set_stance("fail_on_recompile")
    torch.compile = refused  # type: ignore[assignment]
    try:
        with stance:
            yield
    finally:
        torch.compile = original


@contextlib.contextmanager
def every_layer_runs() -> Iterator[None]:
    """While the ``with`` body runs the model: a scalar random draw (``torch.rand([])``,
    as LayerDrop samples ``torch.rand([]) < layerdrop``; transformers before 5.2x draws
    it even when ``layerdrop`` is 0) is the constant 1.0, so such a branch takes its
    every-layer-runs side, the step shapelint documents, instead of needing the value
    of a fake tensor. Draws of any other shape are left alone."""
    original = torch.rand

    def rand(*size: Any, **kwargs: Any) -> Any:
        shape = size[0] if len(size) == 1 and isinstance(size[0], (list, tuple)) else size
        if tuple(shape) == () and "generator" not in kwargs and "out" not in kwargs:
            return torch.tensor(1.0, dtype=kwargs.get("dtype"), device=kwargs.get("device"))
        return original(*size, **kwargs)

    torch.rand = rand  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.rand = original


def explain(exc: BaseException) -> str | None:
    """One line for a failure that compiled code or a device move explains, else None."""
    for e in _chain(exc):
        text = str(e)
        if _STANCE.search(text):
            at = _COMPILED_AT.search(text)
            where = f" ({display_path(at['file'])}:{at['line']}, {at['fn']})" if at else ""
            return f"the model runs code compiled with torch.compile{where}, which {_UNCOMPILED}"
        two = _TWO_DEVICES.search(text)
        if two:
            return f"the model puts tensors on two devices ({two['a']} and {two['b']}): {_ON_CPU}"
        none = _NO_BACKEND.search(text)
        if none:
            device = none["dev"] or none["dev2"] or "cuda"
            return f"the model moves tensors to {device.lower()}, which this PyTorch cannot use: {_ON_CPU}"
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__



__all__ = ["check_not_compiled", "compiled_modules", "explain", "refusing_compile"]
