"""``tierproxy serve``'s log in ``log.format`` through a broker outage: one format, dotted
event names, retries with back-off, and a line when the broker is back.

The proxy runs as the real command with the remote tier on (a local directory), so its
metadata consumer follows the metadata topic; the broker is one of the test's own (the
shared ones must not be stopped), stopped for a while and started again on the same port
with its data. Every line of the proxy's log must parse as ``log.format`` (JSON, or logfmt
read back by ``tests.log_lines``) and carry ``ts``, ``level``, ``logger`` and ``event``; every
``event`` is a dotted name; the consumer's retry lines are far fewer than its attempts (it
retries about once a second), and ``reconnected after`` follows once the broker is back.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any, Final

import pytest

from proxy.embedded import KAFKA_4, KafkaBroker, ensure_jars
from proxy.embedded.tierproxy import TierproxyServer, write_config
from tests.conditions import wait_until
from tests.log_lines import process_log

pytestmark = [pytest.mark.integration]

DOTTED: Final = re.compile(r"^[a-z_]+(\.[a-z_]+)+$")
OUTAGE_ATTEMPTS: Final = 16
"""Failed polls of the metadata consumer before the broker comes back (about 16 s at its
1 s back-off): attempts 1, 2, 4, 8 and 16 are logged, the ten others are not."""


def lines_of(proxy: TierproxyServer, fmt: str) -> list[dict[str, Any]]:
    """Every complete line of the proxy's log, parsed as ``fmt``, the harness's own ``--- ``
    lines left out.

    :raises AssertionError: a line does not parse, lacks ``ts``, ``level``, ``logger`` or
        ``event``, or its ``event`` is not a dotted name (checked while the test waits, so it
        fails at the first such line).
    """
    lines = process_log(proxy.process, fmt)
    for line in lines:
        assert {"ts", "level", "logger", "event"} <= line.keys(), line
        assert DOTTED.match(str(line["event"])), line
    return lines


def named(lines: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [line for line in lines if line["event"] == name]


def retries(proxy: TierproxyServer, fmt: str) -> int:
    """The highest attempt number among the consumer's logged retries."""
    return max(
        (int(line["attempt"]) for line in named(lines_of(proxy, fmt), "metadata.consumer.retry")),
        default=0,
    )


@pytest.mark.parametrize("fmt", ["json", "logfmt"])
def test_a_broker_outage_is_logged_in_the_format_with_back_off_and_its_end(
    fmt: str, tmp_path: Path
) -> None:
    with KafkaBroker(ensure_jars(KAFKA_4), work_dir=tmp_path / "kafka") as server:
        broker = server.start()
        config = write_config(
            tmp_path / "proxy.toml",
            {
                "log.format": fmt,
                "shutdown.timeout.ms": 2000,
                "remote.log.storage.system.enable": True,
                "remote.log.storage.backend": "local",
                "remote.log.storage.local.dir": str(tmp_path / "remote"),
                "remote.log.metadata.topic.name": f"__rlm-logs-{uuid.uuid4().hex[:8]}",
                "remote.log.metadata.topic.partitions": 1,
            },
        )
        proxy = TierproxyServer(
            config=config, log_path=tmp_path / "proxy.log", bootstrap=broker.bootstrap
        )
        proxy.start()
        try:
            wait_until(lambda: proxy.health("/readyz")[0] == 200, timeout_s=120, what="proxy ready")
            server.stop()
            wait_until(
                lambda: retries(proxy, fmt) >= OUTAGE_ATTEMPTS,
                timeout_s=300,
                what=f"the metadata consumer's failed poll {OUTAGE_ATTEMPTS}",
            )
            server.start()
            wait_until(
                lambda: bool(named(lines_of(proxy, fmt), "metadata.consumer.reconnected")),
                timeout_s=300,
                what="the metadata consumer's reconnected line",
            )
        finally:
            proxy.stop()
    lines = lines_of(proxy, fmt)  # every line in the format, every event a dotted name

    failed = named(lines, "metadata.consumer.retry")
    (reconnected,) = named(lines, "metadata.consumer.reconnected")
    attempts = int(reconnected["attempts"])
    assert attempts > OUTAGE_ATTEMPTS, reconnected
    # The first failure, the powers of two and at most a line a minute besides.
    assert [int(line["attempt"]) for line in failed][:5] == [1, 2, 4, 8, 16], failed
    assert len(failed) <= 5 + 1 + float(reconnected["seconds"]) / 60, failed
    assert len(failed) * 3 < attempts, (len(failed), attempts)
    # Nothing else writes a line a second meanwhile either.
    outage = [line for line in lines if failed[0]["ts"] <= line["ts"] <= reconnected["ts"]]
    assert len(outage) * 2 < float(reconnected["seconds"]), outage
    assert re.fullmatch(
        r"consuming __rlm-logs-\w+: reconnected after \d+\.\d s \(\d+ attempts\)",
        str(reconnected["msg"]),
    ), reconnected
    assert "Traceback" not in proxy.process.log_path.read_text(errors="replace")
