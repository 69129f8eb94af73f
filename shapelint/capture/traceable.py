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
  devices elsewhere (``found at least two devices, cuda:0 and cpu``). A model built on
  another device (``device='cuda'``, ``with torch.device('cuda')``) is refused before
  tracing (:func:`check_on_cpu`): its fake CUDA tensors aborted the process in
  autograd's C++ (SIGABRT) on a CPU-only PyTorch, and meta tensors traced no GEMMs.
- **torch's global defaults**: user code that calls ``torch.set_default_device`` or
  ``torch.set_default_dtype`` changes them for the whole process. The user-code
  boundary (:mod:`shapelint.load.usercode`) puts both back when the code returns
  (:func:`torch_defaults`, :func:`restore_torch_defaults`), so the next target is built
  as if the file had never run, and refuses a default device other than the one
  shapelint builds on (``torch.set_default_device('cuda')`` ended in SIGABRT too).
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from shapelint.capture.swap import swapped
from shapelint.errors import ShapelintError
from shapelint.files import display_path

#: what to do instead of compiling, in every message about it
_UNCOMPILED = ("cannot run on fake tensors: lint the uncompiled model (--compile prices the step as "
               "torch.compile runs it)")

#: what to do instead of moving tensors, in every message about it
_ON_CPU = ("shapelint traces on the CPU with fake tensors (no GPU needed): leave .to(device), .cuda() and device= "
           "out of the model and its inputs")

#: what to do instead of setting torch's default device
_DEFAULT_ON_CPU = ("shapelint builds and traces the model on the CPU with fake tensors (no GPU needed): leave "
                   "torch.set_default_device out of the model's file (the training script can set it)")

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
    def refused(*_: Any, **__: Any) -> Any:
        raise ShapelintError(f"the model calls torch.compile while it runs, which {_UNCOMPILED}")

    stance: Any = contextlib.nullcontext()
    set_stance = getattr(getattr(torch, "compiler", None), "set_stance", None)
    if "torch._dynamo" in sys.modules and set_stance is not None:  # else nothing was compiled yet
        stance = set_stance("fail_on_recompile")
    with swapped(torch, "compile", refused), stance:
        yield


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

    with swapped(torch, "rand", rand):
        yield


def check_on_cpu(model: torch.nn.Module, inputs: Any, where: str) -> None:
    """Every parameter, buffer and example input of a model built for the lint is on
    the CPU. Built on another device (``device='cuda'``, ``with torch.device('cuda')``),
    fake tensors pass construction but abort the process in autograd's C++ once the
    forward runs (SIGABRT on a CPU-only PyTorch); on meta they trace no GEMMs."""
    named = chain((("parameter " + n, t) for n, t in model.named_parameters()),
                  (("buffer " + n, t) for n, t in model.named_buffers()),
                  ((f"example input {i}", t) for i, t in
                   enumerate(x for x in tree_leaves(inputs) if isinstance(x, torch.Tensor))))
    for what, tensor in named:
        if tensor.device.type != "cpu":
            raise ShapelintError(f"{where}: the model puts {what} on {tensor.device}: {_ON_CPU}")


@dataclass(frozen=True)
class TorchDefaults:
    """torch's process-wide defaults that user code can change."""

    #: what ``torch.set_default_device`` installed (a ``DeviceContext``), None when unset
    device_context: Any
    dtype: torch.dtype
    #: the device type factories use now (the innermost ``with torch.device(...)`` or
    #: the default device): where the caller builds the model
    building_on: str


#: torch's defaults before anything changed them (user code that imported torch itself)
_PRISTINE = TorchDefaults(None, torch.float32, "cpu")


def torch_defaults() -> TorchDefaults:
    """The defaults now, to put back with :func:`restore_torch_defaults`."""
    from torch.utils import _device

    current = getattr(_device, "CURRENT_DEVICE", None)
    building_on = torch.device(current).type if current is not None else "cpu"
    return TorchDefaults(_device_context(), torch.get_default_dtype(), building_on)


def _device_context() -> Any:
    return getattr(getattr(torch, "_GLOBAL_DEVICE_CONTEXT", None), "device_context", None)


def restore_torch_defaults(saved: TorchDefaults | None, where: str, refuse: bool = True) -> None:
    """Put back the default dtype and device user code changed (``saved`` None: torch's
    own, the code imported torch itself). With ``refuse``, a default device other than
    the CPU and the one the model is built on is an error naming ``where``: everything
    built after it would be a fake tensor on that device (see :func:`check_on_cpu`)."""
    saved = saved or _PRISTINE
    if torch.get_default_dtype() != saved.dtype:
        torch.set_default_dtype(saved.dtype)
    now = _device_context()
    if now is saved.device_context:
        return
    # set_default_device exits the context the code installed (putting back the one
    # it displaced at the bottom of the mode stack) and installs the saved device's
    torch.set_default_device(None if saved.device_context is None else saved.device_context.device)
    if refuse and now is not None and now.device.type not in ("cpu", saved.building_on):
        raise ShapelintError(f"{where} sets torch's default device to {now.device} (torch.set_default_device): "
                             f"{_DEFAULT_ON_CPU}")


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



__all__ = ["TorchDefaults", "check_not_compiled", "check_on_cpu", "compiled_modules", "explain", "refusing_compile",
           "restore_torch_defaults", "torch_defaults"]
