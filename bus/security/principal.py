"""Who a connection is: Kafka principals, and `ssl.principal.mapping.rules` exactly as `SslPrincipalMapper`.

A PLAINTEXT connection, and an SSL one without a client certificate, is `User:ANONYMOUS`; a SASL one is
`User:<authorization id>`; an SSL one with a client certificate is `User:<name>` where the name comes from
the certificate's subject (RFC 2253, see `x500.py`) through the mapping rules. The rules are Java regular
expressions with Java replacement strings (`$1`), parsed and applied with Kafka's own splitting regex and its
escaping of back references, so rules copied from a Kafka broker map the same names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from bus.config.definitions import ConfigError
from bus.security.listener_config import ConfigView
from bus.security.x500 import subject_name

USER_TYPE = "User"
DEFAULT_SSL_PRINCIPAL_MAPPING_RULES = "DEFAULT"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """`type:name`, e.g. `User:alice`: the identity ACLs and quotas are matched against."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


def user(name: str) -> KafkaPrincipal:
    return KafkaPrincipal(USER_TYPE, name)


def parse_principal(text: str) -> KafkaPrincipal:
    """`User:alice` as Kafka's `SecurityUtils.parseKafkaPrincipal` reads it (split at the first `:`)."""
    principal_type, sep, name = text.partition(":")
    if not text or not sep:
        raise ValueError(f"expected a string in format principalType:principalName but got {text}")
    return KafkaPrincipal(principal_type, name)


class PrincipalMappingError(ValueError):
    """No rule maps the distinguished name, or a rule's replacement is invalid: the SSL handshake's peer is refused."""


_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


_JAVA_NAMED_GROUP = re.compile(r"(?<!\\)\(\?<([A-Za-z][A-Za-z0-9]*)>")


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    source: str = ""  # the pattern as written (Java syntax)
    replacement: str = ""
    to_lower: bool = False
    to_upper: bool = False

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        replacement = _escape_literal_back_references(self.replacement, self.pattern.groups)
        result = self.pattern.sub(lambda match: _java_replacement(replacement, match), dn)
        if self.to_lower:
            return result.lower()
        return result.upper() if self.to_upper else result

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        case = "/L" if self.to_lower else "/U" if self.to_upper else ""
        return f"RULE:{self.source}/{self.replacement}{case}"


class SslPrincipalMapper:
    """`ssl.principal.mapping.rules`: the first rule whose pattern matches the whole DN gives the name."""

    def __init__(self, rules: Sequence[_Rule]) -> None:
        self.rules = tuple(rules)

    @classmethod
    def from_rules(cls, text: str | None) -> SslPrincipalMapper:
        """Parse the rules (None: Kafka's default, DEFAULT); a bad rule raises ValueError with Kafka's message."""
        rules = text if text is not None else DEFAULT_SSL_PRINCIPAL_MAPPING_RULES
        return cls([rule for item in _split_rules(rules) if (rule := _parse_rule(item)) is not None])

    def name(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise PrincipalMappingError(f"No rules apply to {dn}, rules [{', '.join(map(str, self.rules))}]")

    def __repr__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(map(str, self.rules))}])"


def principal_mapper(config: ConfigView) -> SslPrincipalMapper:
    """The listener's `ssl.principal.mapping.rules`; a bad rule is a ConfigError naming the key."""
    rules: str = config.value("ssl.principal.mapping.rules")
    try:
        return SslPrincipalMapper.from_rules(rules)
    except ValueError as exc:
        raise ConfigError(f"Invalid value {rules} for configuration {config.source('ssl.principal.mapping.rules')}: "
                          f"{exc}") from None


def ssl_principal(peer_certificate: bytes | None, mapper: SslPrincipalMapper) -> KafkaPrincipal:
    """An SSL connection's principal from its client certificate (`getpeercert(binary_form=True)`), as Kafka's
    DefaultKafkaPrincipalBuilder: ANONYMOUS without one. Raises ValueError (a certificate we cannot read, or a DN
    no rule maps), which refuses the connection as Kafka's failed SSL authentication does."""
    if not peer_certificate:
        return ANONYMOUS
    return user(mapper.name(subject_name(peer_certificate)))


def _split_rules(text: str) -> list[str]:
    return [match.group(1) for match in _RULE_SPLITTER.finditer(text.strip())]


def _parse_rule(text: str) -> _Rule | None:
    match = _RULE_PARSER.match(text)
    if match is None:
        raise ValueError(f"Invalid rule: {text}")
    if match.end() != len(text):
        raise ValueError(f"Invalid rule: `{text}`, unmatched substring: `{text[match.end():]}`")
    if match.group(1) is not None:
        return _Rule(None)
    if match.group(2) is None:
        return None  # empty rules are ignored
    source = match.group(2)
    try:  # Java's and Python's regular expressions agree but for named groups: Java's (?<name>...) is (?P<name>...)
        pattern = re.compile(_JAVA_NAMED_GROUP.sub(r"(?P<\1>", source))
    except re.error as exc:
        raise ValueError(f"Invalid rule: `{text}`: {exc}") from None
    return _Rule(pattern, source, match.group(4), match.group(6) == "L", match.group(6) == "U")


def _escape_literal_back_references(replacement: str, groups: int) -> str:
    """Kafka's (from Apache NiFi): `$N` naming a group the pattern lacks becomes literal, `$12` falls back to `$1`.

    Positions come from the unescaped string while the escaped one grows, as in Kafka, so several literal
    references in one replacement come out exactly as Kafka renders them.
    """
    if groups == 0:
        return replacement
    value = replacement
    for match in _BACK_REFERENCE.finditer(replacement):
        number = match.group(1)
        if number.startswith("0"):
            continue
        index = int(number)
        while index > groups and index >= 10:
            index //= 10
        if index > groups:
            start = match.start(1)
            value = value[:start - 1] + "\\" + value[start - 1:]
    return value


def _java_replacement(replacement: str, match: re.Match[str]) -> str:
    """`replacement` expanded as Java's `Matcher.appendReplacement`: `\\x` is x, `$n`/`${name}` are groups."""
    out: list[str] = []
    i = 0
    while i < len(replacement):
        ch = replacement[i]
        i += 1
        if ch == "\\":
            if i == len(replacement):
                raise PrincipalMappingError("character to be escaped is missing")
            out.append(replacement[i])
            i += 1
        elif ch == "$":
            group, i = _group_reference(replacement, i, match)
            out.append(match.group(group) or "")
        else:
            out.append(ch)
    return "".join(out)


def _group_reference(replacement: str, i: int, match: re.Match[str]) -> tuple[int | str, int]:
    """The group a `$` at `i - 1` refers to, and where the replacement goes on: Java takes digits while valid."""
    if i == len(replacement):
        raise PrincipalMappingError("Illegal group reference: group index is missing")
    if replacement[i] == "{":
        end = replacement.find("}", i)
        name = replacement[i + 1:end] if end > i else ""
        if not name or name not in match.re.groupindex:
            raise PrincipalMappingError(f"No group with name {{{name}}}")
        return name, end + 1
    if not "0" <= replacement[i] <= "9":
        raise PrincipalMappingError("Illegal group reference")
    number = int(replacement[i])
    i += 1
    while i < len(replacement) and "0" <= replacement[i] <= "9":
        longer = number * 10 + int(replacement[i])
        if longer > match.re.groups:
            break
        number = longer
        i += 1
    if number > match.re.groups:
        raise PrincipalMappingError(f"No group {number}")
    return number, i
