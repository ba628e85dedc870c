"""A PySpark data source that reads a topic's whole history straight from the remote tier
(and the broker's untiered tail), in the schema of Spark's Kafka source.

    from storage.spark_source import register
    register(spark)
    df = spark.read.format("tierproxy").option("subscribe", "orders") \\
        .option("config", "tierproxy.toml").load()

See ``docs/spark.md``. Nothing on the proxy's serving path imports this package (an
import-linter contract).
"""

from storage.spark_source.source import TierproxyDataSource, register

__all__ = ["TierproxyDataSource", "register"]
