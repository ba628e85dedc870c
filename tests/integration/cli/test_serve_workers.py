"""``tierproxy serve --workers 2`` against Apache Kafka: two worker processes share the
listener, one endpoint answers for both, a worker that dies is restarted, SIGTERM drains
both.

- the kernel spreads client connections over both workers (``SO_REUSEPORT``), which both
  serve: every record produced through the proxy is read back through it;
- ``/metrics`` sums counters and histograms across workers and keeps each worker's gauges
  under a ``worker`` label; ``/readyz`` and ``/livez`` give each worker's verdict;
- a SIGKILLed worker is logged (``worker.exited``) and restarted (``worker.restarted``), and
  the proxy serves on meanwhile;
- SIGTERM: every worker drains and the supervisor exits 0;
- a listener port held by another process exits 2 with one line, as a single ``serve`` does.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.embedded import BrokerInfo
from proxy.embedded.ports import LOOPBACK, free_port
from proxy.embedded.probe import api_versions
from proxy.embedded.tierproxy import TierproxyServer, write_config
from tests.conditions import wait_until

pytestmark = [pytest.mark.integration]

RECORDS = 2000


def worker_pids(proxy: TierproxyServer) -> set[int]:
    """The supervisor's children (its workers)."""
    pid = proxy.process.pid
    assert pid is not None
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text(encoding="ascii")
    return {int(child) for child in children.split()}


def ready(proxy: TierproxyServer) -> bool:
    try:
        return proxy.health("/readyz")[0] == 200
    except OSError:
        return False


def gauge_by_worker(proxy: TierproxyServer, name: str) -> dict[str, float]:
    return {worker: proxy.metric(name, worker=worker) for worker in ("0", "1")}


@pytest.fixture
def workers(broker: BrokerInfo, tmp_path: Path) -> Iterator[TierproxyServer]:
    proxy = TierproxyServer(
        config=write_config(
            tmp_path / "proxy.toml",
            {"health.check.interval.ms": 500, "shutdown.timeout.ms": 2000},
        ),
        log_path=tmp_path / "proxy.log",
        bootstrap=broker.bootstrap,
        workers=2,
    )
    proxy.start()
    try:
        wait_until(lambda: ready(proxy), timeout_s=90, what="both workers ready")
        yield proxy
    finally:
        proxy.stop()


def produce_and_read(bootstrap: str, topic: str) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(RECORDS):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(60) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"workers-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": 0,
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 120
        while len(values) < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value() or b"")
    finally:
        consumer.close()
    return values


def test_two_workers_share_the_listener_and_one_endpoint(
    workers: TierproxyServer, broker: BrokerInfo
) -> None:
    status, readiness = workers.health("/readyz")
    assert status == 200 and set(readiness["workers"]) == {"0", "1"}, readiness
    assert all(w["checks"]["listeners"]["ok"] for w in readiness["workers"].values())
    status, liveness = workers.health("/livez")
    assert status == 200 and set(liveness["workers"]) == {"0", "1"}, liveness
    # 16 connections: the chance that the kernel's hash gives all of them one worker is 2^-15.
    held = []
    try:
        for _ in range(16):
            sock = socket.create_connection((workers.host, workers.port), timeout=10)
            held.append(sock)
        wait_until(
            lambda: sum(gauge_by_worker(workers, "tierproxy_connections_active").values()) >= 16,
            timeout_s=30,
            what="16 connections counted",
        )
        by_worker = gauge_by_worker(workers, "tierproxy_connections_active")
        assert all(count > 0 for count in by_worker.values()), by_worker
    finally:
        for sock in held:
            sock.close()
    assert workers.metric("tierproxy_workers_running") == 2
    assert workers.metric("tierproxy_connections_total") >= 16  # summed over both workers
    topic = f"workers-{uuid.uuid4().hex[:8]}"
    assert produce_and_read(workers.bootstrap, topic) == [b"%d" % i for i in range(RECORDS)]


def test_a_dead_worker_is_restarted_and_sigterm_drains_both(
    workers: TierproxyServer, broker: BrokerInfo
) -> None:
    before = worker_pids(workers)
    assert len(before) == 2
    victim = min(before)
    subprocess.run(["kill", "-KILL", str(victim)], check=True)
    wait_until(
        lambda: len(worker_pids(workers) - before) == 1 and ready(workers),
        timeout_s=90,
        what="the dead worker restarted and ready",
    )
    log = workers.process.log_path.read_text(encoding="utf-8")
    assert "event=worker.exited" in log and f"pid={victim} signal=SIGKILL" in log
    assert "event=worker.restarted" in log
    assert workers.metric("tierproxy_worker_restarts_total") == 1
    topic = f"workers-{uuid.uuid4().hex[:8]}"
    assert produce_and_read(workers.bootstrap, topic) == [b"%d" % i for i in range(RECORDS)]
    workers.stop()
    log = workers.process.log_path.read_text(encoding="utf-8")
    assert log.count("event=proxy.stopped") >= 2, log[-3000:]
    assert "event=workers.stopped outcome=0" in log
    assert "worker.killed" not in log
    with pytest.raises(OSError):
        api_versions(LOOPBACK, workers.port)


def test_a_taken_listener_port_exits_2_with_several_workers(broker: BrokerInfo) -> None:
    with socket.create_server((LOOPBACK, 0)) as holder:
        port = int(holder.getsockname()[1])
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "proxy.cli",
                "serve",
                "--bootstrap",
                broker.bootstrap,
                "--listen",
                f"{LOOPBACK}:{port}",
                "--metrics-port",
                str(free_port()),
                "--workers",
                "2",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"tierproxy serve: cannot listen on {LOOPBACK}:{port}"), line
