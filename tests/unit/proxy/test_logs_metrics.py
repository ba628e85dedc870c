"""Structured log lines and metric labels."""

from __future__ import annotations

import json
import logging

from proxy.logs import JsonFormatter, LogfmtFormatter, event
from proxy.metrics import ProxyMetrics, api_name


def record(**fields: object) -> logging.LogRecord:
    logger = logging.getLogger("tierproxy.test")
    captured: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            captured.append(record)

    handler = Keep()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        event(logger, logging.INFO, "connection.closed", **fields)
    finally:
        logger.removeHandler(handler)
    (only,) = captured
    return only


def test_logfmt_is_one_line_of_key_value_pairs() -> None:
    line = LogfmtFormatter().format(record(conn=7, reason='broker said "no"\nbye', ok=True))
    assert "\n" not in line
    assert "level=info" in line
    assert "event=connection.closed" in line
    assert "conn=7" in line
    assert 'reason="broker said \\"no\\"\\nbye"' in line


def test_json_lines_carry_the_fields() -> None:
    parsed = json.loads(JsonFormatter().format(record(conn=7, client="1.2.3.4:5")))
    assert parsed["event"] == "connection.closed"
    assert parsed["conn"] == 7
    assert parsed["client"] == "1.2.3.4:5"


def test_api_labels_are_kafka_names() -> None:
    assert api_name(1) == "fetch"
    assert api_name(60) == "describe_cluster"
    assert api_name(9999) == "9999"


def test_metrics_have_their_own_registry() -> None:
    first, second = ProxyMetrics(), ProxyMetrics()
    first.request(1, 100)
    first.response(1, 2000, 0.001)
    first.upstream_error("connect")
    sample = first.registry.get_sample_value
    assert sample("tierproxy_requests_total", {"api": "fetch"}) == 1
    assert sample("tierproxy_response_bytes_total", {"api": "fetch"}) == 2000
    assert sample("tierproxy_upstream_errors_total", {"kind": "connect"}) == 1
    assert second.registry.get_sample_value("tierproxy_requests_total", {"api": "fetch"}) is None
