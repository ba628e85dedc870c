"""A certificate authority made by the tests, and the certificates it signs.

TLS tests need what an operator has: a private CA, a broker certificate naming the broker's
host, and a certificate for the proxy's own listener. :func:`make_pki` writes them as PEM
files, in the forms each side reads: Python's :mod:`ssl` and librdkafka take a certificate and
its key as two files, Kafka's ``ssl.keystore.type=PEM`` takes one file with the PKCS#8 key and
the chain. Keys are EC P-256, which every side accepts and which is quick to generate.

Besides the valid set there is a certificate whose names match no test host (for hostname
verification), a second CA that signed nothing the servers present (for a wrong trust
anchor), and two client certificates with the subjects of :data:`CLIENT_SUBJECTS` (for
``ssl.client.auth`` and the principals Kafka names after them).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CLIENT_SUBJECTS", "KeyPair", "Pki", "make_pki", "self_signed_der"]

LOOPBACK_NAMES = ("localhost", "127.0.0.1")
"""The names a certificate for a test server carries: every test dials one of them."""

_VALIDITY = datetime.timedelta(days=2)

CLIENT_SUBJECTS = {
    "alice": x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example"),
            x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
            x509.NameAttribute(NameOID.COMMON_NAME, "Alice"),
        ]
    ),
    "bob": x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Other"),
            x509.NameAttribute(NameOID.COMMON_NAME, "bob"),
        ]
    ),
}
"""Subjects of the client certificates; Java writes them ``CN=Alice,OU=eng,O=Example`` and
``CN=bob,O=Other`` (the last RDN first)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyPair:
    """A signed certificate and its private key, as PEM files."""

    certificate: Path
    """The certificate followed by the CA's: the chain a server presents."""
    key: Path
    """The unencrypted PKCS#8 private key."""
    keystore: Path
    """Key and chain in one file: Kafka's ``ssl.keystore.location`` with type PEM."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Pki:
    """Everything :func:`make_pki` wrote."""

    ca: Path
    """The CA certificate that signed ``broker``, ``proxy`` and ``mismatched``."""
    broker: KeyPair
    proxy: KeyPair
    mismatched: KeyPair
    """Signed by ``ca``, but for ``elsewhere.invalid`` only: fails hostname verification."""
    stranger_ca: Path
    """A second CA that signed none of them: trusting only it must fail."""
    clients: dict[str, KeyPair]
    """Client certificates signed by ``ca``, by the names of :data:`CLIENT_SUBJECTS`."""


@dataclass(frozen=True, slots=True)
class _Authority:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def make_pki(directory: Path) -> Pki:
    """Write a CA, the broker's, the proxy's and a mismatched certificate into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    authority = _authority("tierproxy test CA")
    ca = _write(directory / "ca.pem", _pem(authority.certificate))
    stranger = _authority("stranger CA")
    return Pki(
        ca=ca,
        broker=_issue(directory, "broker", authority, LOOPBACK_NAMES),
        proxy=_issue(directory, "proxy", authority, LOOPBACK_NAMES),
        mismatched=_issue(directory, "mismatched", authority, ("elsewhere.invalid",)),
        stranger_ca=_write(directory / "stranger-ca.pem", _pem(stranger.certificate)),
        clients={
            name: _issue(directory, name, authority, (), subject=subject)
            for name, subject in CLIENT_SUBJECTS.items()
        },
    )


def self_signed_der(subject: x509.Name) -> bytes:
    """A certificate of ``subject``, signed by its own new key, valid from now for a day, in
    DER (as a TLS peer presents it)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
        .public_bytes(serialization.Encoding.DER)
    )


def _authority(name: str) -> _Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    certificate = (
        _builder(subject, subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _Authority(certificate, key)


def _issue(
    directory: Path,
    name: str,
    authority: _Authority,
    hosts: tuple[str, ...],
    *,
    subject: x509.Name | None = None,
) -> KeyPair:
    """A certificate for ``hosts`` (its subject the first of them), or without host names
    for a client with ``subject``."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = subject or x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    builder = _builder(subject, authority.certificate.subject, key.public_key())
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_general_name(h) for h in hosts]), False
        )
    certificate = (
        builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(authority.key.public_key()),
            critical=False,
        )
        .sign(authority.key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    chain = _pem(certificate) + _pem(authority.certificate)
    return KeyPair(
        certificate=_write(directory / f"{name}.pem", chain),
        key=_write(directory / f"{name}-key.pem", key_pem),
        keystore=_write(directory / f"{name}-keystore.pem", key_pem + chain),
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
    )


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _pem(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def _write(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path
