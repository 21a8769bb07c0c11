"""`sasl.jaas.config` parsing: Kafka's JaasConfig grammar (Java's StreamTokenizer) and its messages."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bus.security.jaas import (
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasConfigError,
    parse_jaas_config,
    parse_jaas_entry,
)


def test_plain_login_module_with_users() -> None:
    entry = parse_jaas_entry(
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
    assert entry.login_module == PLAIN_LOGIN_MODULE
    assert entry.control_flag == "required"
    assert dict(entry.options) == {"username": "admin", "password": "admin-secret", "user_admin": "admin-secret",
                                   "user_alice": "alice-secret"}


def test_scram_login_module_unquoted_values_and_line_breaks() -> None:
    entry = parse_jaas_entry(
        "org.apache.kafka.common.security.scram.ScramLoginModule REQUIRED\n"
        "    username=admin\n    password=admin-secret_$1.x ;\n")
    assert entry.login_module == SCRAM_LOGIN_MODULE
    assert entry.control_flag == "required"
    assert dict(entry.options) == {"username": "admin", "password": "admin-secret_$1.x"}


@pytest.mark.parametrize(("quoted", "value"), [
    (r'"a\"b"', 'a"b'),
    (r"'it\'s'", "it's"),
    (r'"back\\slash"', "back\\slash"),
    (r'"tab\there"', "tab\there"),
    (r'"\101\1010"', "AA0"),  # octal escapes: up to three digits from 0-3, two from 4-7
    (r'"\477"', "'7"),
    (r'"with space, comma; and = sign"', "with space, comma; and = sign"),
    ('"8192"', "8192"),
    ('""', ""),
])
def test_quoted_values_and_escapes(quoted: str, value: str) -> None:
    assert parse_jaas_entry(f"M required k={quoted};").options["k"] == value


def test_comments_are_skipped() -> None:
    entry = parse_jaas_entry("/* the broker's own user */ M required // next line\n username=\"u\" /* x */;")
    assert dict(entry.options) == {"username": "u"}


def test_several_entries_parse_but_sasl_jaas_config_takes_one() -> None:
    text = "A required x=\"1\"; B optional y=\"2\";"
    assert [e.login_module for e in parse_jaas_config(text)] == ["A", "B"]
    with pytest.raises(JaasConfigError, match="contains 2 login modules, should be 1 module"):
        parse_jaas_entry(text)


@pytest.mark.parametrize(("text", "message"), [
    ("", "Login module not specified in JAAS config"),
    ("  /* only a comment */ ", "Login module not specified in JAAS config"),
    ("M", "Login module control flag not specified in JAAS config"),
    ("M ;", "Login module control flag is not available in the JAAS config"),
    ("M sometimes;", "Invalid login module control flag 'sometimes' in JAAS config"),
    ('M required username="a"', "JAAS config entry not terminated by semi-colon"),
    ("M required username=;", "Value not specified for key 'username' in JAAS config"),
    ("M required username;", "Value not specified for key 'username' in JAAS config"),
    ("M required iterations=8192;", "Value not specified for key 'iterations' in JAAS config"),  # a number
    ("M required path=/etc/x;", "Value not specified for key 'path' in JAAS config"),  # `/` starts a comment
    ("M required =x;", "Option name not specified in JAAS config"),
])
def test_errors_use_kafkas_messages(text: str, message: str) -> None:
    with pytest.raises(JaasConfigError, match=message):
        parse_jaas_entry(text)


def test_errors_and_repr_never_show_a_password() -> None:
    with pytest.raises(JaasConfigError) as error:
        parse_jaas_entry('M required password="hunter2" user_bob')
    assert "hunter2" not in str(error.value)
    assert "hunter2" not in repr(parse_jaas_entry('M required password="hunter2";'))


def test_unicode_words_and_values() -> None:
    assert parse_jaas_entry("M required user_zoë=\"pässwörd\";").options["user_zoë"] == "pässwörd"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab1.-_$=;\"'\\/* \n\t\x85é中")), max_size=60))
def test_any_text_parses_or_fails_cleanly(text: str) -> None:
    """The tokenizer always ends, and the only error is JaasConfigError."""
    with contextlib.suppress(JaasConfigError):
        parse_jaas_config(text)
