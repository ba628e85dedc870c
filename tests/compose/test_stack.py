"""The docker-compose stack users run, run for real: Kafka, SeaweedFS, the proxy, the pipeline.

Numbered records are produced through the proxy to a ``tiered-*`` topic while the pipeline
service runs, and the broker's log start offsets move once it has tiered them; then every
partition is read from offset 0 through the proxy service by Kafka's Java consumer and by
librdkafka (at once), each record exactly once, the oldest ones from S3. The same holds with the
proxy's container restarted in the middle of a read and after the broker's container
restarted. The steps run inside the stack from the ``integration`` service
(tests/compose/client.py); the images, the engine and the teardown are conftest.py's.
"""

from __future__ import annotations

import uuid

import pytest

from tests.compose.client import CLIENTS
from tests.compose.client import DEFAULT_RECORDS as RECORDS
from tests.compose.stack import ComposeError, Stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(3600)]

HEALTHY_TIMEOUT_S = 300.0
PAUSE_LINE = "librdkafka: paused after"
STEP_OUTPUT_TIMEOUT_S = 600.0


@pytest.fixture(scope="module")
def tiered_topic(stack: Stack) -> str:
    """A topic of RECORDS numbered records that the pipeline has tiered off the broker.

    The pipeline service runs already (it started with the proxy): it tiers the records on
    its first cycle after they are there.
    """
    topic = f"tiered-compose-{uuid.uuid4().hex[:8]}"
    stack.step("produce", topic, "--records", str(RECORDS))
    stack.step("wait-tiered", topic)
    return topic


def _consume_with_both(stack: Stack, topic: str) -> None:
    """Kafka's Java consumer and librdkafka read the topic at once, each checked alone."""
    output = stack.step("consume", topic, "--records", str(RECORDS))
    for client in CLIENTS:
        assert f"{client}: read {RECORDS} records from offset 0" in output, output


def test_java_and_librdkafka_consumers_read_every_record_once(
    stack: Stack, tiered_topic: str
) -> None:
    _consume_with_both(stack, tiered_topic)


def test_proxy_restart_during_a_read_loses_and_repeats_nothing(
    stack: Stack, tiered_topic: str
) -> None:
    reader = stack.start_step(
        "consume",
        tiered_topic,
        "--records",
        str(RECORDS),
        "--client",
        "librdkafka",
        "--pause-at",
        str(RECORDS // 3),
    )
    lines: list[str] = []
    try:
        assert reader.stdout is not None
        for line in reader.stdout:
            lines.append(line)
            if line.startswith(PAUSE_LINE):
                stack.restart("proxy")
                stack.wait_healthy("proxy", timeout_s=HEALTHY_TIMEOUT_S)
        status = reader.wait(timeout=STEP_OUTPUT_TIMEOUT_S)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
        if reader.stdout is not None:
            reader.stdout.close()
    output = f"{''.join(lines)}\n--- services ---\n{stack.logs('proxy', 'kafka')}"
    assert any(line.startswith(PAUSE_LINE) for line in lines), output
    assert status == 0, output
    assert f"librdkafka: read {RECORDS} records from offset 0" in output


def test_broker_restart_then_both_consumers_read_every_record_once(
    stack: Stack, tiered_topic: str
) -> None:
    stack.restart("kafka")
    stack.wait_healthy("kafka", timeout_s=HEALTHY_TIMEOUT_S)
    try:
        _consume_with_both(stack, tiered_topic)
    except ComposeError as err:
        raise AssertionError(f"after the broker restarted: {err}") from err
