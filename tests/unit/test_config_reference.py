"""The generated configuration reference: complete, current, and built without PySpark."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from proxy.cli import build_parser
from proxy.config import ProxyConfig
from proxy.config_reference import DEFAULT_OUTPUT, discover, main, render, render_value
from proxy.remote.config import RemoteFetchConfig
from proxy.settings import load_settings, settings_from_flat
from storage.cluster_config import ClusterClientConfig
from storage.config import ConfigError, check_unknown, describe, flatten
from storage.index_cache import IndexCacheConfig
from storage.rlmm.config import RemoteLogMetadataConfig
from storage.rsm.config import RemoteStorageConfig
from storage.tiering.config import TieringConfig
from storage.tiering.job import load_tiering_settings
from storage.tiering.policy import TopicPolicy, resolve_policy

EXPECTED = (
    ProxyConfig,
    ClusterClientConfig,
    RemoteFetchConfig,
    IndexCacheConfig,
    RemoteLogMetadataConfig,
    RemoteStorageConfig,
    TieringConfig,
    TopicPolicy,
)


def test_committed_reference_is_current() -> None:
    assert main(["--check"]) == 0, "run `python -m proxy.config_reference` and commit the file"


def test_discovers_every_config_class() -> None:
    found = {section.config_class for section in discover()}
    assert set(EXPECTED) <= found


def test_every_setting_is_documented_with_default_and_kafka_name() -> None:
    text = DEFAULT_OUTPUT.read_text(encoding="utf-8")
    for config_class in EXPECTED:
        for info in describe(config_class):
            row = next(line for line in text.splitlines() if line.startswith(f"| `{info.key}` |"))
            assert f"`{render_value(info.default)}`" in row.replace("\\|", "|")
            if info.kafka is not None and info.kafka != info.key:
                assert f"`{info.kafka}`" in row


def test_check_fails_on_a_stale_file_and_writing_fixes_it(tmp_path: Path) -> None:
    output = tmp_path / "configuration.md"
    output.write_text("# outdated\n", encoding="utf-8")
    assert main(["--check", "--output", str(output)]) == 1
    assert main(["--output", str(output)]) == 0
    assert output.read_text(encoding="utf-8") == render(discover())
    assert main(["--check", "--output", str(output)]) == 0


def test_discovery_does_not_import_pyspark() -> None:
    script = (
        "import sys\n"
        "from proxy.config_reference import discover\n"
        "assert len(discover()) >= 7\n"
        "assert 'pyspark' not in sys.modules, 'config discovery imported PySpark'\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "unset"),
        (True, "true"),
        (False, "false"),
        ("", '""'),
        ("local", '"local"'),
        ((), "[]"),
        (500, "500"),
        (0.2, "0.2"),
        (2**63 - 1, "9223372036854775807 (no limit)"),
    ],
)
def test_defaults_render_as_toml(value: object, text: str) -> None:
    assert render_value(value) == text


EXAMPLE = DEFAULT_OUTPUT.parents[1] / "tierproxy.example.toml"


def test_example_config_keys_all_exist() -> None:
    flat = flatten(tomllib.loads(EXAMPLE.read_text(encoding="utf-8")))
    tables = {"topics", "broker.map"}
    check_unknown(
        {key: value for key, value in flat.items() if key not in tables},
        [section.config_class for section in discover()],
    )


def test_example_config_loads_for_the_pipeline() -> None:
    settings = load_tiering_settings(EXAMPLE)
    assert settings.storage.backend == "s3"
    assert resolve_policy("tiered-demo", settings.rules).copies
    assert not resolve_policy("unrelated", settings.rules).copies


def test_example_config_loads_for_the_proxy() -> None:
    settings = load_settings(EXAMPLE)
    assert settings.remote.enabled
    assert settings.proxy.metrics_port > 0


DOCS = [DEFAULT_OUTPUT.parents[1] / "README.md", *sorted(DEFAULT_OUTPUT.parent.glob("*.md"))]


def _blocks(language: str) -> list[tuple[Path, str]]:
    pattern = re.compile(rf"^\s*```{language}\n(.*?)^\s*```", re.MULTILINE | re.DOTALL)
    return [
        (path, textwrap.dedent(block))
        for path in DOCS
        for block in pattern.findall(path.read_text(encoding="utf-8"))
    ]


def test_toml_in_the_docs_uses_real_settings() -> None:
    classes = [section.config_class for section in discover()]
    blocks = _blocks("toml")
    assert blocks
    for path, block in blocks:
        flat = flatten(tomllib.loads(block))
        try:
            known = {k: v for k, v in flat.items() if k not in {"topics", "broker.map"}}
            check_unknown(known, classes)
            settings_from_flat(flat, resolve_secrets=False)
        except ConfigError as err:
            pytest.fail(f"{path.name}: {err}\n{block}")


def _tierproxy_commands() -> list[tuple[Path, list[str]]]:
    commands = []
    for path, block in _blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if "tierproxy" in words:
                commands.append((path, words[words.index("tierproxy") + 1 :]))
    return commands


def test_tierproxy_commands_in_the_docs_parse() -> None:
    commands = _tierproxy_commands()
    assert len(commands) >= 8
    parser = build_parser()
    for path, argv in commands:
        try:
            parser.parse_args(argv)
        except SystemExit:
            pytest.fail(f"{path.name}: `tierproxy {shlex.join(argv)}` does not parse")
