"""The tiered read path of the proxy: configuration, reader pool, purgatory, quota, offload
policy, fetch-session tracking, the ListOffsets/OffsetForLeaderEpoch rules, metrics, and the
:class:`~proxy.remote.tier.RemoteTier` that the Fetch, ListOffsets and OffsetForLeaderEpoch
interceptors share."""
