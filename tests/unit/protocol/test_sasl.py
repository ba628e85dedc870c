"""The SASL client exchanges against the RFCs' examples and an independent SCRAM server."""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import RemoteProtocolError
from protocol.sasl import (
    REAUTHENTICATION_WINDOW,
    OAuthBearerExchange,
    PlainExchange,
    ScramClient,
    reauthentication_delay,
)

# RFC 7677 section 3: user "user", password "pencil".
RFC_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_scram_sha_256_matches_rfc_7677() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_NONCE)

    assert client.respond(b"") == b"n,,n=user,r=" + RFC_NONCE.encode()
    assert client.respond(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert client.respond(RFC_SERVER_FINAL) is None


def test_a_server_signature_that_does_not_match_is_refused() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_NONCE)
    client.respond(b"")
    client.respond(RFC_SERVER_FIRST)

    with pytest.raises(RemoteProtocolError, match="signature is wrong"):
        client.respond(b"v=" + base64.b64encode(bytes(32)))


def test_a_server_error_is_reported() -> None:
    client = ScramClient("SCRAM-SHA-512", "user", "pencil", nonce=RFC_NONCE)
    client.respond(b"")
    client.respond(RFC_SERVER_FIRST)

    with pytest.raises(RemoteProtocolError, match="invalid-proof"):
        client.respond(b"e=invalid-proof")


@pytest.mark.parametrize(
    "server_first",
    [b"r=someone-elses,s=c2FsdA==,i=4096", b"r=" + RFC_NONCE.encode() + b",s=c2FsdA==,i=1"],
)
def test_a_server_nonce_must_extend_the_clients(server_first: bytes) -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_NONCE)
    client.respond(b"")

    with pytest.raises(RemoteProtocolError, match="nonce"):
        client.respond(server_first)


class ScramServer:
    """RFC 5802's server side, written from the RFC apart from the client under test."""

    def __init__(self, hash_name: str, password: str, salt: bytes, iterations: int) -> None:
        self.hash_name = hash_name
        self.salted = hashlib.pbkdf2_hmac(hash_name, password.encode(), salt, iterations)
        self.salt, self.iterations = salt, iterations

    def mac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.hash_name).digest()

    def exchange(self, client: ScramClient) -> bytes:
        """Run the exchange; return the user name the client sent."""
        first = client.respond(b"")
        assert first is not None and first.startswith(b"n,,")
        bare = first[3:]
        fields = dict(part.split(b"=", 1) for part in bare.split(b","))
        nonce = fields[b"r"] + b"server-part"
        server_first = b"r=%s,s=%s,i=%d" % (nonce, base64.b64encode(self.salt), self.iterations)
        final = client.respond(server_first)
        assert final is not None
        without_proof, proof = final.rsplit(b",p=", 1)
        auth_message = bare + b"," + server_first + b"," + without_proof
        stored_key = hashlib.new(self.hash_name, self.mac(self.salted, b"Client Key")).digest()
        signature = self.mac(stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof), signature, strict=True))
        assert hashlib.new(self.hash_name, client_key).digest() == stored_key, "wrong proof"
        server_signature = self.mac(self.mac(self.salted, b"Server Key"), auth_message)
        assert client.respond(b"v=" + base64.b64encode(server_signature)) is None
        return fields[b"n"]


@given(
    mechanism=st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512"]),
    username=st.text(min_size=1, max_size=20),
    password=st.text(max_size=20),
    salt=st.binary(min_size=1, max_size=32),
    iterations=st.integers(min_value=1, max_value=64),
)
def test_scram_proves_the_password_to_an_independent_server(
    mechanism: Literal["SCRAM-SHA-256", "SCRAM-SHA-512"],
    username: str,
    password: str,
    salt: bytes,
    iterations: int,
) -> None:
    server = ScramServer(
        mechanism.removeprefix("SCRAM-").replace("-", "").lower(), password, salt, iterations
    )

    sent_name = server.exchange(ScramClient(mechanism, username, password))

    assert sent_name.decode().replace("=2C", ",").replace("=3D", "=") == username


def test_plain_sends_one_message() -> None:
    exchange = PlainExchange("alice", "secret")

    assert exchange.respond(b"") == b"\0alice\0secret"
    assert exchange.respond(b"") is None


def test_oauthbearer_sends_the_token_and_reports_a_refusal() -> None:
    exchange = OAuthBearerExchange("eyJ.token")

    assert exchange.respond(b"") == b"n,,\x01auth=Bearer eyJ.token\x01\x01"
    with pytest.raises(RemoteProtocolError, match="invalid_token"):
        exchange.respond(b'{"status":"invalid_token"}')


@given(
    lifetime_ms=st.integers(min_value=1, max_value=2**63 - 1),
    jitter=st.floats(min_value=0, max_value=1, exclude_max=True),
)
def test_a_session_is_renewed_between_85_and_95_percent_of_its_lifetime(
    lifetime_ms: int, jitter: float
) -> None:
    delay = reauthentication_delay(lifetime_ms, jitter)

    low, high = REAUTHENTICATION_WINDOW
    assert delay is not None
    assert lifetime_ms * low / 1000 <= delay <= lifetime_ms * high / 1000
    assert delay < lifetime_ms / 1000


@given(lifetime_ms=st.integers(max_value=0), jitter=st.floats(min_value=0, max_value=1))
def test_a_session_without_lifetime_is_never_renewed(lifetime_ms: int, jitter: float) -> None:
    assert reauthentication_delay(lifetime_ms, jitter) is None
