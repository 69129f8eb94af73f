"""Where a recorded op comes from in the user's code: the innermost user frame on
the stack (never torch, shapelint or the standard library), and a module's integer
constructor attributes (``in_features``...) that name a GEMM's dimensions."""

from __future__ import annotations

import os
import sys
import sysconfig
from typing import Any

import torch

from shapelint.files import PACKAGE_DIR, display_path
from shapelint.model.records import Source

_SHAPELINT_DIR = str(PACKAGE_DIR) + os.sep
_SKIP_DIRS = tuple(
    os.path.normpath(p) + os.sep for p in {os.path.dirname(torch.__file__), sysconfig.get_paths()["stdlib"]}
)


#: shapelint functions that call into user code: a stack walk stops there
_BOUNDARIES: set[Any] = set()


def boundary(fn: Any) -> Any:
    """Mark ``fn`` as where shapelint calls user code (model construction, forward)."""
    _BOUNDARIES.add(fn.__code__)
    return fn


def user_frame_source(skip_code: Any = None) -> Source | None:
    """The innermost stack frame in user code (not torch, shapelint or the stdlib),
    passing over frames running ``skip_code``. None when the walk reaches the
    shapelint function that called user code: its callers are not the model."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code in _BOUNDARIES:
            return None
        filename = code.co_filename
        if (code is not skip_code and not filename.startswith("<")
                and not filename.startswith(_SKIP_DIRS + (_SHAPELINT_DIR,))):
            return Source(display_path(filename), frame.f_lineno)
        frame = frame.f_back  # type: ignore[assignment]  # the loop stops at None
    return None


def module_params(module: torch.nn.Module) -> tuple[tuple[str, int], ...]:
    """A module's integer constructor attributes (``in_features``, ``nf``...)."""
    out = []
    for name, value in vars(module).items():
        if name.startswith("_") or isinstance(value, bool):
            continue
        if isinstance(value, int):
            out.append((name, value))
        elif isinstance(value, tuple) and len(value) == 1 and isinstance(value[0], int):
            out.append((name, value[0]))
    return tuple(out)
