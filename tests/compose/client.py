"""The stack check: run inside the compose stack by its ``integration`` service.

    python -m tests.compose.client check [--records N]     produce, wait-tiered, consume
    python -m tests.compose.client produce TOPIC --records N [--partitions P]
    python -m tests.compose.client wait-tiered TOPIC [--timeout-s S]
    python -m tests.compose.client consume TOPIC --records N [--client java|librdkafka]...
                                                           [--pause-at K [--fail-over]]

``KAFKA_BOOTSTRAP`` names the broker, ``TIERPROXY_BOOTSTRAP`` the proxy, or several proxies
(``proxy:19092,proxy-2:29092`` with the ``replicas`` profile). Clients do everything through
the proxies; only ``wait-tiered`` asks the broker itself, for the log start offsets that
show the tiered records have left it.

Records are numbered 0..N-1 (3,000 bytes each); number n goes to partition n % P, so
partition p holds p, p + P, p + 2P, ... at offsets 0, 1, 2, .... The topic's name matches the
example configuration's ``tiered-.*`` table (remote segments of 16 MiB) and it is created
with the broker topic config ``local.retention.bytes=1``, a key that table leaves to the
topic (the precedence of storage/tiering/policy.py). The default 12,000 records in 2
partitions are 18 MB per partition: a first remote segment closes by size at once, the
pipeline tiers it in its next cycle and, the partition being far above its local retention
size, moves the broker's log start past it in the same cycle (instead of after the table's
10 minutes of ``local.retention.ms``).

A consume reads every partition from offset 0 to the end offset the proxy reports, with
Kafka's Java consumer and librdkafka at once unless ``--client`` names one, and passes only
if each got every number exactly once, each at its own offset. ``--pause-at K``
(librdkafka) stops handing records over after K of them, waits until the proxy has gone away
and come back (the test restarts its container meanwhile), then reads on: the restart
happens with the consumer's connections and fetch positions in the middle of the topic.
With ``--fail-over`` (several proxies), the pause names the proxy the consumer reads
through (the one whose Fetch count grew), waits until it has gone away for good (the test
stops its container) and reads on through the others; the read then passes if every
number arrived at its own offset at least once (a fetch the stopped proxy had answered may
be read again), and only if each side of the fail-over served records from the remote
tier (``tierproxy_remote_fetch_bytes_total`` of the topic grew on the proxy read through
before the pause and on the others after it).
Exit status: 0 passed, 1 failed (the reason on stderr).
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from prometheus_client.parser import text_string_to_metric_families

from proxy.embedded.kafka_jars import distribution_from_home

KAFKA_HOME = Path("/opt/kafka")
VALUE_BYTES = 3_000
DEFAULT_RECORDS = 12_000
DEFAULT_PARTITIONS = 2
CLIENTS = ("java", "librdkafka")
CONSUME_TIMEOUT_S = 300.0
TIERED_TIMEOUT_S = 600.0
PROXY_CYCLE_TIMEOUT_S = 180.0
PROXY_METRICS_PORT = 9100
"""Where every proxy service of the stack serves ``/metrics`` inside the stack."""
FETCHES = "tierproxy_requests_total"
REMOTE_BYTES = "tierproxy_remote_fetch_bytes_total"
_PROBE_S = 0.1
_NUMBER = re.compile(rb"^(\d{9})\.")
_CONSOLE_LINE = re.compile(r"^Partition:(\d+)\s+Offset:(\d+)\s+(\d{9})\.")


class CheckFailed(Exception):
    """What the stack did wrong, in one sentence for the test's output."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Read:
    """One record as a consumer got it."""

    partition: int
    offset: int
    number: int


def _say(message: str) -> None:
    print(message, flush=True)


def _proxy() -> str:
    return os.environ["TIERPROXY_BOOTSTRAP"]


def _proxies() -> list[str]:
    """The proxies' addresses, ``host:port`` each, as ``TIERPROXY_BOOTSTRAP`` lists them."""
    return [address.strip() for address in _proxy().split(",") if address.strip()]


def _broker() -> str:
    return os.environ["KAFKA_BOOTSTRAP"]


def value(number: int) -> bytes:
    """Record ``number``'s value: the number, then padding to VALUE_BYTES."""
    head = f"{number:09d}.".encode()
    return head + b"x" * (VALUE_BYTES - len(head))


def produce(topic: str, *, records: int, partitions: int) -> None:
    """Create ``topic`` through the proxy and write records 0..records-1 to it, acks=all."""
    admin = AdminClient({"bootstrap.servers": _proxy()})
    new = NewTopic(topic, num_partitions=partitions, config={"local.retention.bytes": "1"})
    for future in admin.create_topics([new], operation_timeout=30).values():
        future.result(timeout=60)
    failures: list[str] = []

    def delivered(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer(
        {"bootstrap.servers": _proxy(), "acks": "all", "enable.idempotence": True, "linger.ms": 20}
    )
    for number in range(records):
        while True:
            try:
                producer.produce(
                    topic, value(number), partition=number % partitions, on_delivery=delivered
                )
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(120)
    if left or failures:
        raise CheckFailed(f"{left} records undelivered, {len(failures)} failed: {failures[:3]}")
    _say(f"produced {records} records to {topic} ({partitions} partitions) through the proxy")


def log_starts(topic: str, partitions: int) -> list[tuple[int, int]]:
    """(log start, end) of each partition, as the broker itself reports them."""
    consumer = Consumer({"bootstrap.servers": _broker(), "group.id": "compose-check-offsets"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def _partition_count(bootstrap: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(topic, timeout=30).topics[topic]
    if metadata.error is not None:
        raise CheckFailed(f"topic {topic}: {metadata.error}")
    return len(metadata.partitions)


def wait_tiered(topic: str, *, timeout_s: float) -> None:
    """Wait until the broker's log start of every partition has moved past offset 0."""
    partitions = _partition_count(_broker(), topic)
    deadline = time.monotonic() + timeout_s
    reported = 0.0
    while True:
        offsets = log_starts(topic, partitions)
        if all(start > 0 for start, _ in offsets):
            _say(f"tiered: the broker's log start offsets moved to {[s for s, _ in offsets]}")
            return
        if time.monotonic() > deadline:
            raise CheckFailed(
                f"the broker's log start offsets are still {offsets} (start, end) after "
                f"{timeout_s:.0f} s: the pipeline did not tier {topic} and free the broker"
            )
        if time.monotonic() - reported > 30:
            _say(f"waiting for the pipeline: (log start, end) per partition {offsets}")
            reported = time.monotonic()
        time.sleep(2)


def check_reads(
    reads: Sequence[Read],
    *,
    records: int,
    partitions: int,
    client: str,
    at_least_once: bool = False,
) -> None:
    """Every number 0..records-1 exactly once (``at_least_once``: once or more), partition
    p's numbers at offsets 0, 1, ..., and nothing else: the set of (partition, offset) read
    is exactly that of the topic.

    :raises CheckFailed: naming the first few numbers missing, repeated, unknown or
        misplaced.
    """
    counts = Counter(read.number for read in reads)
    repeated = sorted(n for n, count in counts.items() if count > 1)
    missing = sorted(set(range(records)) - counts.keys())
    unknown = sorted(counts.keys() - set(range(records)))
    misplaced = [
        r
        for r in reads
        if r.number % partitions != r.partition or r.number // partitions != r.offset
    ]
    problems = []
    if missing:
        problems.append(f"{len(missing)} records missing (first {missing[:5]})")
    if repeated and not at_least_once:
        problems.append(f"{len(repeated)} records read more than once (first {repeated[:5]})")
    if unknown:
        problems.append(f"{len(unknown)} records the check never wrote (first {unknown[:5]})")
    if misplaced:
        problems.append(f"{len(misplaced)} records at the wrong offset (first {misplaced[:3]})")
    if problems:
        raise CheckFailed(f"{client}: " + "; ".join(problems))
    how = f"at least once ({len(repeated)} again)" if at_least_once else "exactly once"
    _say(f"{client}: read {records} records from offset 0 through the proxy, each {how}")


def consume_librdkafka(
    topic: str, *, records: int, pause_at: int | None, at_pause: Callable[[int], None]
) -> list[Read]:
    """Read every partition from offset 0 to its end offset with librdkafka."""
    config = {
        "bootstrap.servers": _proxy(),
        "group.id": f"compose-check-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    }
    if pause_at is not None:
        # A small prefetch queue (1 MB a partition), so that most of the topic is still to be
        # fetched when the proxy restarts: librdkafka would otherwise fetch all of it while
        # the check pauses.
        config |= {"queued.min.messages": 100, "queued.max.messages.kbytes": 1024}
    consumer = Consumer(config)
    try:
        partitions = _partition_count(_proxy(), topic)
        ends = [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30, cached=False)[1]
            for p in range(partitions)
        ]
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        return _poll_until_ends(consumer, ends, pause_at=pause_at, at_pause=at_pause)
    finally:
        consumer.close()


def _poll_until_ends(
    consumer: Consumer,
    ends: Sequence[int],
    *,
    pause_at: int | None,
    at_pause: Callable[[int], None],
) -> list[Read]:
    reads: list[Read] = []
    positions = [0] * len(ends)
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    while any(position < end for position, end in zip(positions, ends, strict=True)):
        if time.monotonic() > deadline:
            raise CheckFailed(
                f"librdkafka: only at offsets {positions} of {list(ends)} after "
                f"{CONSUME_TIMEOUT_S:.0f} s"
            )
        message = consumer.poll(1.0)
        if message is None:
            continue
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                continue
            if error.fatal():
                raise CheckFailed(f"librdkafka: {error}")
            _say(f"librdkafka: {error} (retrying)")
            continue
        partition, offset = message.partition(), message.offset()
        match = _NUMBER.match(message.value() or b"")
        if match is None or partition is None or offset is None:
            raise CheckFailed(f"librdkafka: a record that is not the check's: {message.value()!r}")
        reads.append(Read(partition=partition, offset=offset, number=int(match[1])))
        positions[partition] = offset + 1
        if pause_at is not None and len(reads) == pause_at:
            at_pause(pause_at)
    return reads


def consume_java(topic: str, *, records: int) -> list[Read]:
    """Read the topic with Kafka's console consumer (the Java KafkaConsumer) in a new group.

    The group starts at the earliest offset the proxy reports, 0 on every partition; the
    consumer stops after ``records`` records (or 60 s without one), so a record read twice
    shows as another one missing.
    """
    kafka = distribution_from_home(KAFKA_HOME)
    argv = kafka.java(
        kafka.console_consumer,
        "--bootstrap-server",
        _proxy(),
        "--topic",
        topic,
        "--group",
        f"compose-check-{uuid.uuid4()}",
        "--from-beginning",
        "--max-messages",
        str(records),
        "--timeout-ms",
        "60000",
        "--property",
        "print.partition=true",
        "--property",
        "print.offset=true",
    )
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=CONSUME_TIMEOUT_S, check=False
    )
    reads = [
        Read(partition=int(m[1]), offset=int(m[2]), number=int(m[3]))
        for m in map(_CONSOLE_LINE.match, result.stdout.splitlines())
        if m is not None
    ]
    if result.returncode != 0:
        raise CheckFailed(
            f"java: the console consumer exited {result.returncode}: {result.stderr[-2000:]}"
        )
    return reads


def wait_for_proxy_restart(pause_at: int) -> None:
    """Return once the proxy has stopped answering and then answers again."""
    _say(f"librdkafka: paused after {pause_at} records; waiting for the proxy to restart")
    _wait_for(_proxy(), answering=False, what="go away")
    _wait_for(_proxy(), answering=True, what="come back")
    _say("librdkafka: the proxy is back; reading on")


def _wait_for(address: str, *, answering: bool, what: str) -> None:
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + PROXY_CYCLE_TIMEOUT_S
    while _answers(host, int(port)) != answering:
        if time.monotonic() > deadline:
            raise CheckFailed(f"{address} did not {what} within {PROXY_CYCLE_TIMEOUT_S:.0f} s")
        time.sleep(_PROBE_S)


def _answers(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1.0).close()
    except OSError:
        return False
    return True


def metric_total(exposition: str, name: str, labels: Mapping[str, str]) -> float:
    """Sum of the samples ``name`` of a Prometheus text exposition that carry ``labels``."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


def proxy_metric(address: str, name: str, **labels: str) -> float:
    """``name`` with ``labels`` (summed) on the ``/metrics`` of the proxy at ``address``."""
    host = address.rpartition(":")[0]
    url = f"http://{host}:{PROXY_METRICS_PORT}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return metric_total(answer.read().decode(), name, labels)
    except OSError as err:
        raise CheckFailed(f"{url} did not answer: {err}") from err


class FailOver:
    """The ``--fail-over`` side of a paused read (see the module's docstring): which proxy
    the consumer reads through, the wait for it to stop, and what each side served from the
    remote tier. Made before the consumer starts, which is the only client of the proxies
    meanwhile."""

    def __init__(self, topic: str) -> None:
        self._topic = topic
        self._proxies = _proxies()
        if len(self._proxies) < 2:
            raise CheckFailed(f"--fail-over needs several proxies, not {self._proxies}")
        self._fetches = self._each(self._proxies, FETCHES, api="fetch")
        self._remote_at_start = self._remote(self._proxies)
        self._remote_at_pause: dict[str, float] = {}
        self._through: str | None = None

    def _each(self, addresses: Sequence[str], name: str, **labels: str) -> dict[str, float]:
        return {address: proxy_metric(address, name, **labels) for address in addresses}

    def _remote(self, addresses: Sequence[str]) -> dict[str, float]:
        return self._each(addresses, REMOTE_BYTES, topic=self._topic)

    def at_pause(self, pause_at: int) -> None:
        """Name the proxy read through (its Fetch count grew most) and wait until it is gone.

        :raises CheckFailed: it did not go away in time, or a proxy's metrics did not answer.
        """
        fetches = self._each(self._proxies, FETCHES, api="fetch")
        through = max(self._proxies, key=lambda address: fetches[address] - self._fetches[address])
        self._through = through
        self._remote_at_pause = self._remote(self._proxies)
        _say(
            f"librdkafka: paused after {pause_at} records read through {through}; "
            "waiting for it to stop"
        )
        _wait_for(through, answering=False, what="go away")
        others = ", ".join(address for address in self._proxies if address != through)
        _say(f"librdkafka: {through} is gone; reading on through {others}")

    def finish(self) -> None:
        """Say what each side of the fail-over served from the remote tier.

        :raises CheckFailed: the read never paused, or a side served nothing from it.
        """
        through = self._through
        if through is None:
            raise CheckFailed("librdkafka: the read ended before its pause")
        others = [address for address in self._proxies if address != through]
        before = self._remote_at_pause[through] - self._remote_at_start[through]
        now = self._remote(others)
        after = sum(now[address] - self._remote_at_pause[address] for address in others)
        said = (
            f"{through} served {before:.0f} bytes from the remote tier before the pause, "
            f"{', '.join(others)} {after:.0f} after it"
        )
        if before <= 0 or after <= 0:
            raise CheckFailed(f"librdkafka: {said}: each side of the fail-over must serve some")
        _say(f"librdkafka: failed over from {through} to {', '.join(others)}; {said}")


def consume(
    topic: str,
    *,
    records: int,
    clients: Sequence[str],
    pause_at: int | None,
    fail_over: bool = False,
) -> None:
    """Read the topic with each of ``clients`` at once, and check what each got.

    :raises CheckFailed: for the first client that failed or read wrongly.
    """
    if pause_at is not None and list(clients) != ["librdkafka"]:
        raise CheckFailed("--pause-at is for one librdkafka consumer alone")
    if fail_over and pause_at is None:
        raise CheckFailed("--fail-over happens at the pause: give --pause-at")
    if pause_at is not None and not fail_over and len(_proxies()) != 1:
        raise CheckFailed("a restart during a paused read is of one proxy: add --fail-over")
    partitions = _partition_count(_proxy(), topic)
    if fail_over:
        failover = FailOver(topic)
        reads = consume_librdkafka(
            topic, records=records, pause_at=pause_at, at_pause=failover.at_pause
        )
        failover.finish()
        check_reads(
            reads, records=records, partitions=partitions, client="librdkafka", at_least_once=True
        )
        return
    with ThreadPoolExecutor(max_workers=len(clients)) as pool:
        futures = {
            client: pool.submit(_read_with, client, topic, records=records, pause_at=pause_at)
            for client in clients
        }
        for client, future in futures.items():
            check_reads(future.result(), records=records, partitions=partitions, client=client)


def _read_with(client: str, topic: str, *, records: int, pause_at: int | None) -> list[Read]:
    if client == "java":
        return consume_java(topic, records=records)
    return consume_librdkafka(
        topic, records=records, pause_at=pause_at, at_pause=wait_for_proxy_restart
    )


def check(records: int) -> None:
    topic = f"tiered-compose-{uuid.uuid4().hex[:8]}"
    produce(topic, records=records, partitions=DEFAULT_PARTITIONS)
    wait_tiered(topic, timeout_s=TIERED_TIMEOUT_S)
    consume(topic, records=records, clients=CLIENTS, pause_at=None)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.compose.client", description=__doc__.split("\n\n", 1)[0]
    )
    steps = parser.add_subparsers(dest="step", required=True)
    everything = steps.add_parser("check", help="produce, wait until tiered, consume twice")
    everything.add_argument("--records", type=int, default=DEFAULT_RECORDS)
    write = steps.add_parser("produce", help="create a topic and write numbered records")
    write.add_argument("topic")
    write.add_argument("--records", type=int, default=DEFAULT_RECORDS)
    write.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    wait = steps.add_parser("wait-tiered", help="wait until the broker's log start moves")
    wait.add_argument("topic")
    wait.add_argument("--timeout-s", type=float, default=TIERED_TIMEOUT_S)
    read = steps.add_parser("consume", help="read everything from offset 0 through the proxy")
    read.add_argument("topic")
    read.add_argument("--records", type=int, required=True)
    read.add_argument(
        "--client",
        dest="clients",
        action="append",
        choices=CLIENTS,
        help="a consumer to read with (again for several, which read at once; default both)",
    )
    read.add_argument("--pause-at", type=int, default=None)
    read.add_argument(
        "--fail-over",
        action="store_true",
        help="at the pause, wait for the proxy read through to stop and read on through the "
        "others (TIERPROXY_BOOTSTRAP lists several): each record at least once",
    )
    return parser


def main(argv: Iterable[str] | None = None) -> int:
    args = _parser().parse_args(None if argv is None else list(argv))
    try:
        if args.step == "check":
            check(args.records)
        elif args.step == "produce":
            produce(args.topic, records=args.records, partitions=args.partitions)
        elif args.step == "wait-tiered":
            wait_tiered(args.topic, timeout_s=args.timeout_s)
        else:
            clients = args.clients or list(CLIENTS)
            consume(
                args.topic,
                records=args.records,
                clients=clients,
                pause_at=args.pause_at,
                fail_over=args.fail_over,
            )
    except (CheckFailed, KafkaException) as err:
        print(f"FAILED: {err}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
