"""torchvision whose C++ library cannot load beside this PyTorch still imports
(shapelint.load.torchvision_ops): a stand-in package that does what torchvision 0.28's
``_meta_registrations.py`` does, in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: what torchvision does at import: load _C (failing quietly), then register fake
#: kernels for ops only _C defines
PACKAGE = textwrap.dedent("""\
    import torch

    try:
        torch.ops.load_library(__file__.replace("__init__.py", "_C.so"))
        has_ops = True
    except (ImportError, OSError):
        has_ops = False


    @torch.library.register_fake("torchvision::nms")
    def _nms(dets, scores, iou_threshold):
        return dets.new_empty(0, dtype=torch.long)
""")

SCRIPT = textwrap.dedent("""\
    import sys
    # another shim on this interpreter (a .pth hook) must not answer first
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__module__ != "tvshim_hook"]
    {install}
    import torchvision
    print("imported", torchvision.has_ops)
""")


def _run(tmp_path: Path, install: bool) -> subprocess.CompletedProcess[str]:
    package = tmp_path / "torchvision"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text(PACKAGE)
    (package / "_C.so").write_bytes(b"not a shared library")  # a CUDA build's _C.so fails to load like this
    code = SCRIPT.format(install="from shapelint.load.torchvision_ops import install; install()" if install else "")
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.mark.slow  # two fresh interpreters import torch
def test_torchvision_without_its_library_imports_and_says_so(tmp_path: Path) -> None:
    plain = _run(tmp_path, install=False)
    assert plain.returncode != 0 and "operator torchvision::nms does not exist" in plain.stderr
    shimmed = _run(tmp_path, install=True)
    assert shimmed.returncode == 0, shimmed.stderr
    assert shimmed.stdout.strip() == "imported False"  # torchvision goes on without its ops, as designed
    assert "shapelint: torchvision's C++ ops do not load beside this PyTorch" in shimmed.stderr
