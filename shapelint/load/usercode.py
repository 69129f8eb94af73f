"""The one boundary every piece of user code runs behind.

Importing a model file, calling ``shapelint_model()`` or a YAML builder, importing a
``--rules-dir`` module, calling a rule's ``check``: each runs inside
:func:`user_code`, which

- turns every way out of the code into one :class:`ShapelintError` line naming the
  file: an exception, ``SystemExit`` with any code (``sys.exit(0)`` must not end a CI
  job green with no report), any other ``BaseException``; only ``KeyboardInterrupt``
  stays an interrupt;
- sets ``sys.argv`` to ``[file]``, so a script that parses its arguments at import
  sees what ``python file`` would give it, not shapelint's flags;
- captures what the code writes to ``sys.stdout``/``sys.stderr`` (stdout carries the
  JSON/SARIF report) and replays it on stderr when the code returns; when it fails,
  the last line it wrote goes into the error (an argparse ``error:`` line, say);
  file descriptor 1 points at stderr meanwhile, for C code and child processes;
- turns bytecode writing off (no ``__pycache__`` beside the user's files);
- puts the file's folder first on ``sys.path`` and restores ``sys.path``, the working
  directory and ``sys.modules`` afterwards (modules imported from the user's folder
  are forgotten, so two targets may each have their own ``helpers.py``);
- restores torch's default dtype and device (``torch.set_default_dtype``,
  ``torch.set_default_device``), and refuses code that moved the default device off
  the one the model is built on (see :mod:`shapelint.capture.traceable`).

What it cannot contain (``os._exit``, a segfault, runaway memory or time) needs a
child process: see :mod:`shapelint.app.isolate`.

Everything the boundary redirects and restores is the process's, not the thread's
(``sys.stdout``, fd 1, ``sys.path``, the working directory), so user code runs one
piece at a time: :data:`LOCK` is held for the whole ``with`` body. Two threads that
each saved and restored the streams in turn left ``sys.stdout`` pointing at a
finished lint's buffer. The Python API holds the same lock for a whole lint
(:mod:`shapelint.app.api`); it is re-entrant, so a lint's nested boundaries take it again.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from shapelint.errors import ShapelintError, cap_length, one_line

T = TypeVar("T")

#: how much of the user's last output line an error quotes
QUOTE_CAP = 160

#: held while user code runs (and by the Python API for a whole lint): what the
#: boundary swaps is process-wide state, and torch's fake-tensor tracing is not
#: thread-safe either
LOCK = threading.RLock()


@contextlib.contextmanager
def user_code(file: Path | str, what: str, paths: Sequence[Path] = ()) -> Iterator[None]:
    """Run the ``with`` body as user code from ``file``; ``what`` says what runs
    (``importing it``, ``shapelint_model()``...), for the error line
    ``<file>: <what> raised ValueError: ...``. ``paths``: more folders the code
    imports from (a YAML's project), put on ``sys.path`` after the file's own."""
    path = Path(file)
    output = io.StringIO()
    with LOCK:
        with _saved_state(path, paths), _captured(output):
            try:
                with _torch_defaults_kept(f"{path}: {what}"):
                    yield
            except (KeyboardInterrupt, ShapelintError):
                raise
            except SyntaxError as exc:
                raise ShapelintError(_syntax_message(path, exc)) from exc
            except BaseException as exc:
                raise ShapelintError(_message(path, what, exc, output.getvalue())) from exc
        sys.stderr.write(output.getvalue())


def call_user(fn: Callable[..., T], file: Path | str, what: str, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` behind the boundary."""
    with user_code(file, what):
        return fn(*args, **kwargs)


def import_user_file(path: Path, what: str = "importing it", name: str | None = None) -> ModuleType:
    """Import a Python file as a fresh module behind the boundary, under ``name``
    (default: a unique one, so that two ``model.py`` files are two modules)."""
    name = name or f"_shapelint_user_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ShapelintError(f"{path}: cannot import this file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up
    try:
        with user_code(path, what):
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def run_user_rule(check: Callable[..., Iterable[T]], file: Path | str, code: str, *args: Any) -> list[T]:
    """A rule's ``check(*args)``, its findings listed inside the boundary (``check``
    is usually a generator: its code runs while the list is built)."""
    with user_code(file, f"rule {code}: check()"):
        return list(check(*args))


# -- what the boundary saves and restores ------------------------------------------


@contextlib.contextmanager
def _saved_state(path: Path, paths: Sequence[Path]) -> Iterator[None]:
    folders = list(dict.fromkeys(str(p.resolve()) for p in (path.parent, *paths)))
    argv, syspath, cwd = sys.argv, list(sys.path), _cwd()
    modules = set(sys.modules)
    bytecode = sys.dont_write_bytecode
    sys.argv = [str(path)]
    sys.path[:0] = folders
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.argv = argv
        sys.path[:] = syspath
        sys.dont_write_bytecode = bytecode
        if cwd is not None and _cwd() != cwd:
            with contextlib.suppress(OSError):
                os.chdir(cwd)
        _forget_user_modules(folders, set(sys.modules) - modules)


@contextlib.contextmanager
def _torch_defaults_kept(where: str) -> Iterator[None]:
    """torch's default dtype and device as they were (torch is looked up, not imported:
    a ``--rules-dir`` module may run before anything imports it, and may import it
    itself). A changed default device is refused only when the code returned: an
    error it raised says more."""
    saved = _traceable().torch_defaults() if "torch" in sys.modules else None
    returned = False
    try:
        yield
        returned = True
    finally:
        if "torch" in sys.modules:
            _traceable().restore_torch_defaults(saved, where, refuse=returned)


def _traceable() -> ModuleType:
    from shapelint.capture import traceable

    return traceable


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the working directory was removed
        return None


def _forget_user_modules(folders: Sequence[str], names: Iterable[str]) -> None:
    """Drop the modules the user's code imported from its own folders (never
    shapelint's, nor anything installed: a virtual environment may sit inside the
    project, and a second copy of torch or shapelint would break identity checks)."""
    prefixes = tuple(f.rstrip(os.sep) + os.sep for f in folders)
    for name in names:
        file = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(file, str) and _is_users(name, os.path.abspath(file), prefixes):
            del sys.modules[name]


def _is_users(name: str, file: str, prefixes: tuple[str, ...]) -> bool:
    if name == "shapelint" or name.startswith("shapelint."):
        return False
    if not file.startswith(prefixes) or file.startswith(_INSTALLED):
        return False
    return not any(part in ("site-packages", "dist-packages") for part in Path(file).parts)


#: where installed packages live (never the user's modules)
_INSTALLED = tuple(dict.fromkeys(os.path.abspath(p).rstrip(os.sep) + os.sep
                                 for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)))


@contextlib.contextmanager
def _captured(output: io.StringIO) -> Iterator[None]:
    """``sys.stdout``/``sys.stderr`` into ``output``; fd 1 onto fd 2."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(_fd1_to_stderr())
        stack.enter_context(contextlib.redirect_stdout(output))
        stack.enter_context(contextlib.redirect_stderr(output))
        yield


@contextlib.contextmanager
def _fd1_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 at descriptor 2 while the body runs (a C extension or
    ``os.system`` writes to fd 1 directly). A no-op where the descriptors cannot be
    duplicated."""
    try:
        for stream in (sys.stdout, sys.__stdout__):
            if stream is not None:
                stream.flush()
        saved = os.dup(1)
    except (OSError, ValueError):
        yield
        return
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(saved)
        yield
        return
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


# -- the messages ----------------------------------------------------------------------


def _message(path: Path, what: str, exc: BaseException, output: str) -> str:
    if isinstance(exc, SystemExit):
        outcome = _exit_outcome(exc)
    else:
        outcome = f"raised {one_line(exc)}"
    last = _last_line(output)
    said = f' (its last output: "{cap_length(last, QUOTE_CAP)}")' if last else ""
    return cap_length(f"{path}: {what} {outcome}{said}", 2 * QUOTE_CAP + 200)


def _exit_outcome(exc: SystemExit) -> str:
    code = exc.code
    shown = "" if code is None else cap_length(repr(code), QUOTE_CAP)
    return f"called sys.exit({shown}) instead of returning"


def _syntax_message(path: Path, exc: SyntaxError) -> str:
    file = exc.filename or str(path)
    shown = str(path) if Path(file).resolve() == path.resolve() else file
    line = f":{exc.lineno}" if exc.lineno else ""
    return cap_length(f"{shown}{line}: syntax error: {exc.msg}")


def _last_line(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


# -- torch's own noise -----------------------------------------------------------------


class _DropMetaFailures(logging.Filter):
    """torch's fake-tensor logger prints a 19-line traceback ("failed while attempting
    to run meta for aten.mm") before re-raising the error that shapelint reports."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "failed while attempting to run meta" not in str(record.msg)


_FAKE_TENSOR_LOGGER = "torch._subclasses.fake_tensor"


def quiet_torch_logs() -> None:
    """Silence the fake-tensor logger's traceback (idempotent; the error it logs is
    raised and reported on one line anyway)."""
    logger = logging.getLogger(_FAKE_TENSOR_LOGGER)
    if not any(isinstance(f, _DropMetaFailures) for f in logger.filters):
        logger.addFilter(_DropMetaFailures())


__all__ = ["LOCK", "call_user", "import_user_file", "quiet_torch_logs", "run_user_rule", "user_code"]
