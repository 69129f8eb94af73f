"""The one error type users see: a clear one-line message and exit code 2."""


class ShapelintError(Exception):
    """Bad input or an untraceable model. The CLI prints ``shapelint: error: <msg>``
    on one line and exits with code 2 (a traceback only with ``--debug``)."""
