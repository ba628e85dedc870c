"""Structured logs: one event per line, logfmt or JSON, with the connection id in each.

Modules log through :func:`event`, naming the event (``connection.closed``) and passing its
fields as keywords; the formatter renders them after the timestamp, level and logger. Grep
``conn=17`` to follow one client connection from accept to close.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Final

__all__ = ["JsonFormatter", "LogfmtFormatter", "configure", "event"]

_FIELDS: Final = "tierproxy_fields"
ROOT_LOGGER: Final = "tierproxy"


def event(logger: logging.Logger, level: int, name: str, **fields: Any) -> None:
    """Log event ``name`` with ``fields`` (rendered as key=value pairs or JSON members)."""
    if logger.isEnabledFor(level):
        logger.log(level, name, extra={_FIELDS: fields})


def _record_fields(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        + f".{int(record.msecs):03d}Z",
        "level": record.levelname.lower(),
        "logger": record.name,
        "event": record.getMessage(),
    }
    fields.update(getattr(record, _FIELDS, {}))
    if record.exc_info:
        fields["exc"] = logging.Formatter().formatException(record.exc_info)
    return fields


class LogfmtFormatter(logging.Formatter):
    """``key=value`` pairs; values with spaces, quotes or ``=`` are double-quoted."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _record_fields(record)
        return " ".join(f"{key}={_logfmt_value(value)}" for key, value in fields.items())


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_record_fields(record), default=str, separators=(",", ":"))


def _logfmt_value(value: Any) -> str:
    text = str(value)
    if text and not any(ch in text for ch in ' "=\n\t\\'):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def configure(level: str, fmt: str) -> None:
    """Send tierproxy's events to stderr in ``fmt`` (``logfmt`` or ``json``) from ``level`` up.

    Only the ``tierproxy`` logger tree and ``asyncio`` (whose errors in protocol callbacks
    would otherwise go unseen) are configured, so embedding applications keep theirs.
    """
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    for name in (ROOT_LOGGER, "asyncio"):
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(level.upper() if name == ROOT_LOGGER else logging.WARNING)
        logger.propagate = False
