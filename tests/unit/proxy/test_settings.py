"""The whole config file is checked at once (proxy.settings, storage.config): every problem
listed, each naming its key and the TOML form expected, and TOML's own errors explained."""

from __future__ import annotations

import base64
import logging
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.cli import build_parser
from proxy.commands.log_setup import settings_with_logs
from proxy.logs import JsonFormatter
from proxy.settings import (
    ACCEPTED_CONFIG_CLASSES,
    Settings,
    load_settings,
    settings_from_flat,
)
from storage.config import ConfigError, ConfigProblems, describe, toml_mistake, toml_value
from storage.kafka_security import PASSWORD_ENV

_NUMBERS = sorted(
    {
        info.key
        for config_class in ACCEPTED_CONFIG_CLASSES
        for info in describe(config_class)
        if isinstance(info.default, int) and not isinstance(info.default, bool)
    }
)
_FLAGS = sorted(
    {
        info.key
        for config_class in ACCEPTED_CONFIG_CLASSES
        for info in describe(config_class)
        if isinstance(info.default, bool)
    }
)


def problems_of(flat: dict[str, Any]) -> tuple[str, ...]:
    with pytest.raises(ConfigProblems) as raised:
        settings_from_flat(flat)
    return raised.value.problems


def test_no_file_is_every_default() -> None:
    assert load_settings(None) == settings_from_flat({})
    assert isinstance(load_settings(None), Settings)


def test_every_problem_of_every_part_is_listed_once() -> None:
    problems = problems_of(
        {
            "bootstrap.servers": 5,  # read by the proxy and the pipeline: listed once
            "remote.log.reader.threads": "five",
            "remote.log.reader.max.pending.tasks": -1,
            "remote.log.manager.task.interval.ms": "30s",
            "segment.byte": 1,
            "remote.log.storage.s3.access.key.id": "AKIA",
            "topics": [{"pattern": "a", "local.retention.ms": "ten"}, {"pattern": "("}],
        }
    )
    assert problems == (
        "unknown setting 'segment.byte' (did you mean 'segment.bytes'?)",
        "bootstrap.servers = 5: expected a string, such as the default: "
        'bootstrap.servers = "127.0.0.1:9092"',
        'remote.log.reader.threads = "five": expected an integer, such as the default: '
        "remote.log.reader.threads = 5",
        "set both remote.log.storage.s3.access.key.id and .secret.access.key, or neither",
        'remote.log.manager.task.interval.ms = "30s": expected an integer (milliseconds): '
        "write milliseconds as a plain integer: remote.log.manager.task.interval.ms = 30000",
        """[[topics]] pattern 'a': local.retention.ms = "ten": expected an integer """
        "(milliseconds), such as the default: local.retention.ms = -2",
        "[[topics]] pattern '(' is invalid: missing ), unterminated subpattern at position 0",
    )


def test_a_range_problem_of_a_part_is_listed_beside_another_parts() -> None:
    problems = problems_of({"remote.log.reader.threads": 0, "segment.bytes": 1})
    assert problems == (
        "remote.log.reader.threads must be at least 1, not 0",
        "segment.bytes must be at least 14",
    )


def test_a_secret_that_cannot_be_read_is_a_problem_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    flat = {
        "upstream.security.protocol": "SASL_PLAINTEXT",
        "upstream.sasl.mechanism": "PLAIN",
        "upstream.sasl.username": "tierproxy",
        "upstream.sasl.password.file": str(tmp_path / "absent"),
        "remote.log.reader.threads": 0,
    }
    (secret, threads) = sorted(problems_of(flat))
    assert secret.startswith("cannot read upstream.sasl.password.file")
    assert threads.startswith("remote.log.reader.threads")
    (tmp_path / "absent").write_text("s3cret\n", encoding="utf-8")
    settings = settings_from_flat({**flat, "remote.log.reader.threads": 1})
    assert settings.security.sasl_password == "s3cret"  # resolved once, here


def test_encryption_keys_that_cannot_be_loaded_are_problems_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TIERPROXY_ENCRYPTION_KEYS", raising=False)
    keys = tmp_path / "keys"
    flat = {
        "remote.log.storage.encryption.enable": True,
        "remote.log.storage.encryption.key.id": "k2",
        "remote.log.storage.encryption.keys.file": str(keys),
        "remote.log.reader.threads": 0,
    }
    (unreadable, threads) = sorted(problems_of(flat))
    assert unreadable.startswith(f"cannot read encryption keys from {keys}")
    assert threads.startswith("remote.log.reader.threads")
    settings_from_flat(flat | {"remote.log.reader.threads": 1}, resolve_secrets=False)
    keys.write_text(f"k1:{base64.b64encode(bytes(32)).decode()}\n", encoding="utf-8")
    (inactive,) = problems_of(flat | {"remote.log.reader.threads": 1})
    assert "k2" in inactive
    keys.write_text(f"k2:{base64.b64encode(bytes(32)).decode()}\n", encoding="utf-8")
    settings = settings_from_flat(flat | {"remote.log.reader.threads": 1})
    assert settings.storage.encryption_key_id == "k2"


@given(
    st.dictionaries(
        st.sampled_from(_NUMBERS),
        st.text(),
        min_size=1,
    )
)
def test_each_number_given_as_text_is_one_problem_naming_its_key(wrong: dict[str, str]) -> None:
    problems = problems_of(dict(wrong))
    for key in wrong:
        named = [p for p in problems if p.startswith(f"{key} = ")]
        assert len(named) == 1, (key, problems)
        assert "expected an integer" in named[0]
    assert len(problems) == len(wrong)


@given(st.sampled_from(_FLAGS), st.sampled_from([1, 0, "true", "yes"]))
def test_a_flag_takes_only_toml_booleans(key: str, value: object) -> None:
    (problem,) = problems_of({key: value})
    assert problem.startswith(f"{key} = {toml_value(value)}: expected true or false")


_TOML_TEXT = st.text(st.characters(exclude_categories=["Cs"]))
_TOML_VALUES: st.SearchStrategy[Any] = st.recursive(
    st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1), _TOML_TEXT),
    lambda inner: st.lists(inner, max_size=4),
    max_leaves=8,
)


@given(_TOML_VALUES)
def test_toml_values_read_back_as_they_were(value: Any) -> None:
    text = toml_value(value)
    assert text is not None
    assert tomllib.loads(f"key = {text}")["key"] == value


def test_none_has_no_toml_form() -> None:
    assert toml_value(None) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "a = 1\nremote.fetch.offload.enable = True  # on\n",
            "line 2: remote.fetch.offload.enable = True: TOML booleans are lowercase true or "
            "false: remote.fetch.offload.enable = true",
        ),
        (
            "remote.log.storage.s3.region = None\n",
            "line 1: remote.log.storage.s3.region = None: TOML has no null: leave the key out "
            "to keep its default",
        ),
        (
            "remote.log.storage.backend = s3\n",
            "line 1: remote.log.storage.backend = s3: text is quoted in TOML: "
            'remote.log.storage.backend = "s3"',
        ),
        (
            "[remote.log]\nreader.threads = five\n",
            "line 2: reader.threads = five: expected an integer, such as the default: "
            "reader.threads = 5",
        ),
        (
            '[[topics]]\npattern = "x"\nlocal.retention.ms = 2h\n',
            "line 3: local.retention.ms = 2h: expected an integer (milliseconds): write "
            "milliseconds as a plain integer: local.retention.ms = 7200000",
        ),
        (
            "tiering.task.max.bytes = 128MB\n",
            "line 1: tiering.task.max.bytes = 128MB: expected an integer: numbers take no "
            "unit in TOML: write a plain integer",
        ),
        ("[remote.log\n", "line 1: [remote.log: Expected ']' at the end of a table declaration"),
        ('listeners = "x\n', 'line 1: listeners = "x: text is quoted in TOML: listeners = "x"'),
        ("broker.map = [1,\n", "Invalid value (at end of document)"),
        (
            'listeners = "0.0.0.0:9192"\nlisteners.allow.cidrs = "10.0.0.0/8"\n',
            'line 2: listeners.allow.cidrs = "10.0.0.0/8": TOML cannot hold both listeners '
            "(line 1) and a key under it as dotted keys: quote the longer one, "
            '"listeners.allow.cidrs" = "10.0.0.0/8"',
        ),
        (
            "metrics.port = 1\nmetrics.port = 2\n",
            "line 2: metrics.port = 2: set twice, first on line 1: keep one",
        ),
    ],
)
def test_toml_errors_name_the_line_the_key_and_the_form(
    text: str, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "tierproxy.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_settings(path)
    assert str(raised.value) == f"cannot read config file {path}: {message}"


@given(st.text(max_size=80))
def test_explaining_a_toml_error_never_fails(text: str) -> None:
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        explained = toml_mistake(text, err)
        assert explained
        where = re.search(r"at line (\d+)", str(err))
        if where is not None:
            assert explained.startswith(f"line {where.group(1)}")


def test_serve_help_shows_toml_that_loads_as_the_defaults(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    text = capsys.readouterr().out
    for python_only in ("= False", "= True", "= None", "= ()", "= ''"):
        assert python_only not in text
    pasted = [line.strip() for line in text.splitlines() if re.match(r'^  "?[a-z][\w."]* = ', line)]
    assert len(pasted) > 80
    path = tmp_path / "pasted.toml"
    path.write_text("\n".join(pasted) + "\n", encoding="utf-8")
    assert load_settings(path) == settings_from_flat({})
    assert "# remote.log.storage.s3.bucket = ...   (unset by default)" in text
    no_limit = "remote.log.manager.fetch.max.bytes.per.second = 9223372036854775807   # no limit"
    assert no_limit in text


def test_the_pipelines_fencing_and_the_client_principals_are_parts_of_the_one_file() -> None:
    settings = settings_from_flat(
        {
            "transactional.id": "tiering-a",
            "transaction.timeout.ms": 30_000,
            "ssl.principal.mapping.rules": "RULE:^CN=(.*?),.*$/$1/L,DEFAULT",
            "sasl.oauthbearer.sub.claim.name": "client_id",
        }
    )
    assert settings.tiering.fencing_id(settings.metadata.topic_name) == "tiering-a"
    assert settings.tiering.transaction_timeout_ms == 30_000
    assert settings.principals.sasl_oauthbearer_sub_claim_name == "client_id"
    problems = problems_of(
        {
            "transaction.timeout.ms": 0,
            "ssl.principal.mapping.rules": "RULE:no-slashes",
            "remote.log.metadata.topic.replication.factor": 0,
        }
    )
    assert len(problems) == 3
    assert any(p.startswith("ssl.principal.mapping.rules: ") for p in problems)
    assert "transaction.timeout.ms must be at least 1, not 0" in problems
    assert any(p.startswith("remote.log.metadata.topic.replication.factor") for p in problems)


@pytest.mark.parametrize(
    ("text", "level"),
    [("", logging.WARNING), ('log.level = "DEBUG"\n', logging.DEBUG)],
)
def test_status_logs_from_warning_unless_the_file_sets_a_level(
    text: str, level: int, tmp_path: Path
) -> None:
    path = tmp_path / "tierproxy.toml"
    path.write_text(f'{text}log.format = "json"\n', encoding="utf-8")
    settings = settings_with_logs(path, default_level="WARNING")
    assert settings.proxy.log_format == "json"
    assert logging.getLogger("storage").level == level
    (handler,) = logging.getLogger().handlers
    assert isinstance(handler.formatter, JsonFormatter)


def test_a_file_with_problems_configures_no_logs(tmp_path: Path) -> None:
    handlers = list(logging.getLogger().handlers)
    path = tmp_path / "tierproxy.toml"
    path.write_text('log.format = "json"\nlog.level = "LOUD"\nsegment.byte = 1\n', "utf-8")
    with pytest.raises(ConfigProblems) as raised:
        settings_with_logs(path)
    assert len(raised.value.problems) == 2
    assert logging.getLogger().handlers == handlers
