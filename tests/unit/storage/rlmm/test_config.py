"""The metadata manager's settings: tierproxy's own topic name, kept forever, snapshots on."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.rlmm.config import (
    DEFAULT_TOPIC_NAME,
    KAFKA_TOPIC_NAME,
    RemoteLogMetadataConfig,
    snapshot_dir_for,
)


def test_defaults_never_touch_kafkas_own_topic_and_keep_metadata_forever() -> None:
    config = RemoteLogMetadataConfig()
    assert config.topic_name == DEFAULT_TOPIC_NAME != KAFKA_TOPIC_NAME
    assert config.topic_retention_ms == -1


def test_snapshots_are_on_by_default_one_directory_per_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = RemoteLogMetadataConfig()
    monkeypatch.delenv("TIERPROXY_STATE_DIR", raising=False)
    assert snapshot_dir_for(config, "serve") == Path("tierproxy-state/serve", DEFAULT_TOPIC_NAME)
    assert snapshot_dir_for(config, "tier") != snapshot_dir_for(config, "serve")
    assert snapshot_dir_for(config, None) is None  # short-lived readers (status) keep none
    monkeypatch.setenv("TIERPROXY_STATE_DIR", str(tmp_path))
    assert snapshot_dir_for(config, "tier") == tmp_path / "tier" / DEFAULT_TOPIC_NAME
    explicit = RemoteLogMetadataConfig(snapshot_dir=str(tmp_path / "mine"))
    assert snapshot_dir_for(explicit, "serve") == tmp_path / "mine"
    assert snapshot_dir_for(RemoteLogMetadataConfig(snapshot_dir=""), "serve") is None
