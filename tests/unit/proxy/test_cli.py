"""``tierproxy serve``: --help documents every setting, bad settings exit 2 with a message."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from proxy.cli import build_parser, main
from proxy.commands.serve import _overrides
from proxy.config import ProxyConfig
from storage.config import describe


def test_help_explains_every_flag_and_setting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = capsys.readouterr().out
    for flag in ("--config", "--bootstrap", "--listen", "--advertised-host", "--metrics-port"):
        assert flag in text
    for info in describe(ProxyConfig):
        assert f"  {info.key} = " in text or f'  "{info.key}" = ' in text


def test_invalid_settings_exit_2_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("socket.request.max.bytes = -1\n", encoding="utf-8")
    assert main(["serve", "--config", str(path)]) == 2
    assert "socket.request.max.bytes must be > 0" in capsys.readouterr().err
    assert main(["serve", "--listen", "nowhere"]) == 2
    assert "is not host:port" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("from_file", "expected"),
    [("", "proxy.example.com"), ("SSL://old:19192", "proxy.example.com:19192")],
)
def test_advertised_host_keeps_an_advertised_port(from_file: str, expected: str) -> None:
    args = argparse.Namespace(
        bootstrap=None,
        listen=None,
        advertised_host="proxy.example.com",
        metrics_port=None,
        metrics_host=None,
        log_level=None,
        workers=None,
        log_format=None,
    )
    overrides = _overrides(args, {"advertised.listeners": from_file} if from_file else {})
    assert overrides == {"advertised.listeners": expected}


@pytest.mark.parametrize("command", ["serve", "tier", "status"])
def test_every_command_names_its_config_file_alike(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    assert "--config FILE" in capsys.readouterr().out
