"""Structured log lines and metric labels."""

from __future__ import annotations

import io
import json
import logging
import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.logs import JsonFormatter, LogfmtFormatter, configure, event
from proxy.metrics import ProxyMetrics, api_name
from tests.log_lines import logfmt_fields, parse_log


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


def log_everything() -> None:
    """A record of each kind: an event, plain messages of our packages, a library's."""
    event(logging.getLogger("tierproxy.connection"), logging.INFO, "connection.closed", conn=3)
    logging.getLogger("storage.kafka_client.consumer").warning("consuming %s: %s", "t", "gone")
    logging.getLogger("storage.rlmm.topic_manager").info("loaded %d segments", 4)
    logging.getLogger("proxy.discovery").debug("asked %s", "kafka-1:9092")
    logging.getLogger("botocore.endpoint").info("a library's chatter")
    logging.getLogger("botocore.endpoint").warning("a library's warning")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("storage.tiering.pipeline").exception("cycle failed")


@pytest.mark.parametrize("fmt", ["logfmt", "json"])
def test_every_package_logs_in_the_configured_format(fmt: str) -> None:
    stream = io.StringIO()
    configure("DEBUG", fmt, stream=stream)

    log_everything()

    parse = json.loads if fmt == "json" else logfmt_fields
    lines = [parse(line) for line in stream.getvalue().splitlines()]
    assert [(line["logger"], line["level"], line["event"], line.get("msg")) for line in lines] == [
        ("tierproxy.connection", "info", "connection.closed", None),
        ("storage.kafka_client.consumer", "warning", "log.message", "consuming t: gone"),
        ("storage.rlmm.topic_manager", "info", "log.message", "loaded 4 segments"),
        ("proxy.discovery", "debug", "log.message", "asked kafka-1:9092"),
        ("botocore.endpoint", "warning", "log.message", "a library's warning"),
        ("storage.tiering.pipeline", "error", "log.message", "cycle failed"),
    ]
    assert str(lines[0]["conn"]) == "3"
    assert "ValueError: boom" in lines[-1]["exc"]


def test_the_level_applies_to_our_loggers_and_warnings_always_show() -> None:
    stream = io.StringIO()
    configure("WARNING", "logfmt", stream=stream)

    log_everything()

    messages = [logfmt_fields(line)["msg"] for line in stream.getvalue().splitlines()]
    assert messages == ["consuming t: gone", "a library's warning", "cycle failed"]


def test_configuring_again_replaces_the_handler() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure("INFO", "json", stream=first)
    configure("INFO", "logfmt", stream=second)

    logging.getLogger("storage.x").info("once")

    assert first.getvalue() == ""
    assert logfmt_fields(second.getvalue().strip())["msg"] == "once"


def test_without_a_stream_the_current_stderr_is_written(capsys: pytest.CaptureFixture[str]) -> None:
    configure("INFO", "json")
    capsys.readouterr()

    logging.getLogger("storage.x").warning("to stderr")

    assert json.loads(capsys.readouterr().err)["msg"] == "to stderr"


DOTTED = re.compile(r"^[a-z_]+(\.[a-z_]+)+$")


def log_sentences() -> None:
    """Events with a sentence (one with an exception), an event without, a library's line."""
    consumer = logging.getLogger("storage.kafka_client.consumer")
    event(
        consumer,
        logging.WARNING,
        "metadata.consumer.retry",
        msg='consuming t: no bootstrap server answered: "a=b"; retrying in 0.80 s',
        topic="t",
        attempt=1,
    )
    try:
        raise ValueError("boom")
    except ValueError:
        event(
            logging.getLogger("storage.tiering.job"),
            logging.ERROR,
            "tiering.cycle.failed",
            msg="tiering cycle failed: boom",
            exc_info=True,
        )
    event(logging.getLogger("tierproxy.connection"), logging.INFO, "connection.closed", conn=3)
    logging.getLogger("asyncio").warning("Task was destroyed but it is pending!")


@pytest.mark.parametrize("fmt", ["logfmt", "json"])
def test_every_event_is_a_dotted_name_with_its_sentence_in_msg(fmt: str) -> None:
    stream = io.StringIO()
    configure("INFO", fmt, stream=stream)

    log_sentences()

    lines = parse_log(stream.getvalue(), fmt)
    assert [line["event"] for line in lines] == [
        "metadata.consumer.retry",
        "tiering.cycle.failed",
        "connection.closed",
        "log.message",
    ]
    assert all(DOTTED.match(line["event"]) for line in lines)
    assert all({"ts", "level", "logger", "event"} <= line.keys() for line in lines)
    retry, failed, closed, library = lines
    assert retry["msg"] == 'consuming t: no bootstrap server answered: "a=b"; retrying in 0.80 s'
    assert str(retry["topic"]) == "t" and str(retry["attempt"]) == "1"
    assert list(retry)[:6] == ["ts", "level", "logger", "event", "msg", "topic"]
    assert failed["msg"] == "tiering cycle failed: boom"
    assert "ValueError: boom" in failed["exc"]
    assert "msg" not in closed
    assert library["msg"] == "Task was destroyed but it is pending!"


def test_an_event_with_a_sentence_reads_as_the_sentence_to_plain_handlers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO):
        event(
            logging.getLogger("storage.startup"),
            logging.INFO,
            "cluster.connected",
            msg="connected to the cluster at k:9092: PLAINTEXT",
        )
        event(logging.getLogger("tierproxy.connection"), logging.INFO, "connection.closed")
    assert caplog.messages == ["connected to the cluster at k:9092: PLAINTEXT", "connection.closed"]
    assert caplog.records[0].funcName == (
        "test_an_event_with_a_sentence_reads_as_the_sentence_to_plain_handlers"
    )


def test_a_child_process_logs_in_the_parents_format() -> None:
    """Spark's Python workers configure their logs from what the pipeline's process left."""
    configure("INFO", "json", stream=io.StringIO())
    child = (
        "import logging\n"
        "from storage.log_event import event\n"
        "from storage.log_format import configure_from_environment\n"
        "assert configure_from_environment()\n"
        "event(logging.getLogger('storage.tiering.copy_stage'), logging.INFO, 'a.b', msg='hi')\n"
        "logging.getLogger('storage.x').debug('not at INFO')\n"
    )

    result = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=True
    )

    (line,) = parse_log(result.stderr, "json")
    assert (line["logger"], line["event"], line["msg"]) == (
        "storage.tiering.copy_stage",
        "a.b",
        "hi",
    )


@given(msg=st.text(), value=st.text(), number=st.integers())
def test_any_sentence_and_value_is_one_line_that_reads_back(
    msg: str, value: str, number: int
) -> None:
    captured = record(msg=msg, reason=value, count=number)

    for fmt, formatter in (("logfmt", LogfmtFormatter()), ("json", JsonFormatter())):
        line = formatter.format(captured)
        (parsed,) = parse_log(line, fmt)  # one line, whatever the text held
        assert parsed["event"] == "connection.closed"
        assert (parsed.get("msg", "connection.closed"), parsed["reason"]) == (msg, value)
        assert str(parsed["count"]) == str(number)
