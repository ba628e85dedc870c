"""The tiered read path of the proxy: configuration, reader pool, purgatory, quota, offload
policy, fetch-session tracking, the ListOffsets/OffsetForLeaderEpoch rules, metrics, and the
tiered partitions as requests name them (:class:`~proxy.remote.tier.TieredPartitions`). The
services are built once and handed to the Fetch, ListOffsets and OffsetForLeaderEpoch
interceptors by the composition root, :mod:`proxy.app`."""
