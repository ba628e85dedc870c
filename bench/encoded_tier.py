"""What compression and encryption at rest cost: the pipeline's CPU, catch-up reads through the
proxy, and object-storage GETs per GiB on every backend.

Run::

    .venv/bin/python -m bench.encoded_tier                     # 256 MiB, 3 pairs, every backend
    .venv/bin/python -m bench.encoded_tier --data-mib 512 --pairs 5
    .venv/bin/python -m bench.encoded_tier --backends local s3   # fewer backends for the GETs

Set-up: one partition of ``--data-mib`` MiB of 1 KiB records (``bench.clients.preload``: one
random 1 KiB value repeated, uncompressed batches, so zstd shrinks it several hundred times;
real data compresses less, and data that does not compress is stored as is after its first
chunk), the broker's segments and the pipeline's 8 MiB. Servers as in the tests: embedded
Apache Kafka, and SeaweedFS, fake-gcs-server and Azurite for the GETs rows.

1. **Pipeline** (``pipeline``): rounds alternate one cycle per mode, each copying the whole
   topic to a fresh local directory: as is (``plain``), encrypted, and compressed and
   encrypted (``both``). CPU seconds per GiB of the pipeline's process tree (driver, Spark JVM,
   Python workers; ``bench.pipeline.CpuMeter``), medians over ``--pairs`` rounds, and each
   mode's ratio to ``plain`` in the same round. Goal: ``both`` ≤ 1.5 x plain.
2. **Catch-up** (``catchup``): the topic tiered once per mode into a local directory, one
   proxy per mode (offload on, the default 4 MiB chunks and stored chunks, a chunk cache
   smaller than the data so every round reads the tier); one raw Fetch loop (Fetch v12,
   8 MiB fetches) reads the tiered range, alternating plain and encoded proxies (A B / B A,
   ``--pairs`` pairs, each proxy warmed first). MiB/s and the proxy's CPU per GiB; ratio
   encoded / plain. Goal: both ≥ 0.8 x plain.
3. **GETs per GiB** (``gets``): per backend (``--backends``), the topic tiered in ``both`` mode
   and read twice through a proxy after a warm-up read: object-storage GETs (chunk GETs,
   index misses and manifest GETs, from the proxy's metrics) per GiB read. Goal: ≤ 300.

Results: ``bench/results/encoded_tier.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.catchup import GET_METRICS, Pids, catchup_round, gets, tiered_setup, warm_up
from bench.clients import RECORD_BYTES, Endpoint, preload, raw_fetch_all
from bench.common import GIB, MIB, alternate_async, median, save_json, throughput_summary
from bench.pipeline import CpuMeter
from bench.tail import Setup
from proxy.embedded import BrokerInfo, SeaweedFS, broker_from_env, create_bucket, create_topic
from proxy.embedded.object_stores import Azurite, FakeGcs
from proxy.embedded.tierproxy import TierproxyServer, proxy_process
from storage.tiering.job import build_spark, open_pipeline, settings_from_flat

SEGMENT_BYTES = 8 * MIB
MODES = ("plain", "encrypted", "both")
BACKENDS = ("local", "s3", "gcs", "azure")
GOAL_CPU_RATIO = 1.5
GOAL_CATCHUP_RATIO = 0.8
GOAL_GETS_PER_GIB = 300.0
_GET_METRICS = (*GET_METRICS, "tierproxy_remote_storage_manifest_gets_total")


def mode_settings(mode: str, keys: Path) -> dict[str, Any]:
    return {
        "remote.log.storage.compression.enable": mode == "both",
        "remote.log.storage.encryption.enable": mode in ("encrypted", "both"),
        "remote.log.storage.encryption.key.id": "bench",
        "remote.log.storage.encryption.keys.file": str(keys),
    }


class Stores:
    """The object stores of the GETs rows, each started on first use."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._seaweed: SeaweedFS | None = None
        self._gcs: FakeGcs | None = None
        self._azure: Azurite | None = None

    def settings(self, backend: str, scratch: Path) -> dict[str, Any]:
        name = f"bench-{uuid.uuid4().hex[:10]}"
        if backend == "local":
            return {
                "remote.log.storage.backend": "local",
                "remote.log.storage.local.dir": str(scratch / name),
            }
        if backend == "s3":
            if self._seaweed is None:
                self._seaweed = self._stack.enter_context(SeaweedFS())
                self._seaweed.start()
            s3 = self._seaweed.info
            create_bucket(s3, name)
            return {
                "remote.log.storage.backend": "s3",
                "remote.log.storage.s3.bucket": name,
                "remote.log.storage.s3.endpoint": s3.endpoint_url,
                "remote.log.storage.s3.region": s3.region,
                "remote.log.storage.s3.access.key.id": s3.access_key,
                "remote.log.storage.s3.secret.access.key": s3.secret_key,
                "remote.log.storage.s3.path.style.access": True,
            }
        if backend == "gcs":
            if self._gcs is None:
                self._gcs = self._stack.enter_context(FakeGcs())
                self._gcs.start()
            self._gcs.create_bucket(name)
            return self._gcs.info.settings(name)
        if self._azure is None:
            self._azure = self._stack.enter_context(Azurite())
            self._azure.start()
        self._azure.create_container(name)
        return self._azure.info.settings(name)

    def close(self) -> None:
        self._stack.close()


async def tier(
    broker: BrokerInfo,
    spark: Any,
    topic: str,
    storage: dict[str, Any],
    spill: Path,
    *,
    meter: Any = None,
) -> tuple[str, float]:
    """One cycle copying ``topic`` with ``storage``: its metadata topic, and with a
    ``meter`` the CPU seconds of the cycle alone (not of opening the pipeline: creating its
    metadata topic and starting its metadata manager, as ``bench.pipeline`` measures)."""
    metadata_topic = f"__rlm-{uuid.uuid4().hex[:10]}"
    settings = settings_from_flat(
        {
            "bootstrap.servers": broker.bootstrap,
            **storage,
            "remote.log.metadata.topic.name": metadata_topic,
            "remote.log.metadata.topic.partitions": 3,
            "tiering.spill.dir": str(spill),
            "topics": [
                {
                    "pattern": topic,
                    "remote.storage.enable": True,
                    "segment.bytes": SEGMENT_BYTES,
                    "segment.ms": 3_600_000,
                }
            ],
        }
    )
    async with open_pipeline(settings, spark) as pipeline:
        before = meter.sample()[0] if meter is not None else 0.0
        report = await pipeline.run_cycle()
        cpu = meter.sample()[0] - before if meter is not None else 0.0
    if report.errors or not report.segments_copied:
        raise RuntimeError(f"tiering failed: {report.errors}")
    return metadata_topic, cpu


async def pipeline_rounds(
    args: argparse.Namespace, broker: BrokerInfo, spark: Any, topic: str, *, keys: Path, meter: Any
) -> dict[str, Any]:
    rounds: list[dict[str, float]] = []
    data = args.data_mib * MIB
    for number in range(args.pairs + 1):
        row: dict[str, float] = {}
        for mode in MODES:
            scratch = Path(tempfile.mkdtemp(prefix="bench-encoded-pipeline-"))
            storage = {
                "remote.log.storage.backend": "local",
                "remote.log.storage.local.dir": str(scratch / "remote"),
                **mode_settings(mode, keys),
            }
            started = time.perf_counter()
            _metadata, cpu = await tier(
                broker, spark, topic, storage, scratch / "spill", meter=meter
            )
            row[f"{mode}_seconds"] = time.perf_counter() - started
            row[f"{mode}_cpu_s_per_gib"] = cpu / (data / GIB)
            shutil.rmtree(scratch, ignore_errors=True)
        if number:  # the first round warms the broker's JIT and Spark: not recorded
            rounds.append(row)
        print(", ".join(f"{k} {v:.2f}" for k, v in row.items()))
    summary = {key: median([r[key] for r in rounds]) for key in rounds[0]}
    for mode in MODES[1:]:
        summary[f"cpu_ratio_{mode}_to_plain"] = median(
            [r[f"{mode}_cpu_s_per_gib"] / r["plain_cpu_s_per_gib"] for r in rounds]
        )
    summary["goal_cpu_ratio_both_to_plain"] = GOAL_CPU_RATIO
    return {"summary": summary, "rounds": rounds}


@contextlib.contextmanager
def proxy_for(
    broker: BrokerInfo, storage: dict[str, Any], metadata_topic: str, cache_mib: int
) -> Iterator[TierproxyServer]:
    proxy = proxy_process(
        broker,
        Path(tempfile.mkdtemp(prefix="bench-encoded-proxy-")),
        {
            **storage,
            "remote.log.metadata.topic.name": metadata_topic,
            "remote.log.metadata.topic.partitions": 3,
            "remote.fetch.offload.enable": True,
            "remote.fetch.chunk.cache.size.bytes": cache_mib * MIB,
            "log.level": "WARNING",
        },
    )
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


async def catchup_rounds(
    args: argparse.Namespace,
    broker: BrokerInfo,
    spark: Any,
    topic: str,
    *,
    keys: Path,
    broker_pid: int | None,
) -> tuple[Setup, dict[str, Any]]:
    scratch = Path(tempfile.mkdtemp(prefix="bench-encoded-catchup-"))
    results: dict[str, Any] = {}
    try:
        tiers = {}
        for mode in MODES:
            storage = {
                "remote.log.storage.backend": "local",
                "remote.log.storage.local.dir": str(scratch / mode),
                **mode_settings(mode, keys),
            }
            tiers[mode] = (storage, (await tier(broker, spark, topic, storage, scratch))[0])
        setup = await tiered_setup(broker, topic, tiers["plain"][1])
        with contextlib.ExitStack() as stack:
            proxies = {
                mode: stack.enter_context(proxy_for(broker, *tiers[mode], args.chunk_cache_mib))
                for mode in MODES
            }
            endpoints = {
                mode: Endpoint(name=mode, host="127.0.0.1", port=proxy.port)
                for mode, proxy in proxies.items()
            }
            for endpoint in endpoints.values():
                await warm_up(endpoint, setup)
            for mode in MODES[1:]:
                plain_pids = Pids(proxy=_pid(proxies["plain"]), broker=broker_pid, s3=None)
                mode_pids = Pids(proxy=_pid(proxies[mode]), broker=broker_pid, s3=None)
                pairs = await alternate_async(
                    args.pairs,
                    catchup_round(endpoints["plain"], setup, plain_pids, 1, 8),
                    catchup_round(endpoints[mode], setup, mode_pids, 1, 8),
                )
                summary = throughput_summary(pairs)
                results[mode] = {
                    "plain_mib_per_s": summary["direct_mib_per_s"],
                    f"{mode}_mib_per_s": summary["proxy_mib_per_s"],
                    f"ratio_{mode}_to_plain": summary["ratio_proxy_to_direct"],
                    "plain_proxy_cpu_s_per_gib": median([p.a.proxy_cpu_s_per_gib for p in pairs]),
                    f"{mode}_proxy_cpu_s_per_gib": median([p.b.proxy_cpu_s_per_gib for p in pairs]),
                    f"goal_ratio_{mode}_to_plain": GOAL_CATCHUP_RATIO,
                }
                print(mode, results[mode])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return setup, results


def _pid(proxy: TierproxyServer) -> int:
    pid = proxy.process.pid
    assert pid is not None
    return pid


async def gets_rows(
    args: argparse.Namespace, broker: BrokerInfo, spark: Any, setup: Setup, keys: Path
) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix="bench-encoded-gets-"))
    stores = Stores()
    rows: dict[str, Any] = {}
    try:
        for backend in args.backends:
            storage = {**stores.settings(backend, scratch), **mode_settings("both", keys)}
            metadata_topic, _cpu = await tier(
                broker, spark, setup.topic, storage, scratch / "spill"
            )
            with proxy_for(broker, storage, metadata_topic, args.chunk_cache_mib) as proxy:
                endpoint = Endpoint(name=backend, host="127.0.0.1", port=proxy.port)
                await warm_up(endpoint, setup)
                before, read = gets(proxy, _GET_METRICS), 0
                for _ in range(2):
                    read += await raw_fetch_all(
                        endpoint,
                        version=12,
                        topic=setup.topic,
                        topic_id=setup.topic_id,
                        end_offset=setup.tiered_end,
                        partition_max_bytes=8 * MIB,
                    )
                rows[backend] = {
                    "gets_per_gib": (gets(proxy, _GET_METRICS) - before) / (read / GIB),
                    "goal_gets_per_gib": GOAL_GETS_PER_GIB,
                }
            print(backend, rows[backend])
    finally:
        stores.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return rows


async def run(
    args: argparse.Namespace, broker: BrokerInfo, broker_pid: int | None
) -> dict[str, Any]:
    keys = Path(tempfile.mkdtemp(prefix="bench-keys-")) / "keys"
    keys.write_text(f"bench:{base64.b64encode(os.urandom(32)).decode()}\n")
    topic = f"bench-encoded-{uuid.uuid4().hex[:8]}"
    await create_topic(
        broker.bootstrap, topic, partitions=1, configs={"segment.bytes": str(SEGMENT_BYTES)}
    )
    count = args.data_mib * MIB // RECORD_BYTES
    await asyncio.to_thread(preload, broker.bootstrap, topic, count, 1)
    spark = build_spark("local[2]", app_name="bench-encoded-tier")
    result: dict[str, Any] = {
        "broker": broker.version,
        "data_mib": args.data_mib,
        "pairs": args.pairs,
        "chunk_cache_mib": args.chunk_cache_mib,
        "record_bytes": RECORD_BYTES,
        "data": "1 KiB records of one random value repeated (zstd shrinks it ~500x)",
        "cpu_count": os.cpu_count(),
    }
    try:
        meter = CpuMeter(broker_pid, None)
        result["pipeline"] = await pipeline_rounds(
            args, broker, spark, topic, keys=keys, meter=meter
        )
        setup, result["catchup"] = await catchup_rounds(
            args, broker, spark, topic, keys=keys, broker_pid=broker_pid
        )
        result["gets"] = await gets_rows(args, broker, spark, setup, keys)
    finally:
        spark.stop()
    pipeline = result["pipeline"]["summary"]
    result["headline"] = {
        "cpu_ratio_both_to_plain": pipeline["cpu_ratio_both_to_plain"],
        "goal_cpu_ratio_both_to_plain": GOAL_CPU_RATIO,
        **{
            key: value
            for mode in MODES[1:]
            for key, value in result["catchup"][mode].items()
            if "ratio" in key
        },
        "gets_per_gib_worst": max(row["gets_per_gib"] for row in result["gets"].values()),
        "goal_gets_per_gib_worst": GOAL_GETS_PER_GIB,
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-mib", type=int, default=256)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--chunk-cache-mib", type=int, default=32)
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    args = parser.parse_args()
    server = broker_from_env(os.environ)
    try:
        broker = server.start()
        result = asyncio.run(run(args, broker, getattr(server, "pid", None)))
    finally:
        server.close()
    print(f"saved {save_json('encoded_tier', result)}")


if __name__ == "__main__":
    main()
