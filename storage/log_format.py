"""Log lines in ``log.format``: one event per line, logfmt or JSON.

Modules log through :func:`storage.log_event.event`, naming the event
(``connection.closed``) and passing its fields as keywords, and the sentence an operator
reads as ``msg`` where there is one; the formatters here render ``event``, ``msg`` and the
fields after the timestamp, level and logger.

:func:`configure` is the one logging set-up of ``serve``, ``tier`` and ``status``: it puts
one handler on the root logger, so that every record of every package (``proxy.*``,
``storage.*``, ``tierproxy.*``, the libraries underneath) is one line in ``log.format``.
``event`` is always a dotted name: a record logged with a plain message (a library's) is
event :data:`PLAIN_EVENT` with that message as its ``msg``. It also leaves the level and the
format in the environment, so that the processes this one starts (Spark's Python workers,
through :func:`configure_from_environment`) log alike.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from typing import IO, Any, Final

from storage.log_event import event_of, fields_of

__all__ = [
    "FORMAT_VARIABLE",
    "LEVEL_VARIABLE",
    "OUR_LOGGERS",
    "PLAIN_EVENT",
    "JsonFormatter",
    "LogfmtFormatter",
    "configure",
    "configure_from_environment",
]

LEVEL_VARIABLE: Final = "TIERPROXY_LOG_LEVEL"
FORMAT_VARIABLE: Final = "TIERPROXY_LOG_FORMAT"
"""The environment variables :func:`configure` leaves for the processes this one starts."""

PLAIN_EVENT: Final = "log.message"
"""The event of a record logged without one (a library's line): its message is the ``msg``."""
OUR_LOGGERS: Final = ("tierproxy", "proxy", "storage", "protocol")
"""The logger trees of tierproxy's own code, which log from ``log.level``: the named event
loggers (``tierproxy.connection``, ...) and each package's ``logging.getLogger(__name__)``."""
_LIBRARY_FLOOR: Final = logging.WARNING
"""Libraries (asyncio, botocore, aiohttp, py4j, ...) log from WARNING, whatever ``log.level``
says: their DEBUG and INFO would drown tierproxy's own lines."""


def _record_fields(record: logging.LogRecord, process: Mapping[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "logger": record.name,
        **process,
    }
    name = event_of(record)
    message = record.getMessage()
    fields["event"] = PLAIN_EVENT if name is None else name
    if message != name:
        fields["msg"] = message
    fields.update(fields_of(record))
    if record.exc_info:
        fields["exc"] = logging.Formatter().formatException(record.exc_info)
    return fields


class LogfmtFormatter(logging.Formatter):
    """``key=value`` pairs; values with spaces, quotes or ``=`` are double-quoted.

    ``process`` fields (a worker's ``worker=2``) go on every line, before the event."""

    def __init__(self, process: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self._process = dict(process or {})

    def format(self, record: logging.LogRecord) -> str:
        fields = _record_fields(record, self._process)
        return " ".join(f"{key}={_logfmt_value(value)}" for key, value in fields.items())


class JsonFormatter(logging.Formatter):
    """One JSON object per line (with the ``process`` fields, as :class:`LogfmtFormatter`)."""

    def __init__(self, process: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self._process = dict(process or {})

    def format(self, record: logging.LogRecord) -> str:
        fields = _record_fields(record, self._process)
        return json.dumps(fields, default=str, separators=(",", ":"))


_ESCAPES: Final = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _logfmt_value(value: Any) -> str:
    """``value`` bare, or double-quoted with backslash escapes (``\\"``, ``\\\\``, ``\\n``,
    ``\\r``, ``\\t``, ``\\uXXXX``, ``\\UXXXXXXXX``) when it is empty or holds a space, a
    quote, ``=``, a backslash or any character that is not printable: no value, whatever it
    holds, breaks the line (``str.splitlines`` splits on more than ``\\n``)."""
    text = str(value)
    if text and all(ch.isprintable() and ch not in ' "=\\' for ch in text):
        return text
    return '"' + "".join(_escaped(ch) for ch in text) + '"'


def _escaped(ch: str) -> str:
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if ch.isprintable():
        return ch
    code = ord(ch)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


class _StderrHandler(logging.StreamHandler[IO[str]]):
    """Writes to ``sys.stderr`` as it is when a record is emitted (as logging's last resort
    does), so a stream swapped in and closed later (a test's capture) is never written to."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> IO[str]:  # type: ignore[override]  # read-only: always the current one
        return sys.stderr


def configure(
    level: str,
    fmt: str,
    process: Mapping[str, Any] | None = None,
    *,
    stream: IO[str] | None = None,
) -> None:
    """Send every log record to ``stream`` (stderr) in ``fmt`` (``logfmt`` or ``json``):
    tierproxy's own from ``level`` up, the libraries' from WARNING (or ``level``, if higher);
    each line with the ``process`` fields (which worker wrote it).

    Replaces the root logger's handlers and the levels a previous call set, so a command
    configures its logs once, at start, and nothing prints in another format. Sets
    :data:`LEVEL_VARIABLE` and :data:`FORMAT_VARIABLE` for the processes started after it.
    """
    os.environ[LEVEL_VARIABLE] = level
    os.environ[FORMAT_VARIABLE] = fmt
    handler: logging.Handler = _StderrHandler() if stream is None else logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter(process) if fmt == "json" else LogfmtFormatter(process))
    ours = logging.getLevelName(level.upper())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(ours, _LIBRARY_FLOOR))
    for name in OUR_LOGGERS:
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
        logger.setLevel(ours)
        logger.propagate = True


def configure_from_environment(process: Mapping[str, Any] | None = None) -> bool:
    """:func:`configure` as the process that started this one did (its
    :data:`LEVEL_VARIABLE` and :data:`FORMAT_VARIABLE`); whether it had."""
    level, fmt = os.environ.get(LEVEL_VARIABLE), os.environ.get(FORMAT_VARIABLE)
    if not level or not fmt:
        return False
    configure(level, fmt, process)
    return True
