"""A journal of ``--fix``'s writes, so that a fix the process cannot finish (a
``--timeout`` or a crash ends it mid-way, the re-lint hangs) never leaves files
half-edited.

The process that forks the lint (:mod:`shapelint.app.isolate`) opens the journal
before the fork: a new folder made by :func:`tempfile.mkdtemp` (mode 0700, a name no
other process had), which the child inherits as :data:`_folder`. Before
:class:`~shapelint.fix.files.Transaction` writes a file, it records an entry there:
the file's real path, the bytes it had and the bytes about to be written, each entry
written whole (a temporary name, renamed). When the transaction ends (its edits kept
after the re-lint, or put back) it empties the journal.

After the child ends, however it ended, the parent :meth:`Journal.recover` s what is
left: a file that holds exactly the bytes the fix wrote gets its old bytes back
(written atomically, mode and owner kept); a file holding its old bytes is left as it
is; a file holding anything else (changed since) is left too, and named. A temporary
file the stopped write left beside it, holding part of what it was writing, is removed. Then the
folder is removed, with the re-lint's temporary files made in it (:func:`scratch`).
Nothing outside the folder is read or written but the files the entries name, which
are the fix's own edits: shapelint writes the entries in the child, which runs with
the user's rights (user code there could write any file of the user's anyway, so an
entry it planted gains it nothing).
"""

from __future__ import annotations

import base64
import contextlib
import glob
import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from shapelint.errors import ShapelintError
from shapelint.fix.replace import replace_file

#: the folder of the journal a forking parent opened (inherited by the child), or None
_folder: Path | None = None
#: why the parent could not open one (then --fix writes nothing in the child)
_unavailable: str | None = None
#: an entry's file name: ``<n>.entry``
SUFFIX = ".entry"


def record(real: Path, old: bytes, new: bytes) -> None:
    """Before writing ``new`` over ``real`` (which holds ``old``): note it in the journal,
    if a parent opened one. Raises when the parent wanted one and has none, or the entry
    cannot be written: a write that could not be undone after a timeout is not made."""
    if _unavailable is not None:
        raise ShapelintError(f"not written: no journal to undo the edits with if the lint is stopped ({_unavailable})")
    if _folder is None:
        return
    entry = {"path": str(real), "old": base64.b64encode(old).decode("ascii"),
             "new": base64.b64encode(new).decode("ascii")}
    n = len([p for p in _folder.iterdir() if p.suffix == SUFFIX])
    part = _folder / f"{n:06d}.part"
    try:
        with open(part, "x", encoding="utf-8") as f:
            json.dump(entry, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(part, _folder / f"{n:06d}{SUFFIX}")
    except OSError as exc:
        raise ShapelintError(f"cannot note the edit of {real} in the journal {_folder}: {exc.strerror or exc}") from None


def scratch() -> str | None:
    """Where the fix's own temporary files go (the re-lint's results): inside the
    journal's folder when a parent keeps one, so that they go with it when the process
    is stopped before it can remove them; else None (the system's temporary folder)."""
    return str(_folder) if _folder is not None else None


def clear() -> None:
    """The transaction ended (its edits kept or put back): nothing to recover."""
    if _folder is None:
        return
    for p in _folder.iterdir():
        if p.suffix in (SUFFIX, ".part"):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()


@dataclass
class Journal:
    """The parent's side: the folder it made, and what :meth:`recover` did."""

    folder: Path | None
    restored: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)

    def recover(self) -> None:
        """Put back every file the child wrote and did not finish with (last first)."""
        if self.folder is None or not _ours(self.folder):
            return
        for entry in sorted((p for p in self.folder.iterdir() if p.suffix == SUFFIX), reverse=True):
            self._undo(entry)
            entry.unlink()

    def _undo(self, entry: Path) -> None:
        try:
            data = json.loads(entry.read_text(encoding="utf-8"))
            real, old, new = Path(data["path"]), base64.b64decode(data["old"]), base64.b64decode(data["new"])
        except (OSError, ValueError, KeyError, TypeError):
            return  # not an entry this module wrote whole
        _remove_half_written(real, (old, new))
        try:
            st = os.stat(real)
            now = real.read_bytes()
        except OSError:
            self.kept.append(str(real))
            return
        if now == old:
            return
        if now != new or not stat.S_ISREG(st.st_mode):
            self.kept.append(str(real))
            return
        try:
            replace_file(real, old, st)
        except OSError:
            self.kept.append(str(real))
            return
        self.restored.append(str(real))

    def close(self) -> None:
        """Recover what is left, then remove the folder (only the files this module names)."""
        global _folder, _unavailable
        _folder, _unavailable = None, None
        if self.folder is None or not _ours(self.folder):
            return
        self.recover()
        shutil.rmtree(self.folder, ignore_errors=True)  # a folder it made (never follows a link)

    def note(self) -> str:
        """What recovery did, to begin the line that says how the lint ended (first, so
        that a long reason after it cannot cut it off)."""
        text = ""
        if self.restored:
            text += f"--fix did not finish: put back {', '.join(map(_shown, self.restored))} as it was; "
        if self.kept:
            text += (f"--fix did not finish: {', '.join(map(_shown, self.kept))} changed after it wrote it, left "
                     f"as it is: check it by hand; ")
        return text


def _shown(path: str) -> str:
    """``path`` relative to the working folder when it lies inside it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _remove_half_written(real: Path, contents: tuple[bytes, ...]) -> None:
    """The temporary file :func:`~shapelint.fix.replace.replace_file` was writing beside
    ``real`` when the process was stopped (``.model.py.<random>.shapelint``): removed when
    it holds a prefix of what it was writing (the edit, or the old bytes being put back),
    so that a file of the user's that merely has such a name stays."""
    for tmp in real.parent.glob(f".{glob.escape(real.name)}.*.shapelint"):
        try:
            if tmp.is_symlink() or not tmp.is_file():
                continue
            data = tmp.read_bytes()
        except OSError:
            continue
        if any(c.startswith(data) for c in contents):
            with contextlib.suppress(OSError):
                tmp.unlink()


def _ours(folder: Path) -> bool:
    """Still the folder this process made: a real folder (not a link), ours, 0700."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700


def open_journal() -> Journal:
    """Before forking the lint: a new journal folder the child will note its writes in."""
    global _folder, _unavailable
    try:
        folder = Path(tempfile.mkdtemp(prefix="shapelint-fix-journal-"))
    except OSError as exc:
        _folder, _unavailable = None, f"cannot create a folder in {tempfile.gettempdir()}: {exc.strerror or exc}"
        return Journal(None)
    _folder, _unavailable = folder, None
    return Journal(folder)


__all__ = ["Journal", "clear", "open_journal", "record"]
