"""How the metadata manager's start meets a cluster that is not up (no broker needed: a
closed loopback port is a cluster that is down).

Kafka's own manager gives up after ``remote.log.metadata.initialization.timeout.ms``, and so
do ``tier --once`` and ``status``; ``serve`` and the ``tier`` loop wait for the cluster as
long as it takes and only then start that clock. A timeout says what it waited for.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.embedded import free_port
from proxy.embedded.ports import LOOPBACK
from storage.console import report_console
from storage.kafka_client import BrokerConnectionError
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rlmm.topic_manager import TopicBasedRemoteLogMetadataManager
from storage.tiering import job
from storage.tiering.job import run_tiering, settings_from_flat

TIMEOUT_MS = 500


@pytest.fixture
def down() -> str:
    return f"{LOOPBACK}:{free_port()}"


def manager(bootstrap: str) -> TopicBasedRemoteLogMetadataManager:
    config = dataclasses.replace(
        RemoteLogMetadataConfig(), initialization_timeout_ms=TIMEOUT_MS, snapshot_dir=""
    )
    return TopicBasedRemoteLogMetadataManager(config, bootstrap_servers=bootstrap)


async def test_a_bounded_start_says_no_broker_answered(down: str) -> None:
    message = (
        f"no broker at {down} answered within "
        f"remote.log.metadata.initialization.timeout.ms ({TIMEOUT_MS} ms)"
    )
    with pytest.raises(TimeoutError, match=re.escape(message)):
        await manager(down).start()


async def test_waiting_for_the_cluster_outlasts_the_timeout(down: str) -> None:
    rlmm = manager(down)
    with pytest.raises(TimeoutError) as raised:
        # Four times the manager's own bound, and it is still waiting.
        await asyncio.wait_for(rlmm.start(wait_for_cluster=True), 4 * TIMEOUT_MS / 1000)
    assert str(raised.value) == ""  # wait_for's, not the manager's
    await rlmm.close()


async def test_the_loop_stops_while_it_waits_for_the_cluster(down: str, tmp_path: Path) -> None:
    settings = settings_from_flat(
        {
            "bootstrap.servers": down,
            "remote.log.storage.backend": "local",
            "remote.log.storage.local.dir": str(tmp_path / "remote"),
            "remote.log.metadata.snapshot.dir": "",
        }
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(1.0, stop.set)
    # Spark is not needed before the cluster answers.
    code = await run_tiering(settings, None, once=False, console=report_console(), stop=stop)
    assert code == 0


async def test_the_loop_opens_again_when_the_cluster_goes_away_while_it_opens(
    down: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_from_flat(
        {
            "bootstrap.servers": down,
            "remote.log.storage.backend": "local",
            "remote.log.storage.local.dir": str(tmp_path / "remote"),
            "remote.log.metadata.snapshot.dir": "",
        }
    )
    stop = asyncio.Event()
    opened: list[bool] = []

    @contextlib.asynccontextmanager
    async def flaky_open(*_args: object, **_kwargs: object) -> AsyncIterator[None]:
        opened.append(True)
        if len(opened) == 1:
            raise BrokerConnectionError("cannot connect to kafka:9092")
        stop.set()  # the second attempt waits for the cluster until stopped
        await asyncio.Event().wait()
        yield

    monkeypatch.setattr(job, "open_pipeline", flaky_open)
    monkeypatch.setattr(job, "_ERROR_BACKOFF_SECONDS", 0.01)
    code = await run_tiering(settings, None, once=False, console=report_console(), stop=stop)
    assert code == 0
    assert len(opened) == 2
    assert "opening the pipeline failed: cannot connect to kafka:9092" in caplog.text
