"""Reading the text files users hand us (targets, configs) and the values in them, and
writing the files they ask for: every failure becomes a one-line ShapelintError naming
the file and, where the parser knows it, the line. A write is whole or nothing
(:func:`write_file`)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from shapelint.errors import ShapelintError, cap_length

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


#: the folder shapelint's own package lives in: its files are never the user's
PACKAGE_DIR = Path(__file__).resolve().parent

#: the largest file shapelint reads as a target or configuration (the largest real
#: config.json is well under 1 MiB; a tokenizer.json of 17 MiB is not a target)
MAX_BYTES = 16 * 2**20


def read_text(path: Path, where: str | None = None, limit: int = MAX_BYTES) -> str:
    """A regular file's UTF-8 text, at most ``limit`` bytes."""
    where = where or str(path)
    data = read_bytes(path, where, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ShapelintError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def read_bytes(path: Path, where: str | None = None, limit: int = MAX_BYTES) -> bytes:
    """A regular file's bytes; a FIFO, a device, a directory or a file over ``limit``
    bytes is refused (opened without blocking, so a FIFO cannot hang the run)."""
    where = where or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ShapelintError(f"{where}: cannot read: {exc.strerror}") from exc
    try:
        check_stat(os.fstat(fd), where, limit)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise ShapelintError(f"{where}: cannot read: {exc.strerror}") from exc
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ShapelintError(f"{where}: larger than {_size(limit)}; shapelint reads targets of at most that size")
    return data


def check_regular(path: Path, where: str | None = None, limit: int = MAX_BYTES) -> None:
    """Refuse, before anything opens it, a path that is not a regular file of at most
    ``limit`` bytes (for files Python itself reads, e.g. imported model files)."""
    where = where or str(path)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ShapelintError(f"{where}: cannot read: {exc.strerror}") from exc
    check_stat(st, where, limit)


def check_stat(st: os.stat_result, where: str, limit: int = MAX_BYTES) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise ShapelintError(f"{where}: not a regular file ({_kind(st.st_mode)})")
    if st.st_size > limit:
        raise ShapelintError(f"{where}: larger than {_size(limit)} ({_size(st.st_size)}); shapelint reads "
                             "targets of at most that size")


def _kind(mode: int) -> str:
    kinds = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    return next((name for test, name in kinds if test(mode)), "not a plain file")


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n} bytes"


_TOML_AT = re.compile(r"\s*\(at line (\d+), column \d+\)\s*$")


def parse_toml(text: str, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        line = getattr(exc, "lineno", None)
        m = _TOML_AT.search(msg)
        if m:
            line = line or int(m.group(1))
            msg = msg[: m.start()]
        if msg.endswith("(at end of document)"):
            line = line or max(1, len(text.splitlines()))
            msg = msg[: -len("(at end of document)")]
        msg = msg.strip() or "invalid TOML"
        raise ShapelintError(f"{where}{f':{line}' if line else ''}: TOML syntax error: {msg}") from exc
    except RecursionError as exc:
        raise ShapelintError(f"{where}: TOML syntax error: nested too deeply") from exc


#: the most values a YAML document's aliases may add when it is expanded: a 1 KB
#: "billion laughs" (``b: &b [*a, *a, ...]`` nine levels deep) is 9^9 values to anything
#: that walks it (validating ``kwargs:`` spun at 100% CPU), and PyYAML releases before
#: the fix of yaml/pyyaml#897 expand repeated ``<<`` merges so while loading; a real
#: target or configuration repeats a few blocks at most
MAX_ALIAS_VALUES = 100_000


def parse_yaml(text: str, where: str) -> Any:
    """A YAML document (safe loader: plain data only), refused in bounded time when its
    aliases expand it past :data:`MAX_ALIAS_VALUES` or make it contain itself: the
    check runs on the composed node graph, before anything is built from it."""
    import yaml  # type: ignore[import-untyped]

    try:
        # the pure-Python safe loader: the C one is faster but overflows the C stack
        # (a crash, not an error) on deeply nested input
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            _check_aliases(node, where)
            return loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["invalid YAML"])[0]
        raise ShapelintError(f"{where}{line}: YAML syntax error: {problem}") from exc
    except RecursionError as exc:
        raise ShapelintError(f"{where}: YAML syntax error: nested too deeply") from exc
    except (ValueError, TypeError, OverflowError) as exc:
        # PyYAML builds timestamps with datetime, which rejects e.g. 2024-13-01
        raise ShapelintError(f"{where}: YAML value error: {exc}") from exc


def _check_aliases(root: Any, where: str) -> None:
    """Refuse a node graph whose aliases add more than :data:`MAX_ALIAS_VALUES` values
    once expanded, or that holds itself (``a: &a [*a]``). Each node is visited once
    (sizes are memoised by identity), so the check is linear in the document's text."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: Any) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise ShapelintError(f"{where}:{node.start_mark.line + 1}: YAML alias error: an alias refers to a "
                                 "value that holds it (a document that contains itself)")
        children = node.value if isinstance(node.value, list) else []
        open_nodes.add(key)
        total = 1
        for child in children:
            total += sum(size(n) for n in child) if isinstance(child, tuple) else size(child)
        open_nodes.discard(key)
        sizes[key] = total
        return total

    expanded = size(root)
    if expanded - len(sizes) > MAX_ALIAS_VALUES:
        raise ShapelintError(f"{where}: YAML alias error: its aliases expand it to {expanded:,} values; shapelint "
                             f"reads documents whose aliases repeat at most {MAX_ALIAS_VALUES:,}")


def parse_json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ShapelintError(f"{where}:{exc.lineno}: JSON syntax error: {exc.msg}") from exc
    except RecursionError as exc:
        raise ShapelintError(f"{where}: JSON syntax error: nested too deeply") from exc


#: the largest tensor dimension (and element count) torch can index: int64
INT64_MAX = 2**63 - 1


def show(value: Any, cap: int = 60) -> str:
    """A value in a message: its repr, cut short."""
    return cap_length(repr(value), cap)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(value: Any, what: str) -> int:
    """A dimension: an integer in 1 .. int64."""
    if not is_int(value):
        raise ShapelintError(f"{what} must be a positive integer, got {show(value)}")
    if value <= 0:
        raise ShapelintError(f"{what} = {value}: dimensions must be positive")
    if value > INT64_MAX:
        raise ShapelintError(f"{what} = {show(value)}: larger than a tensor dimension can be (2**63 - 1)")
    return int(value)


# -- writing: whole files or nothing ------------------------------------------------------


def write_file(path: str, text: str, flag: str = "--output") -> None:
    """Write ``text`` to ``path`` whole (a symbolic link: to the file it points at,
    which stays a link), or raise one ShapelintError line; a FIFO, a device or a
    socket is refused (a FIFO with no reader would block the run), ``/dev/null``
    taken as it is."""
    target = Path(os.path.realpath(path))
    if str(target) == os.devnull:  # -o /dev/null: the exit code alone is wanted
        return
    refuse_special(target, flag, shown=path)
    try:
        _replace_atomically(target, text)
    except OSError as exc:
        raise ShapelintError(f"{flag} {path}: {exc.strerror or exc}") from None


def refuse_special(path: Path, flag: str, shown: str | None = None) -> None:
    """An existing path that is not a regular file or a folder (a device, a FIFO, a
    socket) is no place for a report; ``/dev/null`` is (what is written there is gone,
    and nothing can block on it)."""
    if os.path.realpath(path) == os.devnull:
        return
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"))
    kind = next((name for test, name in kinds if test(mode)), "not a regular file")
    stdout = " (leave out --output to write to stdout)" if flag == "--output" else ""
    raise ShapelintError(f"{flag} {shown or path}: is {kind}; shapelint writes regular files only{stdout}")


def _replace_atomically(path: Path, text: str) -> None:
    """``text`` into a temporary file beside ``path``, renamed over it. A file that
    cannot be renamed over (a bind mount: a container's ``-v $PWD/r.sarif:/w/r.sarif``)
    is written in place instead, once the whole text is known to fit on the disk."""
    folder = path.resolve().parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        with contextlib.suppress(OSError):
            os.chmod(tmp, _mode_for(path))
        try:
            os.replace(tmp, path)
        except OSError as exc:
            if exc.errno not in (errno.EBUSY, errno.EXDEV):
                raise
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            os.unlink(tmp)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _mode_for(path: Path) -> int:
    """An existing file keeps its mode; a new one gets what open() would give it."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def display_path(file: str) -> str:
    """A file relative to the working directory when it lies below it, else as given."""
    try:
        rel = os.path.relpath(file)
    except ValueError:
        return file
    return file if rel.startswith("..") else rel
