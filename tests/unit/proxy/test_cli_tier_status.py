"""``tierproxy tier`` and ``status`` reject keys no command declares, as ``serve`` does.

A typo exits 2 before Spark starts or any broker is contacted; a file shared with ``serve``
(listeners, read-path settings, ``[[broker.map]]``) loads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cli import main
from proxy.settings import load_settings

EXAMPLE = Path(__file__).parents[3] / "tierproxy.example.toml"

TYPO_TOP_LEVEL = 'bootstrap.servers = "127.0.0.1:1"\nsegment.byte = 1048576\n'
TYPO_IN_TOPICS = (
    'bootstrap.servers = "127.0.0.1:1"\n'
    "[[topics]]\n"
    'pattern = "orders"\n'
    "remote.storage.enable = true\n"
    "segment.byte = 1048576\n"
)


@pytest.mark.parametrize("command", ["tier", "status"])
@pytest.mark.parametrize(
    ("text", "prefix"),
    [(TYPO_TOP_LEVEL, ""), (TYPO_IN_TOPICS, "[[topics]] pattern 'orders': ")],
)
def test_a_typo_exits_2_naming_the_closest_key(
    command: str, text: str, prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tierproxy.toml"
    path.write_text(text, encoding="utf-8")
    assert main([command, "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert (
        f"tierproxy {command}: {prefix}unknown setting 'segment.byte' "
        "(did you mean 'segment.bytes'?)"
    ) in err


def test_a_file_shared_with_serve_loads(tmp_path: Path) -> None:
    path = tmp_path / "tierproxy.toml"
    path.write_text(
        'bootstrap.servers = "kafka:9092"\n'
        'listeners = "PLAINTEXT://0.0.0.0:19092"\n'
        "remote.log.storage.system.enable = true\n"
        "remote.fetch.offload.enable = true\n"
        "remote.log.index.file.cache.total.size.mb = 64\n"
        "tiering.task.max.bytes = 1048576\n"
        "remote.log.metadata.topic.partitions = 3\n"
        "[[topics]]\n"
        'pattern = "orders"\n'
        "remote.storage.enable = true\n"
        "[[broker.map]]\n"
        "node.id = 1\n"
        'listener = "0.0.0.0:19093"\n',
        encoding="utf-8",
    )
    settings = load_settings(path)
    assert settings.rules.matching("orders") is not None
    assert settings.metadata.topic_partitions == 3


def test_the_example_config_loads_with_the_check() -> None:
    settings = load_settings(EXAMPLE)
    assert settings.storage.backend == "s3"
