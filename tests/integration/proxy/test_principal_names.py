"""tierproxy names SSL clients as Kafka does: compared with Kafka's and the JDK's own code.

``tests/java/PrincipalNames.java`` runs, on the Apache Kafka 4.3.1 jars and this machine's
JDK, ``X509Certificate.getSubjectX500Principal().getName()`` and Kafka's
``SslPrincipalMapper`` over a few hundred random certificates (every RFC 2253 keyword,
attributes without one, multi-valued RDNs, every string type, values full of characters to
escape, leading and trailing blanks, non-ASCII text) and rule sets (case folding, group
references past the last group, escapes, ``\\Q...\\E``, named groups, case-insensitive and
ASCII classes, rules that match nothing, replacements Java cannot apply), and
:func:`proxy.ssl_principals.distinguished_name` and
:class:`proxy.ssl_principals.SslPrincipalMapper` must give the same answer for every one.
"""

from __future__ import annotations

import base64
import datetime
import random
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.name import _ASN1Type
from cryptography.x509.oid import NameOID, ObjectIdentifier

from proxy.embedded import KAFKA_4, ensure_jars
from proxy.embedded.kafka_tools import run_tool
from proxy.ssl_principals import SslPrincipalMapper, distinguished_name

pytestmark = pytest.mark.integration

PRINCIPAL_NAMES = Path(__file__).parents[2] / "java" / "PrincipalNames.java"
CERTIFICATES = 550
RULE_SETS = (
    "DEFAULT",
    "",
    "RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L,DEFAULT",
    "RULE:^.*CN=([^,+]*).*$/$1/U",
    "RULE:^(.*?)=(.*?)[,+].*$/$2.$1@$4$12/, DEFAULT",
    "RULE:^C=(..).*$/\\$1 is $1/,RULE:^(.*)$/x$0y/L",
    "RULE:^O=.*$/$/,DEFAULT",
    "RULE:^nothing matches$/x/",
    "  RULE:([A-Z]*)/$1/U   ,RULE:(.*)/$1/,   DEFAULT  ",
    "RULE:(?i)^.*cn=(\\w+).*$/$1/,RULE:^\\QC=\\E(?<c>[^,]*)$/${c}/,DEFAULT",
    "RULE:^[^,]*[,]\\s?(.*)$/$1/L,RULE:^.*[$]$/dollar/",
)
_KEYWORD_OIDS = (
    NameOID.COMMON_NAME,
    NameOID.COUNTRY_NAME,
    NameOID.LOCALITY_NAME,
    NameOID.STATE_OR_PROVINCE_NAME,
    NameOID.ORGANIZATION_NAME,
    NameOID.ORGANIZATIONAL_UNIT_NAME,
    NameOID.STREET_ADDRESS,
    NameOID.DOMAIN_COMPONENT,
    NameOID.USER_ID,
)
_OTHER_OIDS = (
    NameOID.EMAIL_ADDRESS,
    NameOID.SERIAL_NUMBER,
    NameOID.TITLE,
    NameOID.GIVEN_NAME,
    ObjectIdentifier("1.3.6.1.4.1.99999.1"),
)
_STRING_TYPES = (
    _ASN1Type.UTF8String,
    _ASN1Type.PrintableString,
    _ASN1Type.IA5String,
    _ASN1Type.T61String,
    _ASN1Type.BMPString,
    _ASN1Type.UniversalString,
    _ASN1Type.VisibleString,
)
_PRINTABLE = "abcXYZ019 '()+,-./:=?"
_ANY = _PRINTABLE + '#;<>"\\\r\t=éß中😀 '


def random_value(rng: random.Random, string_type: _ASN1Type) -> str:
    ascii_only = string_type in (_ASN1Type.PrintableString, _ASN1Type.IA5String)
    alphabet = _PRINTABLE if string_type == _ASN1Type.PrintableString else _ANY
    if ascii_only or string_type in (_ASN1Type.T61String, _ASN1Type.VisibleString):
        alphabet = "".join(c for c in alphabet if c.isascii())
    if string_type == _ASN1Type.BMPString:
        alphabet = "".join(c for c in alphabet if ord(c) < 0x10000)
    value = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 10)))
    return value


def random_name(rng: random.Random) -> x509.Name:
    rdns = []
    for _ in range(rng.randint(1, 5)):
        attributes = []
        for _ in range(1 if rng.random() < 0.8 else 2):
            oid = rng.choice(_KEYWORD_OIDS if rng.random() < 0.8 else _OTHER_OIDS)
            if oid == NameOID.COUNTRY_NAME:
                attributes.append(x509.NameAttribute(oid, rng.choice(["US", "DE", "C,"])))
                continue
            string_type = rng.choice(_STRING_TYPES)
            value = random_value(rng, string_type)
            attributes.append(x509.NameAttribute(oid, value, _type=string_type))
        rdns.append(x509.RelativeDistinguishedName(list(dict.fromkeys(attributes))))
    return x509.Name(rdns)


def certificate(name: x509.Name, key: ec.EllipticCurvePrivateKey) -> bytes:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "issuer")]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
        .public_bytes(serialization.Encoding.DER)
    )


def ours(rules: str, der: bytes) -> str:
    """What tierproxy answers, in ``PrincipalNames.java``'s output format."""
    try:
        mapper = SslPrincipalMapper(rules)
    except ValueError:
        return "!"
    subject = distinguished_name(der)
    try:
        name = base64.b64encode(mapper.name(subject).encode()).decode()
    except ValueError:
        name = "!"
    return f"{base64.b64encode(subject.encode()).decode()} {name}"


def test_subjects_and_mapped_names_are_kafkas(tmp_path: Path) -> None:
    rng = random.Random(20261128)
    key = ec.generate_private_key(ec.SECP256R1())
    cases = [
        (rules, certificate(random_name(rng), key))
        for _ in range(CERTIFICATES // len(RULE_SETS))
        for rules in RULE_SETS
    ]
    cases_file = tmp_path / "cases"
    cases_file.write_text(
        "".join(
            f"{base64.b64encode(rules.encode()).decode()} {base64.b64encode(der).decode()}\n"
            for rules, der in cases
        ),
        encoding="utf-8",
    )

    run = run_tool(ensure_jars(KAFKA_4), str(PRINCIPAL_NAMES), str(cases_file), timeout_s=300)

    kafkas = run.stdout.splitlines()
    assert len(kafkas) == len(cases), run.stderr
    differences = [
        (rules, x509.load_der_x509_certificate(der).subject, kafka, mine)
        for (rules, der), kafka in zip(cases, kafkas, strict=True)
        if (mine := ours(rules, der)) != kafka
    ]
    assert differences == [], [(r, s, decode(k), decode(m)) for r, s, k, m in differences[:5]]


def decode(line: str) -> list[str]:
    return [base64.b64decode(part).decode() if part != "!" else part for part in line.split()]
