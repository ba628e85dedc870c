"""The principal of each client connection: SASL users read from the login, OAUTHBEARER
subjects from the JWT, certificate subjects through ``ssl.principal.mapping.rules``."""

from __future__ import annotations

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from proxy.identities import ClientIdentities, ClientPrincipalConfig, user_of
from proxy.interceptors.base import ConnectionInfo
from proxy.logs import LogfmtFormatter
from storage.config import ConfigError
from tests.certificates import self_signed_der
from tests.integration.tiered.token_endpoint import unsecured_jwt


def bearer(claims: dict[str, object], *, authzid: str = "") -> bytes:
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    return f"{gs2}\x01host=kafka\x01auth=Bearer {unsecured_jwt(claims)}\x01\x01".encode()


def connection(connection_id: int, peer_certificate: bytes | None = None) -> ConnectionInfo:
    return ConnectionInfo(
        connection_id=connection_id,
        client="1.2.3.4:5",
        node_id=1,
        peer_certificate=peer_certificate,
    )


ALICE = x509.Name(
    [
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example"),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
        x509.NameAttribute(NameOID.COMMON_NAME, "Alice"),
    ]
)


@pytest.mark.parametrize(
    ("mechanism", "first_message", "user"),
    [
        ("PLAIN", b"\0alice\0secret", "alice"),
        ("PLAIN", b"admin\0alice\0secret", "alice"),
        ("SCRAM-SHA-512", b"n,,n=al=2Cice=3D,r=fyko+d2lbbFgONRv9qkxdawL", "al,ice="),
        ("OAUTHBEARER", bearer({"sub": "svc-orders", "exp": 2}), "svc-orders"),
        ("OAUTHBEARER", bearer({"sub": "svc", "exp": 2}, authzid="svc"), "svc"),
        ("OAUTHBEARER", b"n,,\x01auth=Bearer not-a-jwt\x01\x01", None),
        ("OAUTHBEARER", bearer({"exp": 2}), None),
        ("OAUTHBEARER", bearer({"sub": 7, "exp": 2}), None),
        ("OAUTHBEARER", b"n,,\x01auth=Bearer a.%%%.\x01\x01", None),
        ("GSSAPI", b"\x05\x04\x00\xff" + bytes(12) + b"\x01\x00\x10\x00alice@EXAMPLE.COM", None),
        ("PLAIN", b"\xff\xfe", None),
    ],
)
def test_the_user_comes_from_the_first_client_message(
    mechanism: str, first_message: bytes, user: str | None
) -> None:
    assert user_of(mechanism, first_message) == user


def test_the_oauthbearer_claim_is_the_configured_one() -> None:
    message = bearer({"sub": "machine-7", "preferred_username": "orders", "exp": 2})

    assert user_of("OAUTHBEARER", message, sub_claim="preferred_username") == "orders"


def test_identities_are_per_connection_and_forgotten() -> None:
    identities = ClientIdentities()
    identities.mechanism_chosen(7, "scram-sha-256")
    identities.authenticating(7, b"n,,n=bob,r=abc")
    identities.authenticating(7, b"c=biws,r=abc,p=proof")  # the final message changes nothing
    assert identities.principal(connection(7)) == "User:bob"
    assert identities.principal(connection(8)) is None
    identities.forget(7)
    assert identities.principal(connection(7)) is None


def test_a_certificate_names_a_connection_without_sasl_through_the_mapping_rules() -> None:
    identities = ClientIdentities(
        ClientPrincipalConfig(
            ssl_principal_mapping_rules="RULE:^CN=([^,]*),OU=eng,.*$/$1/L, DEFAULT"
        )
    )
    bob = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bob")])

    assert identities.principal(connection(1, self_signed_der(ALICE))) == "User:alice"
    assert identities.principal(connection(2, self_signed_der(bob))) == "User:CN=bob"
    assert identities.principal(connection(3)) is None


def test_sasl_names_a_connection_even_with_a_certificate() -> None:
    identities = ClientIdentities()
    identities.mechanism_chosen(1, "PLAIN")
    identities.authenticating(1, b"\0carol\0pw")

    assert identities.principal(connection(1, self_signed_der(ALICE))) == "User:carol"


def test_a_sasl_login_whose_user_cannot_be_read_is_not_named_by_its_certificate() -> None:
    identities = ClientIdentities()
    identities.mechanism_chosen(1, "GSSAPI")
    identities.authenticating(1, b"\x60\x82")

    assert identities.principal(connection(1, self_signed_der(ALICE))) is None


def test_a_dn_no_rule_maps_is_logged_and_unknown(caplog: pytest.LogCaptureFixture) -> None:
    identities = ClientIdentities(
        ClientPrincipalConfig(ssl_principal_mapping_rules="RULE:^CN=x$/x/")
    )

    assert identities.principal(connection(4, self_signed_der(ALICE))) is None
    (record,) = caplog.records
    line = LogfmtFormatter().format(record)
    assert "event=identity.unknown conn=4" in line
    assert "no rule of 'RULE:^CN=x$/x/' applies to 'CN=Alice,OU=eng,O=Example'" in line


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"ssl_principal_mapping_rules": "RULE:^CN=(.*$/$1/"}, "cannot be used"),
        ({"ssl_principal_mapping_rules": "rule:(.*)/x/"}, "invalid rule"),
        ({"sasl_oauthbearer_sub_claim_name": " "}, "must not be blank"),
    ],
)
def test_settings_kafka_would_refuse_are_refused(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ClientPrincipalConfig(**settings)
