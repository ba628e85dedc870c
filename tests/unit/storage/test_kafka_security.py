"""The ``upstream.*`` security settings: validation, secret sources, and what never prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from storage.config import ConfigError, from_settings
from storage.kafka_security import CLIENT_SECRET_ENV, PASSWORD_ENV, KafkaSecurityConfig


def test_the_default_is_plaintext_without_login() -> None:
    config = KafkaSecurityConfig()

    assert (config.tls, config.sasl, config.ssl_context()) == (False, False, None)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"upstream.security.protocol": "TLS"}, "upstream.security.protocol must be one of"),
        ({"upstream.sasl.mechanism": "PLAIN"}, "use SASL_PLAINTEXT or SASL_SSL"),
        ({"upstream.security.protocol": "SASL_SSL"}, "needs upstream.sasl.mechanism"),
        (
            {"upstream.security.protocol": "SASL_PLAINTEXT", "upstream.sasl.mechanism": "GSSAPI"},
            "not 'GSSAPI'",
        ),
        (
            {"upstream.security.protocol": "SASL_PLAINTEXT", "upstream.sasl.mechanism": "PLAIN"},
            "PLAIN needs upstream.sasl.username",
        ),
        (
            {
                "upstream.security.protocol": "SASL_PLAINTEXT",
                "upstream.sasl.mechanism": "OAUTHBEARER",
            },
            "token.endpoint.url",
        ),
        ({"upstream.ssl.endpoint.identification.algorithm": "dns"}, "https"),
    ],
)
def test_settings_that_do_not_fit_say_which(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        from_settings(KafkaSecurityConfig, settings)


def scram(**more: str) -> KafkaSecurityConfig:
    return from_settings(
        KafkaSecurityConfig,
        {
            "upstream.security.protocol": "SASL_PLAINTEXT",
            "upstream.sasl.mechanism": "SCRAM-SHA-512",
            "upstream.sasl.username": "tiering",
            **more,
        },
    )


def test_the_password_comes_from_the_file_then_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "password"
    secret.write_text("from-file\n", encoding="utf-8")
    monkeypatch.setenv(PASSWORD_ENV, "from-env")

    assert scram(**{"upstream.sasl.password": "inline"}).with_secrets_resolved().sasl_password == (
        "inline"
    )
    from_file = scram(**{"upstream.sasl.password.file": str(secret)})
    assert from_file.with_secrets_resolved().sasl_password == "from-file"
    assert scram().with_secrets_resolved().sasl_password == "from-env"


def test_a_missing_password_or_unreadable_file_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PASSWORD_ENV, raising=False)

    with pytest.raises(ConfigError, match=re.escape(PASSWORD_ENV)):
        scram().with_secrets_resolved()
    with pytest.raises(ConfigError, match=re.escape("upstream.sasl.password.file")):
        scram(**{"upstream.sasl.password.file": str(tmp_path / "absent")}).with_secrets_resolved()


def test_secrets_never_show_in_repr_or_description(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CLIENT_SECRET_ENV, "client-secret-value")
    config = scram(**{"upstream.sasl.password": "hunter2", "upstream.ssl.key.password": "k3y"})
    resolved = config.with_secrets_resolved()

    for text in (repr(config), repr(resolved), str(resolved), resolved.describe()):
        assert "hunter2" not in text
        assert "k3y" not in text
        assert "client-secret-value" not in text
    assert resolved.describe() == "SASL_PLAINTEXT SCRAM-SHA-512 as tiering"


def test_tls_verifies_the_broker_and_its_name_by_default() -> None:
    context = from_settings(
        KafkaSecurityConfig, {"upstream.security.protocol": "SSL"}
    ).ssl_context()

    assert context is not None
    assert context.check_hostname
