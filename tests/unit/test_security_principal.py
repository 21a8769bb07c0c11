"""Principals, `ssl.principal.mapping.rules` (cases from Kafka's SslPrincipalMapperTest) and the RFC 2253 subject
Java renders from a certificate."""

from __future__ import annotations

import contextlib
import re

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from bus.config.definitions import ConfigError
from bus.security.listener_config import listener_config
from bus.security.principal import (
    ANONYMOUS,
    KafkaPrincipal,
    PrincipalMappingError,
    SslPrincipalMapper,
    parse_principal,
    principal_mapper,
    ssl_principal,
)
from bus.security.x500 import CertificateError, subject_name
from testkit.tls import Authority, name

_CERT_DER = Authority.create("truncated").identity.der()


def test_principals() -> None:
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    assert parse_principal("User:CN=alice,O=city") == KafkaPrincipal("User", "CN=alice,O=city")
    assert parse_principal("Group:") == KafkaPrincipal("Group", "")
    for bad in ("", "alice"):
        with pytest.raises(ValueError, match="expected a string in format principalType:principalName"):
            parse_principal(bad)


@pytest.mark.parametrize("rules", [
    "DEFAULT",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
    "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
])
def test_valid_rules(rules: str) -> None:
    SslPrincipalMapper.from_rules(rules)


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U",
    "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
])
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(ValueError, match="Invalid rule"):
        SslPrincipalMapper.from_rules(rules)


def test_mapping() -> None:
    mapper = SslPrincipalMapper.from_rules(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT",
    ]))
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


@pytest.mark.parametrize(("expected", "rules"), [
    ("[]", ""),
    ("[DEFAULT]", "DEFAULT"),
    ("[RULE:/]", "RULE://"),
    ("[RULE:/.*]", "RULE:/.*/"),
    ("[RULE:/.*/L]", "RULE:/.*/L"),
    ("[RULE:/, DEFAULT]", "RULE://,DEFAULT"),
    ("[RULE:/, DEFAULT]", "  RULE:// ,  DEFAULT  "),
    ("[RULE:   /     , DEFAULT]", "  RULE:   /     / ,  DEFAULT  "),
    ("[RULE:  /     /U, DEFAULT]", "  RULE:  /     /U   ,DEFAULT  "),
    ("[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]", "  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  "),
    # empty rules are ignored
    ("[]", ",   , , ,      , , ,   "),
    ("[RULE:/, DEFAULT]", ",,RULE://,,,DEFAULT,,"),
    ("[RULE: /   , DEFAULT]", ",  , RULE: /   /    ,,,   DEFAULT, ,   "),
    ("[RULE:   /  /U, DEFAULT]", "     ,  , RULE:   /  /U    ,,  ,DEFAULT, ,"),
    # escape sequences
    ("[RULE:\\/\\\\\\(\\)\\n\\t/\\/\\/]", "RULE:\\/\\\\\\(\\)\\n\\t/\\/\\//"),
    ("[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]", "RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/"),
    # rules rule
    ("[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]",
     "RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT"),
])
def test_rules_splitting(expected: str, rules: str) -> None:
    assert repr(SslPrincipalMapper.from_rules(rules)) == f"SslPrincipalMapper(rules = {expected})"


def test_comma_with_whitespace() -> None:
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


@pytest.mark.parametrize(("replacement", "expected"), [
    ("$1@$2", "alice@ops"),
    ("$3x", "$3x"),  # a group the pattern lacks is literal (Kafka's escapeLiteralBackReferences)
    ("$12", "alice2"),  # $12 with two groups is $1 then "2"
    ("\\$1", "$1"),
    ("$0", "CN=alice,OU=ops"),
    ("${user}", "alice"),
])
def test_java_replacements(replacement: str, expected: str) -> None:
    mapper = SslPrincipalMapper.from_rules(f"RULE:^CN=(?<user>[^,]*),OU=(.*)$/{replacement}/")  # Java syntax
    assert mapper.name("CN=alice,OU=ops") == expected


def test_no_rule_matches() -> None:
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=(.*),OU=ServiceUsers$/$1/")
    with pytest.raises(PrincipalMappingError, match="No rules apply to CN=bob,OU=People, rules \\[RULE:"):
        mapper.name("CN=bob,OU=People")
    with pytest.raises(PrincipalMappingError, match="Illegal group reference"):
        SslPrincipalMapper.from_rules("RULE:^(.*)$/$x/").name("CN=a")


def test_mapper_from_listener_config() -> None:
    props = {"listener.name.ssl.ssl.principal.mapping.rules": "RULE:^CN=([^,]*).*$/$1/L"}
    assert principal_mapper(listener_config(props, "SSL")).name("CN=Alice,O=city") == "alice"
    assert principal_mapper(listener_config({}, "SSL")).name("CN=Alice,O=city") == "CN=Alice,O=city"
    with pytest.raises(ConfigError, match=re.escape("Invalid value RULE:(/x/ for configuration "
                                                    "listener.name.ssl.ssl.principal.mapping.rules: Invalid rule")):
        principal_mapper(listener_config({"listener.name.ssl.ssl.principal.mapping.rules": "RULE:(/x/"}, "SSL"))


@pytest.fixture(scope="module")
def ca() -> Authority:
    return Authority.create("principal test CA")


@pytest.mark.parametrize(("subject", "dn"), [
    (name((NameOID.ORGANIZATION_NAME, "city"), (NameOID.ORGANIZATIONAL_UNIT_NAME, "ops"),
          (NameOID.COMMON_NAME, "alice")), "CN=alice,OU=ops,O=city"),
    (name((NameOID.COUNTRY_NAME, "US"), (NameOID.STATE_OR_PROVINCE_NAME, "MD"), (NameOID.LOCALITY_NAME, "Fulton"),
          (NameOID.STREET_ADDRESS, "1 Main St"), (NameOID.DOMAIN_COMPONENT, "example"), (NameOID.USER_ID, "u1"),
          (NameOID.COMMON_NAME, "Duke")),
     "CN=Duke,UID=u1,DC=example,STREET=1 Main St,L=Fulton,ST=MD,C=US"),
    (name((NameOID.COMMON_NAME, 'Tkac, Adam+1 <x>; "q" \\ a=b #c')),
     'CN=Tkac\\, Adam\\+1 \\<x\\>\\; \\"q\\" \\\\ a\\=b \\#c'),
    (name((NameOID.COMMON_NAME, "#lead and trail ")), "CN=\\#lead and trail\\ "),
    (name((NameOID.COMMON_NAME, "  two")), "CN=\\ \\ two"),
    (name((NameOID.COMMON_NAME, "zoë")), "CN=zoë"),
    # Not an RFC 2253 keyword: the OID and the hex of the value's DER (an IA5String), as Java renders it.
    (name((NameOID.COMMON_NAME, "alice"), (NameOID.EMAIL_ADDRESS, "a@b.c")),
     "1.2.840.113549.1.9.1=#1605614062 2e63".replace(" ", "") + ",CN=alice"),
    (name((NameOID.SERIAL_NUMBER, "42"), (NameOID.TITLE, "boss")), "2.5.4.12=#0c04626f7373,2.5.4.5=#13023432"),
])
def test_subject_as_java_renders_it(ca: Authority, subject: x509.Name, dn: str) -> None:
    assert subject_name(ca.issue(subject).der()) == dn


def test_multi_valued_rdn(ca: Authority) -> None:
    subject = x509.Name([x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "ops"),
                                                         x509.NameAttribute(NameOID.COMMON_NAME, "alice")]),
                         x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "city")])])
    rdn = subject_name(ca.issue(subject).der()).split(",")
    assert rdn[0] == "O=city" and sorted(rdn[1].split("+")) == ["CN=alice", "OU=ops"]


def test_ssl_principal(ca: Authority) -> None:
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=([^,]*),OU=ops.*$/$1/,DEFAULT")
    identity = ca.issue(name((NameOID.ORGANIZATION_NAME, "city"), (NameOID.ORGANIZATIONAL_UNIT_NAME, "ops"),
                             (NameOID.COMMON_NAME, "alice")))
    assert ssl_principal(identity.der(), mapper) == KafkaPrincipal("User", "alice")
    assert ssl_principal(None, mapper) is ANONYMOUS
    assert ssl_principal(identity.der(), SslPrincipalMapper.from_rules(None)).name == "CN=alice,OU=ops,O=city"


@pytest.mark.parametrize("der", [b"", b"\x30", b"\x30\x05\x02\x01", b"\x04\x00", b"\x30\x84\xff\xff\xff\xff"])
def test_garbage_certificates(der: bytes) -> None:
    with pytest.raises(CertificateError):
        subject_name(der)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120) | st.builds(lambda der, cut: der[:cut], st.just(_CERT_DER), st.integers(0, 400)))
def test_any_bytes_read_or_fail_cleanly(der: bytes) -> None:
    with contextlib.suppress(CertificateError):
        subject_name(der)
