"""Structured log events: a dotted name, the sentence an operator reads, and fields.

Every log line of tierproxy's own code is an event (``metadata.consumer.retry``,
``cluster.connected``): a name to grep and alert on that never changes with the wording, the
sentence in ``msg`` for the reader, and the values as fields. :func:`event` attaches the name
and fields to the log record; the formatter of ``log.format`` (:mod:`storage.log_format`)
renders them. The record's message stays the sentence (or the name, for an event without
one), so a plain handler still prints something readable.

The storage library and the proxy both log through here: the storage library cannot import
the proxy.
"""

from __future__ import annotations

import logging
from typing import Any, Final

__all__ = ["EVENT_ATTRIBUTE", "FIELDS_ATTRIBUTE", "event", "event_of", "fields_of"]

EVENT_ATTRIBUTE: Final = "tierproxy_event"
"""The log record attribute that holds the event's dotted name."""
FIELDS_ATTRIBUTE: Final = "tierproxy_fields"
"""The log record attribute that holds the event's fields."""


def event(logger: logging.Logger, level: int, name: str, /, **fields: Any) -> None:
    """Log event ``name`` (a dotted name: ``cluster.connected``) with ``fields`` (rendered as
    key=value pairs or JSON members).

    Two keywords are not fields: ``msg``, the sentence an operator reads (the record's
    message; without it, the message is ``name``), and ``exc_info=True``, which attaches the
    exception being handled.
    """
    if logger.isEnabledFor(level):
        msg = fields.pop("msg", None)
        logger.log(
            level,
            name if msg is None else str(msg),
            exc_info=bool(fields.pop("exc_info", False)),
            extra={EVENT_ATTRIBUTE: name, FIELDS_ATTRIBUTE: fields},
            stacklevel=2,
        )


def event_of(record: logging.LogRecord) -> str | None:
    """The event name of ``record`` (``None``: a plain record, a library's say)."""
    name = getattr(record, EVENT_ATTRIBUTE, None)
    return name if isinstance(name, str) else None


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    """The fields of ``record``'s event (empty for a plain record)."""
    fields = getattr(record, FIELDS_ATTRIBUTE, None)
    return dict(fields) if isinstance(fields, dict) else {}
