"""The docker-compose stack users run, run for real: Kafka, SeaweedFS, the proxy, the pipeline.

Numbered records are produced through the proxy to a ``tiered-*`` topic while the pipeline
service runs, and the broker's log start offsets move once it has tiered them; then every
partition is read from offset 0 through the proxy service by Kafka's Java consumer and by
librdkafka (at once), each record exactly once, the oldest ones from S3. The same holds with the
proxy's container restarted in the middle of a read and after the broker's container
restarted. With the ``replicas`` profile's second proxy (started with the stack), consumers
bootstrapped to both proxies read every record once, and a librdkafka consumer whose proxy's
container is stopped in the middle of a read goes on through the other: every record at its
offset, at least once, and each proxy served it records from S3. The steps run inside the
stack from the ``integration`` service (tests/compose/client.py); the images, the engine and
the teardown are conftest.py's.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping

import pytest

from tests.compose.client import CLIENTS
from tests.compose.client import DEFAULT_RECORDS as RECORDS
from tests.compose.stack import BOTH_PROXIES_BOOTSTRAP, PROXIES, ComposeError, Stack

pytestmark = [pytest.mark.integration, pytest.mark.timeout(3600)]

HEALTHY_TIMEOUT_S = 300.0
PAUSE_LINE = "librdkafka: paused after"
REPORTED = (PAUSE_LINE, "librdkafka: failed over", "librdkafka: read ")
"""The lines of a paused read that go to the terminal as they come."""
STEP_OUTPUT_TIMEOUT_S = 600.0
BOTH_PROXIES = {"TIERPROXY_BOOTSTRAP": BOTH_PROXIES_BOOTSTRAP}
READ_THROUGH = re.compile(r"read through (?P<service>[\w-]+):\d+; waiting for it to stop")


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


def _paused_read(
    stack: Stack,
    topic: str,
    *options: str,
    at_pause: Callable[[str], None],
    environment: Mapping[str, str] | None = None,
) -> str:
    """A librdkafka read of every record that pauses after a third of them, when
    ``at_pause`` gets the pause line; what it printed, then the services' logs.

    :raises AssertionError: it never paused or did not pass.
    """
    reader = stack.start_step(
        "consume",
        topic,
        "--records",
        str(RECORDS),
        "--client",
        "librdkafka",
        "--pause-at",
        str(RECORDS // 3),
        *options,
        environment=environment,
    )
    lines: list[str] = []
    try:
        assert reader.stdout is not None
        for line in reader.stdout:
            lines.append(line)
            if line.startswith(REPORTED):
                stack.report(line.rstrip())
            if line.startswith(PAUSE_LINE):
                at_pause(line)
        status = reader.wait(timeout=STEP_OUTPUT_TIMEOUT_S)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
        if reader.stdout is not None:
            reader.stdout.close()
    output = f"{''.join(lines)}\n--- services ---\n{stack.logs(*PROXIES, 'kafka')}"
    assert any(line.startswith(PAUSE_LINE) for line in lines), output
    assert status == 0, output
    return output


def test_proxy_restart_during_a_read_loses_and_repeats_nothing(
    stack: Stack, tiered_topic: str
) -> None:
    def restart(_line: str) -> None:
        stack.restart("proxy")
        stack.wait_healthy("proxy", timeout_s=HEALTHY_TIMEOUT_S)

    output = _paused_read(stack, tiered_topic, at_pause=restart)
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


def test_consumers_bootstrapped_to_both_proxies_read_every_record_once(
    stack: Stack, tiered_topic: str
) -> None:
    output = stack.step(
        "consume", tiered_topic, "--records", str(RECORDS), environment=BOTH_PROXIES
    )
    for client in CLIENTS:
        assert f"{client}: read {RECORDS} records from offset 0" in output, output


def test_stopping_the_proxy_a_consumer_reads_through_fails_it_over_to_the_other(
    stack: Stack, tiered_topic: str
) -> None:
    stopped: list[str] = []

    def stop_the_one_read_through(line: str) -> None:
        match = READ_THROUGH.search(line)
        assert match is not None, line
        stopped.append(match["service"])
        stack.stop(match["service"])

    try:
        output = _paused_read(
            stack,
            tiered_topic,
            "--fail-over",
            at_pause=stop_the_one_read_through,
            environment=BOTH_PROXIES,
        )
    finally:
        for service in stopped:  # the stack as it was, for what runs after
            stack.start(service)
            stack.wait_healthy(service, timeout_s=HEALTHY_TIMEOUT_S)
    (other,) = set(PROXIES) - set(stopped)
    assert f"librdkafka: failed over from {stopped[0]}:" in output, output
    assert f"to {other}:" in output, output
    assert (
        f"librdkafka: read {RECORDS} records from offset 0 through the proxy, each at least once"
        in output
    ), output
