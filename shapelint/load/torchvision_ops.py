"""torchvision whose C++ ops cannot load beside this PyTorch (a CUDA-built wheel next to
a CPU-only torch, the only kind PyPI offers for some versions): its model code still
builds every model shapelint traces.

torchvision is built to go on without its ops: ``torchvision.extension`` catches the
``OSError`` of loading ``_C`` (``libc10_cuda.so: cannot open shared object file``) and
raises only when an op is called. But ``torchvision/_meta_registrations.py`` registers
fake kernels for ``torchvision::nms`` and ``::qnms`` unconditionally, and without the
library those ops have no schema: ``import torchvision`` dies with ``RuntimeError:
operator torchvision::nms does not exist``, and with it timm, torchvision's models and
every transformers model class (transformers imports torchvision when it is installed).

:func:`install` puts a finder on ``sys.meta_path`` that, the first time torchvision is
imported, loads its ``_C`` library as torchvision would; where that fails, it defines
the two schemas (nothing else), so torchvision imports as it was designed to without
its ops, and says so on stderr once. A model whose step calls one of the ops (``nms``,
``roi_align``, ``deform_conv2d``) still fails there, with torchvision's own message.
Nothing happens until torchvision is imported, and nothing at all where ``_C`` loads.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch

#: the schemas ``torchvision/_meta_registrations.py`` registers fake kernels for
SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)


class _Finder(importlib.abc.MetaPathFinder):
    """Acts once, as ``torchvision`` is first imported; finds nothing itself."""

    def __init__(self) -> None:
        self.done = False
        self.library: Any = None

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "torchvision" and not self.done:
            self.done = True
            self.library = without_ops_if_needed()
        return None


_FINDER = _Finder()


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once per process)."""
    if _FINDER not in sys.meta_path and "torchvision" not in sys.modules:
        sys.meta_path.insert(0, _FINDER)


def without_ops_if_needed() -> Any:
    """Load torchvision's ``_C`` as torchvision does; where it cannot load, define
    the schemas its fake registrations need and return the library holding them."""
    spec = importlib.util.find_spec("torchvision")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    libraries = [p for f in folders for p in sorted(Path(f).glob("_C*.so")) + sorted(Path(f).glob("_C*.pyd"))]
    if not libraries or hasattr(_namespace(), "nms"):
        return None
    try:
        torch.ops.load_library(str(libraries[0]))
        return None
    except (ImportError, OSError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    library = torch.library.Library("torchvision", "DEF")  # noqa: TOR901 - kept alive by the finder
    for schema in SCHEMAS:
        library.define(schema)
    print(f"shapelint: torchvision's C++ ops do not load beside this PyTorch ({reason}); its model code is "
          f"used without them (nms, roi_align and deform_conv2d are unavailable)", file=sys.stderr)
    return library


def _namespace() -> Any:
    return getattr(torch.ops, "torchvision")
