"""Structured logs for the proxy: one event per line, logfmt or JSON, with the connection id
in each.

Modules log through :func:`event`, naming the event (``connection.closed``), passing its
fields as keywords and the sentence an operator reads as ``msg`` where there is one. Grep
``conn=17`` to follow one client connection from accept to close. The event helper and the
formatters of ``log.format`` are the storage library's (:mod:`storage.log_event`,
:mod:`storage.log_format`), which the pipeline and Spark's workers use too.
"""

from __future__ import annotations

from storage.log_event import event
from storage.log_format import (
    OUR_LOGGERS,
    PLAIN_EVENT,
    JsonFormatter,
    LogfmtFormatter,
    configure,
)

__all__ = ["OUR_LOGGERS", "PLAIN_EVENT", "JsonFormatter", "LogfmtFormatter", "configure", "event"]
