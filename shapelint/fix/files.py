"""The files ``--fix`` may write, and how it writes them without changing what they are.

A fix changes one token; everything else about the file must stay: its bytes outside
that token (a UTF-8 byte-order mark, a Latin-1 encoding declared by a Python coding
cookie, CRLF line ends), its mode and owner, a symlink pointing at it (the file it
points to is edited, the link stays a link), and its place: only files inside the
project are edited (and the target files named on the command line, which the user
asked for), never an installed package, never a file a symlink reaches outside the
project. A file with several hard links is refused (writing a new file
and renaming it over one name would split it from the others), and so is a
read-only one (the user said it is not to be changed; root could write it anyway,
so the mode bits decide, not ``os.access``).

Writes go through a :class:`Transaction`: each file is written to a temporary file
beside it and renamed over it (:mod:`shapelint.fix.replace`), and every file written
so far can be put back byte for byte when a later write or the re-lint fails; each
write is noted first in the journal a forking parent keeps
(:mod:`shapelint.fix.journal`), which puts the files back when the process is stopped
before the transaction ends.
"""

from __future__ import annotations

import io
import os
import stat
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from shapelint.errors import ShapelintError
from shapelint.files import read_bytes
from shapelint.fix import journal
from shapelint.fix.replace import replace_file
from shapelint.locate.config_keys import is_library

BOM = b"\xef\xbb\xbf"


def _root() -> bool:
    """Whether this process runs as root (which os.access lets write anything)."""
    return getattr(os, "geteuid", lambda: -1)() == 0


class NotFixed(Exception):
    """Why a finding's value cannot be edited (the message is the reason)."""


@dataclass(frozen=True)
class Doc:
    """A file as ``--fix`` reads it: ``text`` is its content decoded (without a
    byte-order mark), and :meth:`encode` gives back the exact bytes of a text."""

    path: Path
    raw: bytes
    text: str
    codec: str
    bom: bytes = b""

    def encode(self, text: str) -> bytes:
        return self.bom + text.encode(self.codec)


def read_doc(path: Path) -> Doc:
    """``path`` decoded as Python reads it (a ``.py`` file: its coding cookie or BOM,
    :func:`tokenize.detect_encoding`), else as UTF-8 with an optional BOM; refused
    when its bytes would not come back the same."""
    try:
        raw = read_bytes(path)
    except ShapelintError as exc:
        raise NotFixed(str(exc)) from None
    bom = BOM if raw.startswith(BOM) else b""
    codec = "utf-8"
    if path.suffix == ".py":
        try:
            found, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        except SyntaxError as exc:
            raise NotFixed(f"{path}: {exc.msg}") from None
        codec = "utf-8" if found == "utf-8-sig" else found
    try:
        text = raw[len(bom):].decode(codec)
    except (UnicodeDecodeError, LookupError) as exc:
        raise NotFixed(f"{path}: not {codec} text ({exc})") from None
    doc = Doc(path, raw, text, codec, bom)
    if doc.encode(text) != raw:
        raise NotFixed(f"{path}: its {codec} bytes would not be written back the same")
    return doc


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def named(paths: Iterable[str]) -> frozenset[Path]:
    """The target files named on the command line that lie outside the project, reached
    without a symlink: the user asked for them, so they may be edited too."""
    out = set()
    for p in paths:
        given = Path(os.path.abspath(p))
        if given == Path(os.path.realpath(p)) and given.is_file():
            out.add(given)
    return frozenset(out)


def writable(path: Path, root: Path, also: frozenset[Path] = frozenset()) -> Path:
    """The real file a fix of ``path`` writes (a symlink's target), or :class:`NotFixed`
    saying why it may not be written: outside the project ``root`` (or reached through
    a symlink that leaves it) and not one of the named targets ``also``, an installed
    package, not a regular file, hard-linked, read-only, or in a folder that cannot
    take the temporary file."""
    given = Path(os.path.abspath(path))
    real = Path(os.path.realpath(path))
    top = Path(os.path.realpath(root))
    if not _inside(real, top) and not (given == real and real in also):
        if _inside(given, Path(os.path.abspath(root))) or _inside(given, top):
            raise NotFixed(f"{path} is a symlink to {real}, outside the project ({top}): shapelint edits only "
                           f"files inside it")
        raise NotFixed(f"{path} is outside the project ({top}): change it there, or pass the size to the model")
    if is_library(str(real)):
        raise NotFixed(f"{path} is an installed package's file: change the size in your own code")
    try:
        st = os.stat(real)
    except OSError as exc:
        raise NotFixed(f"{path}: cannot read it ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise NotFixed(f"{path} is not a regular file")
    if st.st_nlink > 1:
        raise NotFixed(f"{path} has {st.st_nlink} hard links: writing it would split them (edit it by hand)")
    if not st.st_mode & stat.S_IWUSR or (not _root() and not os.access(real, os.W_OK)):
        raise NotFixed(f"{path} is read-only (mode {stat.S_IMODE(st.st_mode):o}): make it writable to fix it")
    if not _root() and not os.access(real.parent, os.W_OK | os.X_OK):
        raise NotFixed(f"{path}: its folder {real.parent} is not writable (the edit is written beside it, then "
                       f"renamed)")
    return real


@dataclass(frozen=True)
class _Written:
    real: Path
    old: bytes
    st: os.stat_result


class Transaction:
    """Files written, each with the bytes it had, so that :meth:`undo` restores them."""

    def __init__(self) -> None:
        self.written: list[_Written] = []

    def write(self, real: Path, old: bytes, new: bytes) -> None:
        """Write ``new`` over ``real``, which must still hold ``old`` (the bytes the fix
        was planned on) and still be one regular file with a single link."""
        try:
            st = os.stat(real)
            now = read_bytes(real)
        except (OSError, ShapelintError) as exc:
            raise ShapelintError(f"{real}: cannot read it again before writing: {exc}") from None
        if now != old:
            raise ShapelintError(f"{real} changed since shapelint read it; not written")
        if st.st_nlink > 1 or not stat.S_ISREG(st.st_mode):
            raise ShapelintError(f"{real} is no longer a single regular file; not written")
        try:
            journal.record(real, old, new)
            replace_file(real, new, st)
        except OSError as exc:
            raise ShapelintError(f"cannot write {real}: {exc.strerror or exc}") from None
        self.written.append(_Written(real, old, st))

    def undo(self) -> list[str]:
        """Put every written file back (last written first); the files that could not be."""
        failed = []
        for w in reversed(self.written):
            try:
                replace_file(w.real, w.old, w.st)
            except OSError as exc:
                failed.append(f"{w.real} ({exc.strerror or exc})")
        self.written.clear()
        if not failed:  # else the journal keeps them, for the parent to try again
            journal.clear()
        return failed

    def commit(self) -> None:
        """The edits stay (the re-lint passed): a timeout from now on must not undo them."""
        self.written.clear()
        journal.clear()


__all__ = ["Doc", "NotFixed", "Transaction", "named", "read_doc", "writable"]
