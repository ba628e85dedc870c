"""The embedded Kafka's cluster ids are ones Kafka's own tools accept."""

import uuid

import pytest

from proxy.embedded import kafka_node


def test_a_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """0xF8 encodes to a leading ``-``; the storage tool would read such an id as an option."""
    drawn = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x01" * 16)])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(drawn))

    assert kafka_node.cluster_id() == "AQEBAQEBAQEBAQEBAQEBAQ"


def test_a_cluster_id_is_22_characters_of_url_safe_base64() -> None:
    ids = {kafka_node.cluster_id() for _ in range(200)}

    assert len(ids) == 200
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
