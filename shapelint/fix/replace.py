"""Replace a file's bytes in one step, keeping what the file is.

A temporary file beside it gets the new bytes, its mode and owner, and is renamed
over it: a reader sees the old file or the new one, never half of one, and a failure
leaves the old file whole. ``--fix`` writes and undoes its edits this way
(:mod:`shapelint.fix.files`, :mod:`shapelint.fix.journal`)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def replace_file(real: Path, data: bytes, st: os.stat_result) -> None:
    """``data`` into a temporary file beside ``real`` with its mode and owner (``st``),
    renamed over it."""
    fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".shapelint")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            if hasattr(os, "fchown") and (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
                os.fchown(f.fileno(), st.st_uid, st.st_gid)  # before the mode: chown clears set-id bits
            os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode))
        os.replace(tmp, real)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


__all__ = ["replace_file"]
