"""``ssl.principal.mapping.rules`` and RFC 2253 subject names, as Kafka and the JDK do them.

The first tests are the cases of Kafka's own ``SslPrincipalMapperTest``; the properties check
the rules' parsing and replacement against independent models, and the subject names against
``cryptography``'s RFC 4514 writer where Java's escaping agrees with it. The comparison with
Kafka's own classes on the same inputs is ``tests/integration/proxy/test_principal_names.py``.
"""

from __future__ import annotations

import re

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID, ObjectIdentifier
from hypothesis import assume, given
from hypothesis import strategies as st

from proxy.ssl_principals import (
    NoMatchingRuleError,
    SslPrincipalMapper,
    distinguished_name,
    java_pattern,
    java_replacement,
)
from tests.certificates import self_signed_der


@pytest.mark.parametrize(
    "rules",
    [
        "DEFAULT",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
        "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
        "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
    ],
)
def test_kafkas_valid_rules(rules: str) -> None:
    SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    "rules",
    [
        "default",
        "DEFAUL",
        "DEFAULT/L",
        "DEFAULT/U",
        "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
        "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    ],
)
def test_kafkas_invalid_rules(rules: str) -> None:
    with pytest.raises(ValueError, match="invalid rule"):
        SslPrincipalMapper(rules)


def test_kafkas_mapping_cases() -> None:
    mapper = SslPrincipalMapper(
        ", ".join(
            [
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
                "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
                "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
                "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
                "DEFAULT",
            ]
        )
    )

    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert (
        mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    )


@pytest.mark.parametrize(
    ("expected", "rules"),
    [
        ("[]", ""),
        ("[DEFAULT]", "DEFAULT"),
        ("[RULE:/]", "RULE://"),
        ("[RULE:/.*]", "RULE:/.*/"),
        ("[RULE:/.*/L]", "RULE:/.*/L"),
        ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
        ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
        ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
        ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
        (
            "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]",
            "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ",
        ),
        ("[]", ",   , , ,      , , ,   "),
        ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
        ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
        ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
        ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
        ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
        (
            "[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, "
            "/DEFAULT, DEFAULT]",
            "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, "
            "/DEFAULT/,DEFAULT",
        ),
    ],
)
def test_kafkas_rule_splitting(expected: str, rules: str) -> None:
    assert str(SslPrincipalMapper(rules)) == f"SslPrincipalMapper(rules = {expected})"


def test_kafkas_comma_with_whitespace() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")

    assert mapper.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


def test_a_dn_no_rule_applies_to_is_refused() -> None:
    with pytest.raises(NoMatchingRuleError, match="no rule of"):
        SslPrincipalMapper("RULE:^CN=a$/b/").name("CN=c")


@pytest.mark.parametrize(
    ("replacement", "name"),
    [
        ("$1@$4", "alice@$4"),  # a group past the last is literal text (Kafka's escaping)
        ("$12", "alice2"),  # the longest number that names a group
        ("\\$1", "$1"),
        ("x\\\\y", "x\\y"),
        ("$0!", "CN=alice,O=x!"),
    ],
)
def test_replacements_follow_java_and_kafka(replacement: str, name: str) -> None:
    mapper = SslPrincipalMapper(f"RULE:^CN=(\\w+),O=(x)$/{replacement}/")

    assert mapper.name("CN=alice,O=x") == name


def test_a_replacement_java_cannot_apply_refuses_the_clients_it_matches() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=a$/$1/,DEFAULT")  # no group 1: Java throws

    with pytest.raises(ValueError, match="no group 1"):
        mapper.name("CN=a")
    assert mapper.name("CN=b") == "CN=b"


_RULE_TEXT = st.text(st.characters(blacklist_characters="/\\\n\r"), max_size=8)
_VALUE = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0x2FF, blacklist_characters="\\"), max_size=12
)


@given(st.text(max_size=40))
def test_default_keeps_any_name(name: str) -> None:
    assert SslPrincipalMapper("DEFAULT").name(name) == name


@given(
    rules=st.lists(
        st.one_of(
            st.just("DEFAULT"),
            st.builds(
                lambda pattern, replacement, case: f"RULE:{pattern}/{replacement}/{case}",
                _RULE_TEXT.map(re.escape).filter(lambda p: "/" not in p and "\\" not in p),
                _RULE_TEXT.filter(lambda r: "$" not in r),
                st.sampled_from(["", "L", "U"]),
            ),
        ),
        max_size=4,
    ),
    spaces=st.lists(st.sampled_from(["", " ", "  ", "\t"]), min_size=2, max_size=2),
)
def test_rules_split_at_commas_whatever_the_spacing(rules: list[str], spaces: list[str]) -> None:
    separator = f"{spaces[0]},{spaces[1]}"
    parsed = str(SslPrincipalMapper(separator.join(rules)))

    expected = [rule[:-1] if rule.endswith("/") else rule for rule in rules]
    assert parsed == f"SslPrincipalMapper(rules = [{', '.join(expected)}])"


@given(
    groups=st.lists(st.text(alphabet="abc,= ", min_size=1, max_size=4), min_size=1, max_size=3),
    template=st.lists(st.one_of(st.text(alphabet="xyz@.", max_size=3), st.integers(0, 3))),
)
def test_java_group_references_match_pythons(groups: list[str], template: list[str | int]) -> None:
    pattern = re.compile("".join(f"({re.escape(group)})" for group in groups))
    text = "".join(groups)
    references = [part for part in template if isinstance(part, str) or part <= len(groups)]
    java = "".join(part if isinstance(part, str) else f"${part}" for part in references)
    python = "".join(part if isinstance(part, str) else f"\\g<{part}>" for part in references)
    assume(not re.search(r"\$[0-9][0-9]", java))  # Java would read the two digits as one

    assert pattern.sub(java_replacement(java, pattern), text) == pattern.sub(python, text)


_KEYWORD_OIDS = [
    NameOID.COMMON_NAME,
    NameOID.ORGANIZATION_NAME,
    NameOID.ORGANIZATIONAL_UNIT_NAME,
    NameOID.LOCALITY_NAME,
    NameOID.STATE_OR_PROVINCE_NAME,
    NameOID.STREET_ADDRESS,
    NameOID.DOMAIN_COMPONENT,
    NameOID.USER_ID,
]


@given(
    st.lists(st.tuples(st.sampled_from(_KEYWORD_OIDS), _VALUE.filter(bool)), min_size=1, max_size=5)
)
def test_names_are_written_as_rfc_4514_says_where_java_agrees(
    attributes: list[tuple[ObjectIdentifier, str]],
) -> None:
    # Java escapes "=" and "#" anywhere, and a carriage return at either end; RFC 4514 only a
    # leading "#": outside those, the two agree.
    attributes = [(oid, value) for oid, value in attributes if not set(value) & set("=#\r\0")]
    assume(attributes)
    name = x509.Name([x509.NameAttribute(oid, value) for oid, value in attributes])

    assert distinguished_name(self_signed_der(name)) == name.rfc4514_string()


def test_names_are_written_as_java_writes_them() -> None:
    name = x509.Name(
        [
            x509.RelativeDistinguishedName(
                [
                    x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, 'A+B, "Inc"'),
                ]
            ),
            x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.EMAIL_ADDRESS, "a@b.c")]),
            x509.RelativeDistinguishedName(
                [x509.NameAttribute(NameOID.COMMON_NAME, " #lead=and trail ")]
            ),
        ]
    )

    assert distinguished_name(self_signed_der(name)) == (
        "CN=\\ \\#lead\\=and trail\\ ,"
        "1.2.840.113549.1.9.1=#16056140622e63,"
        'C=US+O=A\\+B\\, \\"Inc\\"'
    )


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        ("a.c", "a\rc", False),  # Java's "." stops at every line terminator
        ("a.c", "a\u2028c", False),
        ("(?s)a.c", "a\rc", True),
        ("ab$.*", "ab\rx", False),
        ("\\w+", "é", False),  # ASCII classes
        ("(?i)É", "é", False),  # ASCII case folding
        ("\\Q.*\\E", ".*", True),
        ("\\Q.*\\E", "ab", False),
        ("[.$]+", ".$", True),
        ("[]a]+", "]a", True),
        ("(?<who>x)", "x", True),
    ],
)
def test_patterns_mean_what_they_mean_in_java(pattern: str, text: str, matches: bool) -> None:
    assert (java_pattern(pattern).fullmatch(text) is not None) == matches


def test_a_dollar_matches_before_any_line_terminator_that_ends_the_input() -> None:
    for ending in ("", "\n", "\r", "\r\n", "\u2028"):
        assert java_pattern("ab$").search(f"ab{ending}") is not None
    assert java_pattern("ab$").search("ab\r\rx") is None
