"""The remote log metadata manager (KIP-405 RLMM) backed by the ``__remote_log_metadata`` topic.

- :mod:`storage.rlmm.state`: the segment and partition-delete state machines;
- :mod:`storage.rlmm.store` and :mod:`storage.rlmm.cache`: the compact per-partition cache
  and its lineage-aware lookups;
- :mod:`storage.rlmm.snapshot`: per-partition flat-file snapshots and committed offsets;
- :mod:`storage.rlmm.topic_manager`: publishing to and consuming the metadata topic;
- :mod:`storage.rlmm.config`: the ``remote.log.metadata.*`` settings.
"""
