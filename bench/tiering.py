"""The servers and the tiered topic of the benchmarks that read the remote tier (``catchup``,
``hostile``, ``native``): a broker and S3 from the environment, and a preloaded topic tiered
by one cycle of the real pipeline to an S3 bucket or a local directory
(:class:`bench.pipeline.Target`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.clients import RECORD_BYTES, preload
from bench.common import MIB
from bench.pipeline import Backend, Target, target_for
from proxy.embedded import (
    BrokerInfo,
    S3Info,
    SeaweedFS,
    broker_from_env,
    create_topic,
    delete_bucket,
    s3_info_from_env,
)
from proxy.embedded.tierproxy import storage_settings
from storage.tiering.job import build_spark, open_pipeline, settings_from_flat
from storage.tiering.report import CycleReport

__all__ = [
    "Servers",
    "produce_and_tier",
    "remote_tier",
    "servers_from_env",
    "tier_settings",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Servers:
    broker: BrokerInfo
    s3: S3Info | None
    """None when no S3 was asked for (a local-directory remote tier)."""
    broker_pid: int | None
    """None for an external broker (``KAFKA_BOOTSTRAP``)."""
    s3_pid: int | None
    """None for an external endpoint (``S3_ENDPOINT``) or no S3."""


@contextlib.contextmanager
def servers_from_env(*, with_s3: bool = True) -> Iterator[Servers]:
    """The broker and S3 endpoint the environment names, embedded Apache Kafka and SeaweedFS
    by default (as in the tests), stopped by PID on exit. Without ``with_s3`` no S3 is
    started: its CPU would otherwise share the machine with what is measured."""
    with contextlib.ExitStack() as stack:
        server = broker_from_env(os.environ)
        stack.callback(server.close)
        broker = server.start()
        external = s3_info_from_env(os.environ) if with_s3 else None
        s3: S3Info | None = external
        s3_pid = None
        if with_s3 and external is None:
            seaweed = stack.enter_context(SeaweedFS())
            s3 = seaweed.start()
            s3_pid = seaweed.pid
        yield Servers(broker=broker, s3=s3, broker_pid=getattr(server, "pid", None), s3_pid=s3_pid)


@contextlib.contextmanager
def remote_tier(kind: Backend, s3: S3Info | None, name: str) -> Iterator[Target]:
    """A fresh S3 bucket or local directory named after ``name`` for one benchmark's remote
    tier, deleted on exit."""
    scratch = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    target = target_for(kind, s3, scratch, name)
    try:
        yield target
    finally:
        if target.s3 is not None:
            delete_bucket(target.s3, target.bucket)
        shutil.rmtree(scratch, ignore_errors=True)


def tier_settings(target: Target, metadata_topic: str) -> dict[str, Any]:
    """The remote storage and metadata settings the pipeline and the proxy share: for S3 the
    tests' (two attempts, short timeouts), for a directory the pipeline benchmark's."""
    if target.backend == "s3":
        assert target.s3 is not None
        return storage_settings(target.s3, target.bucket, metadata_topic)
    return {
        **target.storage_settings(),
        "remote.log.metadata.topic.name": metadata_topic,
        "remote.log.metadata.topic.partitions": 3,
    }


async def produce_and_tier(
    broker: BrokerInfo,
    target: Target,
    *,
    topic: str,
    spill: Path,
    data_mib: int,
    segment_bytes: int,
    partitions: int = 1,
    metadata_topic: str | None = None,
    **policy: Any,
) -> CycleReport:
    """Create ``topic`` (``partitions`` partitions), preload ``data_mib`` MiB of 1 KiB
    records keyed ``%08d`` (split evenly over the partitions), and run one pipeline cycle
    (Spark local[2]) with the topic ``policy`` (Kafka's names: ``local.retention.ms`` 1 makes
    the broker delete what was tiered), its metadata in ``metadata_topic`` (by default
    ``__rlm-<topic>``; one proxy serves the topics that share one).

    The broker's own segments are ``segment_bytes`` too, not the embedded broker's 1 MiB:
    Kafka reads one segment per partition per Fetch, so 1 MiB segments would cap a direct
    read's 8 MiB fetches at 1 MiB and handicap the local-log baseline against the tiered
    copy (and against the natively tiered topic, which has ``segment_bytes`` segments).

    :raises RuntimeError: the cycle reported errors.
    """
    await create_topic(
        broker.bootstrap,
        topic,
        partitions=partitions,
        configs={"segment.bytes": str(segment_bytes)},
    )
    started = time.perf_counter()
    await asyncio.to_thread(
        preload, broker.bootstrap, topic, data_mib * MIB // RECORD_BYTES, partitions
    )
    print(f"produced {data_mib} MiB in {time.perf_counter() - started:.1f} s")
    settings = settings_from_flat(
        {
            "bootstrap.servers": broker.bootstrap,
            **tier_settings(target, metadata_topic or f"__rlm-{topic}"),
            "tiering.spill.dir": str(spill),
            "topics": [
                {
                    "pattern": topic,
                    "remote.storage.enable": True,
                    "segment.bytes": segment_bytes,
                    **policy,
                }
            ],
        }
    )
    spark = build_spark("local[2]", app_name=f"bench-{topic}")
    try:
        started = time.perf_counter()
        async with open_pipeline(settings, spark) as pipeline:
            report = await pipeline.run_cycle()
    finally:
        spark.stop()
    if report.errors:
        raise RuntimeError(f"tiering failed: {report.errors}")
    print(
        f"tiered {report.segments_copied} segments, {report.bytes_copied / MIB:.1f} MiB in "
        f"{time.perf_counter() - started:.1f} s"
    )
    return report
