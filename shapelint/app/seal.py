"""The seal on every record of the result cache: an HMAC-SHA256 of its bytes under a
key that lives outside the work tree, in the user's cache home (:func:`key_file`).

A record committed to a repository, restored from a shared CI cache or written by
another machine or user does not verify, and neither does one whose bytes were
edited, nor one copied to another record's name (the MAC covers the record's address,
its place in the cache, with its bytes): :func:`unseal` answers None and the cache
counts a miss, never a result. The key is created once (mode 0600); a key file that
is not this user's alone (a link, someone else's, readable or writable by others), or
that lies inside the project (where a pull request could supply it), gives no key,
and the cache is off for the run.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Any

#: the layout of a record: raise it whenever what a record holds changes meaning
SCHEMA = 3
#: the first bytes of every record, before its HMAC
MAGIC = b"shapelint-cache"


def key_file() -> Path:
    """Where the cache's HMAC key lives: the user's cache home, outside every work tree
    (``$XDG_CACHE_HOME`` when it is an absolute path, as the XDG specification wants,
    else ``~/.cache``)."""
    home = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(home):
        home = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(home) / "shapelint" / "cache-key"


@functools.cache
def key() -> bytes | None:
    """The HMAC key, created on first use; None when there is no key this user alone
    can write (then the cache is off)."""
    path = key_file()
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
        return _read_key(path)
    return None


def _read_key(path: Path) -> bytes | None:
    """The key in ``path`` when it is a regular file of this user's that no one else can
    read or write."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        mine = not hasattr(os, "getuid") or st.st_uid == os.getuid()
        if not stat.S_ISREG(st.st_mode) or not mine or st.st_mode & 0o077:
            return None
        text = f.read(65).strip()
    return bytes.fromhex(text.decode()) if re.fullmatch(rb"[0-9a-f]{64}", text) else None


def _mac(secret: bytes, address: str, body: bytes) -> str:
    return hmac.new(secret, MAGIC + b"\0" + address.encode("utf-8") + b"\0" + body, hashlib.sha256).hexdigest()


def seal(secret: bytes, address: str, doc: dict[str, Any]) -> bytes:
    """A record at ``address`` (its place in the cache, e.g. ``runs/<key>``): magic,
    schema and HMAC on the first line, then the JSON body."""
    body = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    return MAGIC + f" {SCHEMA} {_mac(secret, address, body)}\n".encode() + body


def unseal(secret: bytes, address: str, data: bytes) -> dict[str, Any] | None:
    """The body of a record that verifies under ``secret`` at ``address``, else None."""
    head, _, body = data.partition(b"\n")
    parts = head.split(b" ")
    if len(parts) != 3 or parts[0] != MAGIC or parts[1] != str(SCHEMA).encode():
        return None
    if not hmac.compare_digest(parts[2], _mac(secret, address, body).encode()):
        return None
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


__all__ = ["MAGIC", "SCHEMA", "key", "key_file", "seal", "unseal"]
