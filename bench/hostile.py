"""Hostile input, measured: tens of thousands of malformed frames at the proxy while real
consumers read tiered data through it.

Question: does a flood of bad input (random bytes, truncated frames, absurd lengths, known
APIs with garbage bodies, unknown versions, slowloris connections, connections reset in the
middle of a response; see :mod:`bench.hostile_attacks`) take the proxy down, hurt the other
connections, lose or duplicate records, grow its memory without bound, or flood its log?

Run (loopback only; bounded by ``--frames`` and ``--seconds``)::

    .venv/bin/python -m bench.hostile --frames 30000 --seconds 120
    .venv/bin/python -m bench.hostile --frames 3000 --seconds 30 --data-mib 8   # a quick look

Set-up: Apache Kafka (embedded, or ``KAFKA_HOME``/``KAFKA_BOOTSTRAP``) and SeaweedFS; one
partition of ``--data-mib`` MiB of 1 KiB records, tiered by the real pipeline (Spark
local[2]) with ``local.retention.ms`` 1, so the broker really deletes the tiered range and
only the proxy's remote tier can serve it; then ``tierproxy serve`` (INFO logs, a
``request.receive.timeout.ms`` of 3 s so slowloris connections are cut within the run).

Method: after a warm-up read, rounds alternate as BENCHMARKING.md asks (quiet, attack /
attack, quiet, ... ``--pairs`` pairs). In every round ``--consumers`` confluent-kafka
consumers read the whole partition from offset 0 through the proxy, again and again: for
``--seconds / --pairs`` in a quiet round, and while ``bench.hostile_attacks.attack`` sends
its share of ``--frames`` (in at most that time) in an attack round; consumer MiB/s is the
round's bytes over its duration. Checked: every read got every offset exactly once with
the right key, the proxy process is still
running, every attack connection was closed by the proxy, and its active connections fall
back to zero. Reported: the proxy's RSS before, peak (sampled every 0.2 s) and after, its
CPU seconds, frames per category, bad connections per reason (the Prometheus counter), the
log lines that reached the log versus those suppressed, and consumer MiB/s with and without
the attack. Results: ``bench/results/hostile.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import confluent_kafka

from bench.clients import Endpoint, fetch_request, topic_id_and_end
from bench.common import (
    MIB,
    alternate_async,
    bar_chart,
    cpu_seconds,
    git_state,
    median,
    rss_bytes,
    save_json,
)
from bench.hostile_attacks import CATEGORIES, Tally, Target, attack
from bench.pipeline import Target as TierTarget
from bench.tiering import produce_and_tier, servers_from_env
from protocol.frames import DEFAULT_MAX_FRAME_BYTES, encode_frame
from protocol.headers import encode_request_header
from protocol.messages import ApiKey, encode_request
from proxy.embedded import (
    BrokerInfo,
    S3Info,
    create_bucket,
    delete_bucket,
)
from proxy.embedded.tierproxy import TierproxyServer, proxy_process, storage_settings

_PARTITION_EOF = confluent_kafka.KafkaError._PARTITION_EOF
SEGMENT_BYTES = 2 * MIB
RECEIVE_TIMEOUT_MS = 3000
RSS_SAMPLE_S = 0.2
CONSUMER_TIMEOUT_S = 300.0
DRAIN_TIMEOUT_S = 30.0
# The proxy logs what it suppressed every 10 s (proxy.bad_connections); wait for that line.
SUPPRESSED_FLUSH_S = 12.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Setup:
    topic: str
    topic_id: uuid.UUID
    high_watermark: int
    broker_log_start: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerRun:
    records: int
    duplicates: int
    missing: int
    wrong_keys: int
    mib: float
    seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Round:
    attacked: bool
    mib_per_s: float
    seconds: float
    consumers: tuple[ConsumerRun, ...]
    frames: int


# -- set-up --------------------------------------------------------------------------------


async def prepare(
    args: argparse.Namespace, broker: BrokerInfo, s3: S3Info, bucket: str, spill: Path
) -> Setup:
    """One partition produced, tiered and deleted by the broker below the tiered end."""
    topic = f"bench-hostile-{uuid.uuid4().hex[:8]}"
    deleted_once_tiered: dict[str, Any] = {"local.retention.ms": 1, "retention.ms": -1}
    report = await produce_and_tier(
        broker,
        TierTarget(backend="s3", s3=s3, bucket=bucket),
        topic=topic,
        spill=spill,
        data_mib=args.data_mib,
        segment_bytes=SEGMENT_BYTES,
        **deleted_once_tiered,
    )
    if not report.segments_copied:
        raise RuntimeError("nothing was tiered")
    direct = Endpoint(name="direct", host=broker.host, port=broker.port)
    # (topic_id_and_end's high watermark comes from a Fetch at offset 0: -1 once deleted)
    topic_id, _ = await topic_id_and_end(direct, topic)
    log_start, high_watermark = watermarks(broker.bootstrap, topic)
    if log_start == 0:
        raise RuntimeError("the broker kept the tiered range: nothing would be read remotely")
    print(
        f"tiered {report.segments_copied} segments; the broker's log starts at {log_start} "
        f"of {high_watermark}"
    )
    return Setup(
        topic=topic, topic_id=topic_id, high_watermark=high_watermark, broker_log_start=log_start
    )


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "hostile"})
    try:
        low, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), 30)
    finally:
        consumer.close()
    return int(low), int(high)


@contextlib.contextmanager
def running_proxy(
    broker: BrokerInfo, s3: S3Info, bucket: str, topic: str, log_dir: Path
) -> Iterator[TierproxyServer]:
    proxy = proxy_process(
        broker,
        log_dir,
        {
            **storage_settings(s3, bucket, f"__rlm-{topic}"),
            "log.level": "INFO",
            "request.receive.timeout.ms": RECEIVE_TIMEOUT_MS,
        },
    )
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


def fetch_frame(topic: str, topic_id: uuid.UUID) -> bytes:
    """A Fetch v12 of partition 0 from offset 0 (the tiered range), as a client sends it."""
    body = fetch_request(12, topic, topic_id, 0, MIB)
    return encode_frame(
        encode_request_header(ApiKey.FETCH, 12, 1, "hostile") + encode_request(body)
    )


# -- consumers -----------------------------------------------------------------------------


def consume_all(bootstrap: str, topic: str, end: int) -> ConsumerRun:
    """Every record of partition 0 below ``end`` through ``bootstrap``, checked offset by
    offset (``bench.passthrough.preload`` keys record i with ``%08d``)."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"hostile-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "fetch.error.backoff.ms": 100,
        }
    )
    seen: Counter[int] = Counter()
    wrong_keys = 0
    size = 0
    started = time.perf_counter()
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        deadline = time.monotonic() + CONSUMER_TIMEOUT_S
        while len(seen) < end and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                error = message.error()
                if error is not None:
                    if not (error.retriable() or error.code() == _PARTITION_EOF):
                        raise RuntimeError(f"consumer error: {error}")
                    continue
                offset = message.offset()
                assert offset is not None
                seen[offset] += 1
                wrong_keys += message.key() != b"%08d" % offset
                size += len(message.value() or b"")
    finally:
        consumer.close()
    return ConsumerRun(
        records=sum(seen.values()),
        duplicates=sum(count - 1 for count in seen.values()),
        missing=sum(1 for offset in range(end) if offset not in seen),
        wrong_keys=wrong_keys,
        mib=size / MIB,
        seconds=time.perf_counter() - started,
    )


# -- rounds --------------------------------------------------------------------------------


class RssSampler:
    """The proxy's RSS every :data:`RSS_SAMPLE_S` while running; keeps the peak."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_bytes(pid)
        self._task: asyncio.Task[None] | None = None

    async def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, rss_bytes(self.pid))
            await asyncio.sleep(RSS_SAMPLE_S)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._sample())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def read_until(stop: threading.Event, bootstrap: str, setup: Setup) -> list[ConsumerRun]:
    """Whole reads of the partition, back to back, until ``stop`` is set (at least one)."""
    runs: list[ConsumerRun] = []
    while not runs or not stop.is_set():
        runs.append(consume_all(bootstrap, setup.topic, setup.high_watermark))
    return runs


def consumer_round(
    args: argparse.Namespace, proxy: TierproxyServer, setup: Setup, target: Target, tally: Tally
) -> Callable[[bool], Awaitable[Round]]:
    """A round of ``args.consumers`` consumers reading the partition again and again, for
    the round's time (quiet) or while the attack runs."""
    frames_per_round = args.frames // args.pairs
    seconds_per_round = args.seconds / args.pairs

    async def measure(attacked: bool) -> Round:
        stop = threading.Event()
        started = time.perf_counter()
        reads = asyncio.gather(
            *(
                asyncio.to_thread(read_until, stop, proxy.bootstrap, setup)
                for _ in range(args.consumers)
            )
        )
        sent = Tally()
        try:
            if attacked:
                sent = await attack(
                    target,
                    frames=frames_per_round,
                    seconds=seconds_per_round,
                    attackers=args.attackers,
                    slowloris_connections=args.slowloris,
                    slowloris_patience_s=RECEIVE_TIMEOUT_MS / 1000 * 4,
                    seed=int(started),
                )
                tally.add(sent)
            else:
                await asyncio.sleep(seconds_per_round)
        finally:
            stop.set()
        runs = tuple(run for consumer in await reads for run in consumer)
        seconds = time.perf_counter() - started
        mib = sum(run.mib for run in runs)
        print(
            f"{'attack' if attacked else 'quiet ':6s} round: {len(runs)} reads, {mib:.0f} MiB in "
            f"{seconds:.1f} s, {sum(sent.frames.values())} bad frames"
        )
        return Round(
            attacked=attacked,
            mib_per_s=mib / seconds,
            seconds=seconds,
            consumers=runs,
            frames=sum(sent.frames.values()),
        )

    return measure


# -- what the proxy says -------------------------------------------------------------------

_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def log_lines(path: Path) -> dict[str, Any]:
    """Counts of the proxy's log lines: connection.closed by ``bad`` reason (``-`` for a
    normal close), the suppressed-lines reports and what they counted, everything else."""
    closed: Counter[str] = Counter()
    other: Counter[str] = Counter()
    reports = suppressed = total = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        fields = {key: value.strip('"') for key, value in _FIELD.findall(line)}
        name = fields.get("event")
        if name is None:
            continue
        total += 1
        if name == "connection.closed":
            closed[fields.get("bad", "-")] += 1
        elif name == "connection.bad.suppressed":
            reports += 1
            suppressed += int(fields.get("suppressed", 0))
        else:
            other[name] += 1
    return {
        "lines": total,
        "connection_closed_by_bad_reason": dict(closed),
        "bad_lines_logged": sum(count for reason, count in closed.items() if reason != "-"),
        "suppressed_reports": reports,
        "suppressed_lines": suppressed,
        "other_events": dict(other),
    }


def metric_samples(proxy: TierproxyServer, name: str) -> dict[str, float]:
    """Every series of ``name`` on the proxy's /metrics, by its label values."""
    url = f"http://{proxy.host}:{proxy.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith((f"{name}{{", f"{name} ")):
            series, value = line.rsplit(" ", 1)
            samples[series.removeprefix(name)] = float(value)
    return samples


async def wait_for_no_connections(proxy: TierproxyServer) -> float:
    """Seconds until the proxy has no client connection left (or the timeout)."""
    started = time.perf_counter()
    while time.perf_counter() - started < DRAIN_TIMEOUT_S:
        if proxy.metric("tierproxy_connections_active") == 0:
            break
        await asyncio.sleep(0.2)
    return time.perf_counter() - started


# -- run -----------------------------------------------------------------------------------


def check(runs: list[ConsumerRun], setup: Setup) -> dict[str, Any]:
    """Whether every read got every record exactly once."""
    return {
        "consumer_reads": len(runs),
        "every_record_exactly_once": all(
            run.records == setup.high_watermark and not (run.duplicates or run.missing)
            for run in runs
        ),
        "duplicates": sum(run.duplicates for run in runs),
        "missing": sum(run.missing for run in runs),
        "wrong_keys": sum(run.wrong_keys for run in runs),
    }


async def measure(
    args: argparse.Namespace, proxy: TierproxyServer, setup: Setup, log_path: Path
) -> dict[str, Any]:
    pid = proxy.process.pid
    assert pid is not None
    target = Target(
        host=proxy.host,
        port=proxy.port,
        max_request_bytes=DEFAULT_MAX_FRAME_BYTES,
        fetch_frame=fetch_frame(setup.topic, setup.topic_id),
    )
    tally = Tally()
    rounds_of = consumer_round(args, proxy, setup, target, tally)
    warm_up = await asyncio.to_thread(
        consume_all, proxy.bootstrap, setup.topic, setup.high_watermark
    )
    rss_before, cpu_before = rss_bytes(pid), cpu_seconds(pid)
    sampler = RssSampler(pid)
    sampler.start()
    try:
        pairs = await alternate_async(args.pairs, lambda: rounds_of(False), lambda: rounds_of(True))
        rss_peak_during = sampler.peak
        drained_s = await wait_for_no_connections(proxy)
        await asyncio.sleep(SUPPRESSED_FLUSH_S)
    finally:
        await sampler.stop()
    alive = proxy.process.running
    rss_after, cpu_used = rss_bytes(pid), cpu_seconds(pid) - cpu_before
    bad = metric_samples(proxy, "tierproxy_bad_connections_total")
    result = {
        "proxy_alive": alive,
        "consumers": check(
            [warm_up, *(run for p in pairs for r in (p.a, p.b) for run in r.consumers)], setup
        ),
        "rss_mib": {
            "before": rss_before / MIB,
            "peak_during": rss_peak_during / MIB,
            "after": rss_after / MIB,
        },
        "proxy_cpu_s": cpu_used,
        "attack": tally.as_dict(),
        "connections_active_after": proxy.metric("tierproxy_connections_active"),
        "seconds_until_no_connections": drained_s,
        "bad_connections_metric": bad,
        "bad_connections_metric_total": sum(bad.values()),
        "log": log_lines(log_path),
        "throughput": {
            "quiet_mib_per_s": median([p.a.mib_per_s for p in pairs]),
            "attack_mib_per_s": median([p.b.mib_per_s for p in pairs]),
            "ratio_attack_to_quiet": median([p.b.mib_per_s / p.a.mib_per_s for p in pairs]),
        },
        "rounds": [asdict(pair) for pair in pairs],
    }
    return result


async def run(args: argparse.Namespace, broker: BrokerInfo, s3: S3Info) -> dict[str, Any]:
    measured_code = git_state()  # before anything runs: the code these figures belong to
    bucket = f"bench-hostile-{uuid.uuid4().hex[:8]}"
    create_bucket(s3, bucket)
    work = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    try:
        setup = await prepare(args, broker, s3, bucket, work / "spill")
        with running_proxy(broker, s3, bucket, setup.topic, work) as proxy:
            log_path = work / f"tierproxy-{proxy.port}.log"
            measured = await measure(args, proxy, setup, log_path)
        return {
            **measured_code,
            "broker": broker.version,
            "s3": s3.kind,
            "data_mib": args.data_mib,
            "records": setup.high_watermark,
            "broker_log_start": setup.broker_log_start,
            "frames_asked": args.frames,
            "seconds_asked": args.seconds,
            "pairs": args.pairs,
            "consumers_per_round": args.consumers,
            "attackers": args.attackers,
            "slowloris_connections": args.slowloris,
            "request_receive_timeout_ms": RECEIVE_TIMEOUT_MS,
            "cpu_count": os.cpu_count(),
            "note": "indicative: a shared two-core machine",
            **measured,
        }
    finally:
        delete_bucket(s3, bucket)


def plot(result: dict[str, Any]) -> Path:
    rss = result["rss_mib"]
    frames = result["attack"]["frames"]
    log = result["log"]
    return bar_chart(
        "hostile",
        [
            ("proxy RSS", "MiB", {name: {"RSS": value} for name, value in rss.items()}),
            (
                "consumer throughput through the proxy",
                "MiB/s",
                {
                    "quiet": {"median": result["throughput"]["quiet_mib_per_s"]},
                    "under attack": {"median": result["throughput"]["attack_mib_per_s"]},
                },
            ),
            (
                "malformed frames sent",
                "frames",
                {category: {"sent": frames.get(category, 0)} for category in CATEGORIES},
            ),
            (
                "bad connections vs log lines",
                "count",
                {
                    "closed (metric)": {"count": result["bad_connections_metric_total"]},
                    "lines logged": {"count": log["bad_lines_logged"]},
                    "lines suppressed": {"count": log["suppressed_lines"]},
                },
            ),
        ],
        title=f"hostile input vs tierproxy ({result['broker']}; "
        f"{result['attack']['frames_total']} bad frames; indicative)",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=30_000, help="malformed frames in all")
    parser.add_argument("--seconds", type=float, default=120.0, help="attack time in all")
    parser.add_argument("--data-mib", type=int, default=32, help="tiered data (1 partition)")
    parser.add_argument("--pairs", type=int, default=2, help="quiet/attack round pairs")
    parser.add_argument("--consumers", type=int, default=2, help="consumers per round")
    parser.add_argument("--attackers", type=int, default=16, help="concurrent attack connections")
    parser.add_argument("--slowloris", type=int, default=16, help="slowloris connections held")
    args = parser.parse_args()
    with servers_from_env() as servers:
        assert servers.s3 is not None
        result = asyncio.run(run(args, servers.broker, servers.s3))
    print(
        f"proxy alive: {result['proxy_alive']}; every record exactly once: "
        f"{result['consumers']['every_record_exactly_once']}; RSS MiB {result['rss_mib']}; "
        f"throughput {result['throughput']}"
    )
    print(f"saved {save_json('hostile', result)} and {plot(result)}")


if __name__ == "__main__":
    main()
