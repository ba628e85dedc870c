"""How ``tierproxy serve`` runs with the remote tier: settings, interceptors, lifetime.

With ``remote.log.storage.system.enable = true`` the proxy builds the remote tier (storage
manager, metadata manager consuming ``__remote_log_metadata``, index and chunk caches,
reader pool) before it starts listening, registers the read-path interceptors, and closes
the tier after the last connection is gone. Otherwise it runs as a plain pass-through
proxy and never imports the storage clients' heavier parts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from proxy.config import CONFIG_CLASSES, ProxyConfig
from proxy.health import Liveness, Readiness
from proxy.health_endpoint import serving
from proxy.identities import ClientPrincipalConfig
from proxy.interceptors.base import Interceptor
from proxy.metrics import ProxyMetrics
from proxy.remote.config import RemoteFetchConfig
from proxy.server import run_until_stopped
from storage.config import from_settings
from storage.index_cache import IndexCacheConfig
from storage.kafka_security import KafkaSecurityConfig
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rsm.config import RemoteStorageConfig
from storage.tiering.config import TIERING_CONFIG_CLASSES, TieringConfig

__all__ = [
    "SERVE_CONFIG_CLASSES",
    "SHARED_CONFIG_CLASSES",
    "check_remote_settings",
    "remote_interceptors",
    "serve",
]

_REMOTE_CONFIG_CLASSES: tuple[type[Any], ...] = (
    RemoteFetchConfig,
    RemoteStorageConfig,
    RemoteLogMetadataConfig,
    IndexCacheConfig,
    ClientPrincipalConfig,
)
_PIPELINE_CLIENT_ID = TieringConfig().client_id

SERVE_CONFIG_CLASSES: tuple[type[Any], ...] = (*CONFIG_CLASSES, *_REMOTE_CONFIG_CLASSES)
"""Every settings class ``tierproxy serve`` reads (listed in its ``--help``)."""

SHARED_CONFIG_CLASSES: tuple[type[Any], ...] = tuple(
    dict.fromkeys((*SERVE_CONFIG_CLASSES, *TIERING_CONFIG_CLASSES))
)
"""What one config file for ``serve``, ``tier`` and ``status`` may hold: each command accepts
the others' settings, and a key none of them declares is a typo (exit 2, closest key named)."""


def check_remote_settings(settings: Mapping[str, Any]) -> None:
    """Build every remote-tier settings class once, so mistakes surface before start-up.

    :raises ConfigError: for a wrong type or an invalid value.
    """
    if from_settings(RemoteFetchConfig, settings).enabled:
        for config_class in _REMOTE_CONFIG_CLASSES:
            from_settings(config_class, settings)


def remote_interceptors(
    tier: Any, *, pipeline_client_id: str = _PIPELINE_CLIENT_ID
) -> tuple[Interceptor, ...]:
    """The read path's interceptors over ``tier`` (a :class:`~proxy.remote.tier.RemoteTier`),
    in registration order. ``pipeline_client_id`` is the tiering pipeline's client id, whose
    DeleteRecords are never taken for an operator's."""
    from proxy.interceptors.delete_records import DeleteRecordsInterceptor  # noqa: PLC0415
    from proxy.interceptors.fetch import FetchInterceptor  # noqa: PLC0415
    from proxy.interceptors.list_offsets import ListOffsetsInterceptor  # noqa: PLC0415
    from proxy.interceptors.metadata_offsets import MetadataOffsets  # noqa: PLC0415
    from proxy.interceptors.offset_for_leader_epoch import (  # noqa: PLC0415
        OffsetForLeaderEpochInterceptor,
    )
    from proxy.interceptors.sasl_identity import SaslIdentity  # noqa: PLC0415
    from proxy.interceptors.topic_ids import MetadataTopicIds  # noqa: PLC0415

    return (
        SaslIdentity(tier.identities),
        MetadataTopicIds(tier.topic_ids),
        MetadataOffsets.for_tier(tier),
        FetchInterceptor.for_tier(tier),
        ListOffsetsInterceptor.for_tier(tier),
        OffsetForLeaderEpochInterceptor(tier),
        DeleteRecordsInterceptor.for_tier(tier, pipeline_client_id=pipeline_client_id),
    )


async def serve(config: ProxyConfig, settings: Mapping[str, Any]) -> None:
    """Run the proxy until SIGTERM/SIGINT, with the remote tier if the settings enable it.

    The metrics and health endpoint (:mod:`proxy.health_endpoint`) serves from the start:
    ``/livez`` answers while the proxy waits for the cluster, ``/readyz`` says what it waits
    for.

    :raises ConfigError: for invalid remote-tier or ``metrics.*`` settings, or a TLS or
        SASL login the cluster refuses.
    :raises EndpointError: when the metrics port cannot be bound.
    :raises ListenerError: when a client listener cannot be bound.
    :raises MetadataTopicError: if the metadata topic cannot be used.
    """
    security = from_settings(KafkaSecurityConfig, settings).with_secrets_resolved()
    metrics = ProxyMetrics()
    readiness = Readiness()
    with serving(config, registry=metrics.registry, readiness=readiness) as liveness:
        readiness.start()
        try:
            await _serve(
                config,
                settings,
                security=security,
                metrics=metrics,
                readiness=readiness,
                liveness=liveness,
            )
        finally:
            await readiness.close()


async def _serve(
    config: ProxyConfig,
    settings: Mapping[str, Any],
    *,
    security: KafkaSecurityConfig,
    metrics: ProxyMetrics,
    readiness: Readiness,
    liveness: Liveness,
) -> None:
    from storage.startup import check_cluster_login  # noqa: PLC0415

    await check_cluster_login(
        config.bootstrap_servers, security, log=logging.getLogger("tierproxy.startup")
    )
    if not from_settings(RemoteFetchConfig, settings).enabled:
        await run_until_stopped(
            config, metrics=metrics, security=security, readiness=readiness, liveness=liveness
        )
        return
    from proxy.remote.metrics import RemoteMetrics  # noqa: PLC0415
    from proxy.remote.tier import open_remote_tier  # noqa: PLC0415

    tier, close = await open_remote_tier(
        settings,
        bootstrap_servers=config.bootstrap_servers,
        metrics=RemoteMetrics(metrics.registry),
        readiness=readiness,
        check_interval=config.health_check_interval_ms / 1000,
    )
    interceptors = remote_interceptors(
        tier, pipeline_client_id=from_settings(TieringConfig, settings).client_id
    )
    try:
        await run_until_stopped(
            config,
            interceptors=interceptors,
            metrics=metrics,
            security=security,
            readiness=readiness,
            liveness=liveness,
        )
    finally:
        await close()
