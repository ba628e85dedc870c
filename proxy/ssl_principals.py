"""The principal Kafka gives a client that authenticates with its TLS certificate.

On an SSL listener with client authentication, Kafka's ``DefaultKafkaPrincipalBuilder`` names
the client ``User:`` + ``SslPrincipalMapper(ssl.principal.mapping.rules)`` applied to the
certificate's subject as Java's ``X500Principal.getName()`` writes it (RFC 2253). Both halves
are reproduced here, so that the proxy's quotas name the principal the broker would:

- :func:`distinguished_name` writes the subject as the JDK does: the RDNs last first, joined
  by ``,``; the attributes of a multi-valued RDN in their encoded order, joined by ``+``; the
  keywords CN, C, L, ST, O, OU, STREET, DC and UID, any other attribute as its dotted OID with
  ``#`` and the hex of its DER value (so is a value that is not a string); string values with
  ``,=+<>#;"\\`` escaped by a backslash, NUL as ``\\00``, and leading or trailing spaces (and
  carriage returns) escaped.
- :class:`SslPrincipalMapper` parses the rules with Kafka's own regular expressions (``DEFAULT``
  keeps the DN; ``RULE:pattern/replacement/`` with an optional ``L`` or ``U``) and applies the
  first rule whose pattern matches the whole DN, with Java's replacement syntax (``$n`` as the
  longest valid group number, ``\\x`` for a literal x). Patterns are Java regular expressions
  run by Python's :mod:`re` after :func:`java_pattern` has given them Java's meaning where the
  two differ in what a DN can hold: ``.`` and ``$`` stop at any line terminator (a certificate
  value may hold a carriage return), ``\\w``, ``\\d``, ``\\s`` and case folding are ASCII,
  ``\\Q...\\E`` quotes, ``(?<name>...)`` names a group. A pattern ``re`` cannot compile is
  refused with the rule named.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from cryptography import x509

__all__ = [
    "NoMatchingRuleError",
    "SslPrincipalMapper",
    "distinguished_name",
    "java_pattern",
    "java_replacement",
]

_KEYWORDS: Final = {
    "2.5.4.3": "CN",
    "2.5.4.6": "C",
    "2.5.4.7": "L",
    "2.5.4.8": "ST",
    "2.5.4.10": "O",
    "2.5.4.11": "OU",
    "2.5.4.9": "STREET",
    "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
"""The attribute keywords Java writes in RFC 2253 names (``AVAKeyword``)."""
_STRING_TAGS: Final = frozenset({0x0C, 0x13, 0x14, 0x16, 0x1B, 0x1E})
"""UTF8String, PrintableString, T61String, IA5String, GeneralString, BMPString: the values
Java writes as text (``AVA.isDerString``); it reads their content bytes as UTF-8."""
_ESCAPED: Final = frozenset(',=+<>#;"\\')

_RULE: Final = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_JAVA_SPACE: Final = r"[ \t\n\x0b\f\r]"
_RULE_SPLITTER: Final = re.compile(f"{_JAVA_SPACE}*({_RULE}){_JAVA_SPACE}*(,{_JAVA_SPACE}*|$)")
_RULE_PARSER: Final = re.compile(_RULE)
_BACK_REFERENCE: Final = re.compile(r"\$([0-9]+)")
_JAVA_NAMED_GROUP: Final = re.compile(r"\(\?<([A-Za-z][A-Za-z0-9]*)>")
_LINE_TERMINATORS: Final = "\\n\\r\\x85\\u2028\\u2029"
_JAVA_DOT: Final = f"[^{_LINE_TERMINATORS}]"
"""Java's ``.`` without DOTALL: anything but a line terminator."""
_JAVA_DOLLAR: Final = f"(?=(?:\\r\\n|[{_LINE_TERMINATORS}])?\\Z)"
"""Java's ``$`` without MULTILINE: the end, or before a line terminator that ends the input."""
_INLINE_FLAGS: Final = re.compile(r"\(\?[a-zA-Z]*[sm]")


class NoMatchingRuleError(ValueError):
    """No rule of ``ssl.principal.mapping.rules`` applies to a DN (Kafka refuses the client)."""


def distinguished_name(certificate: bytes) -> str:
    """The subject of a DER certificate as Java's ``X500Principal.getName()`` writes it.

    :raises ValueError: the certificate or its subject cannot be parsed.
    """
    subject = x509.load_der_x509_certificate(certificate).subject.public_bytes()
    rdns = [_rdn(rdn) for rdn in _elements(_content(subject, 0x30))]
    return ",".join(reversed(rdns))


def _rdn(encoded: bytes) -> str:
    return "+".join(_attribute(ava) for ava in _elements(_content(encoded, 0x31)))


def _attribute(encoded: bytes) -> str:
    oid_element, value = _elements(_content(encoded, 0x30))
    oid = _oid(_content(oid_element, 0x06))
    keyword = _KEYWORDS.get(oid)
    if keyword is None or value[0] not in _STRING_TAGS:
        return f"{keyword or oid}=#{value.hex()}"
    text = _content(value, value[0]).decode("utf-8", errors="replace")
    return f"{keyword}={_escape(text)}"


def _escape(text: str) -> str:
    escaped = "".join("\\00" if c == "\0" else ("\\" + c if c in _ESCAPED else c) for c in text)
    lead = len(escaped) - len(escaped.lstrip(" \r"))
    trail = len(escaped.rstrip(" \r"))
    if lead == len(escaped):  # all blank: each character is leading
        return "".join("\\" + c for c in escaped)
    return (
        "".join("\\" + c for c in escaped[:lead])
        + escaped[lead:trail]
        + "".join("\\" + c for c in escaped[trail:])
    )


def _elements(content: bytes) -> list[bytes]:
    """The DER elements (tag, length and content) one after another in ``content``."""
    found = []
    position = 0
    while position < len(content):
        size, header = _length(content, position)
        found.append(content[position : position + header + size])
        position += header + size
    return found


def _content(element: bytes, tag: int) -> bytes:
    if not element or element[0] != tag:
        raise ValueError(f"expected DER tag {tag:#x}")
    size, header = _length(element, 0)
    return element[header : header + size]


def _length(data: bytes, position: int) -> tuple[int, int]:
    """The content length of the element at ``position`` and its header's size."""
    if position + 2 > len(data):
        raise ValueError("truncated DER element")
    first = data[position + 1]
    if first < 0x80:
        size, header = first, 2
    else:
        count = first & 0x7F
        if count == 0 or position + 2 + count > len(data):
            raise ValueError("bad DER length")
        size = int.from_bytes(data[position + 2 : position + 2 + count], "big")
        header = 2 + count
    if position + header + size > len(data):
        raise ValueError("truncated DER element")
    return size, header


def _oid(content: bytes) -> str:
    arcs: list[int] = []
    value = 0
    for byte in content:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    if not arcs:
        raise ValueError("empty OID")
    first = min(arcs[0] // 40, 2)
    return ".".join(str(arc) for arc in (first, arcs[0] - 40 * first, *arcs[1:]))


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None
    """``None`` for DEFAULT."""
    replace: Callable[[re.Match[str]], str] | None
    case: str
    """``L``, ``U`` or empty."""
    text: str
    """As Kafka's ``Rule.toString`` writes it."""

    def apply(self, name: str) -> str | None:
        if self.pattern is None or self.replace is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        result = self.pattern.sub(self.replace, name)
        if self.case == "L":
            return result.lower()
        return result.upper() if self.case == "U" else result


class SslPrincipalMapper:
    """Kafka's ``ssl.principal.mapping.rules``: a DN to a principal name.

    :raises ValueError: for a rule Kafka refuses, or a pattern or replacement that cannot be
        used (the message names the rule).
    """

    def __init__(self, rules: str) -> None:
        self.rules = rules
        parsed = (_parse(rule) for rule in _split(rules))
        self._rules = [rule for rule in parsed if rule is not None]

    def name(self, distinguished_name: str) -> str:
        """The principal name of the first rule that applies.

        :raises NoMatchingRuleError: when none does.
        :raises ValueError: the first rule that matches has a replacement Java cannot apply
            (Kafka refuses such a client too).
        """
        for rule in self._rules:
            result = rule.apply(distinguished_name)
            if result is not None:
                return result
        raise NoMatchingRuleError(f"no rule of {self.rules!r} applies to {distinguished_name!r}")

    def __str__(self) -> str:
        """As Kafka's ``SslPrincipalMapper.toString`` writes it (the parsed rules)."""
        return f"SslPrincipalMapper(rules = [{', '.join(rule.text for rule in self._rules)}])"


def _split(rules: str) -> list[str]:
    return [match.group(1) for match in _RULE_SPLITTER.finditer(_java_trim(rules))]


def _java_trim(text: str) -> str:
    """Java's ``String.trim``: drop leading and trailing characters up to U+0020."""
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def _parse(rule: str) -> _Rule | None:
    match = _RULE_PARSER.match(rule)
    if match is None:
        raise ValueError(f"invalid rule: {rule}")
    if match.end() != len(rule):
        raise ValueError(f"invalid rule: `{rule}`, unmatched substring: `{rule[match.end() :]}`")
    if match.group(1) is not None:
        return _Rule(pattern=None, replace=None, case="", text="DEFAULT")
    if match.group(2) is None:
        return None  # empty rules are ignored
    try:
        pattern = java_pattern(match.group(2))
    except re.error as err:
        raise ValueError(f"rule {rule!r}: its pattern cannot be used: {err}") from err
    source, replacement, case = match.group(2), match.group(4), match.group(6)
    text = f"RULE:{source}/{replacement}" + (f"/{case}" if case else "")
    try:
        replace = java_replacement(
            _escape_literal_back_references(replacement, pattern.groups), pattern
        )
    except ValueError as err:
        # Kafka accepts the rule and fails each client it matches: so does this.
        replace = _refusal(f"rule {text}: {err}")
    return _Rule(pattern=pattern, replace=replace, case=case, text=text)


def java_pattern(source: str) -> re.Pattern[str]:
    """A Java regular expression compiled to mean in :mod:`re` what it means in Java (see the
    module docstring for what is translated).

    :raises re.error: when it cannot be compiled.
    """
    if _INLINE_FLAGS.search(source):  # DOTALL or MULTILINE set inline: re's meaning is Java's
        return re.compile(_JAVA_NAMED_GROUP.sub(r"(?P<\1>", source), re.ASCII)
    out: list[str] = []
    position, in_class = 0, False
    while position < len(source):
        char = source[position]
        if char == "\\" and source.startswith("\\Q", position):
            end = source.find("\\E", position + 2)
            end = len(source) if end < 0 else end
            out.append(re.escape(source[position + 2 : end]))
            position = end + 2
            continue
        if char == "\\":
            out.append(source[position : position + 2])
            position += 2
            continue
        if in_class:
            in_class = char != "]"
            out.append(char)
        elif char == "[":
            in_class = True
            out.append(char)
            if source.startswith("^]", position + 1) or source.startswith("]", position + 1):
                skip = 2 if source[position + 1] == "^" else 1
                out.append(source[position + 1 : position + 1 + skip])
                position += skip
        else:
            out.append({".": _JAVA_DOT, "$": _JAVA_DOLLAR}.get(char, char))
        position += 1
    return re.compile(_JAVA_NAMED_GROUP.sub(r"(?P<\1>", "".join(out)), re.ASCII)


def _refusal(reason: str) -> Callable[[re.Match[str]], str]:
    def refuse(match: re.Match[str]) -> str:
        raise ValueError(reason)

    return refuse


def _escape_literal_back_references(replacement: str, groups: int) -> str:
    """Kafka's ``escapeLiteralBackReferences``: a ``$n`` past the last group (after trimming
    digits while that names no group) becomes the literal text ``\\$n``.

    As in Kafka, the references are found in the replacement as given while the backslashes
    go into the text edited so far, at the positions found: after the first one, later ones
    land a character early. Reproduced, not mended, so the same rules name the same user.
    """
    if groups == 0:
        return replacement
    value = replacement
    for reference in _BACK_REFERENCE.finditer(replacement):
        digits = reference.group(1)
        if digits.startswith("0"):
            continue
        index = int(digits)
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            at = reference.start(1) - 1
            value = value[:at] + "\\" + value[at:]
    return value


def java_replacement(replacement: str, pattern: re.Pattern[str]) -> Callable[[re.Match[str]], str]:
    """What ``Matcher.appendReplacement`` writes for a match, as a function for ``re.sub``.

    :raises ValueError: where Java would throw: a trailing ``\\`` or ``$``, a ``$`` not
        followed by a digit or ``{name}``, a group number or name the pattern lacks.
    """
    parts: list[str | int] = []
    position = 0
    while position < len(replacement):
        char = replacement[position]
        if char == "\\":
            if position + 1 == len(replacement):
                raise ValueError(f"replacement {replacement!r}: character to be escaped is missing")
            parts.append(replacement[position + 1])
            position += 2
        elif char == "$":
            reference, position = _group_reference(replacement, position + 1, pattern)
            parts.append(reference)
        else:
            parts.append(char)
            position += 1

    def expand(match: re.Match[str]) -> str:
        return "".join(
            part if isinstance(part, str) else (match.group(part) or "") for part in parts
        )

    return expand


def _group_reference(replacement: str, position: int, pattern: re.Pattern[str]) -> tuple[int, int]:
    """The group a ``$`` at ``position - 1`` names, and where the text goes on."""
    if position == len(replacement):
        raise ValueError(f"replacement {replacement!r}: group index is missing")
    if replacement[position] == "{":
        end = replacement.find("}", position)
        name = replacement[position + 1 : end] if end > position else ""
        if name not in pattern.groupindex:
            raise ValueError(f"replacement {replacement!r}: no group named {name!r}")
        return pattern.groupindex[name], end + 1
    if not replacement[position].isdigit() or not replacement[position].isascii():
        raise ValueError(f"replacement {replacement!r}: illegal group reference")
    number = int(replacement[position])
    position += 1
    while position < len(replacement) and "0" <= replacement[position] <= "9":
        longer = number * 10 + int(replacement[position])
        if longer > pattern.groups:
            break
        number, position = longer, position + 1
    if number > pattern.groups:
        raise ValueError(f"replacement {replacement!r}: no group {number}")
    return number, position
