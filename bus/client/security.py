"""How a client secures its connections: Kafka's `security.protocol`, `sasl.*` and `ssl.*` configs, resolved once.

A producer, consumer or admin client resolves its config into one `ClientSecurity` at construction (a bad value is
a `ConfigError` naming the key then, not a failure at the first connection), and every connection it opens uses it:
TLS with `ssl_context` (SSL, SASL_SSL), then SASL with `sasl` (SASL_PLAINTEXT, SASL_SSL).

Credentials come from Kafka's `sasl.jaas.config` (the PlainLoginModule or ScramLoginModule line with `username`
and `password` options, as Java clients take them) or librdkafka's `sasl.username` / `sasl.password`, so a
config written for either client works; `sasl.jaas.config` wins when both are set. The TLS settings are Kafka's
(`ssl.truststore.*`, `ssl.keystore.*` in PEM, `ssl.endpoint.identification.algorithm`, `ssl.protocol`, ...), built
by `bus.security.tls`. No message here ever holds a password or a key.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bus.client.errors import ConfigError
from bus.config.definitions import ConfigError as SettingError
from bus.security.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, JaasConfigError, parse_jaas_entry
from bus.security.sasl_login import SaslCredentials
from bus.security.scram import SCRAM_MECHANISMS

PLAIN = "PLAIN"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
DEFAULT_SASL_MECHANISM = "GSSAPI"  # Kafka's and librdkafka's default, which this client does not speak
_LOGIN_MODULES = (PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE)
# The client's ssl.* keys; unset ones take Kafka's client defaults (bus.security.tls reads them).
SSL_KEYS = ("ssl.protocol", "ssl.enabled.protocols", "ssl.cipher.suites", "ssl.endpoint.identification.algorithm",
            "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.certificates", "ssl.truststore.password",
            "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.key", "ssl.keystore.certificate.chain",
            "ssl.keystore.password", "ssl.key.password")
# Keys whose values are secrets: never printed (Kafka's PASSWORD config type).
SECRET_KEYS = frozenset({"sasl.jaas.config", "sasl.password", "ssl.truststore.certificates", "ssl.truststore.password",
                         "ssl.keystore.key", "ssl.keystore.certificate.chain", "ssl.keystore.password",
                         "ssl.key.password"})


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """`ssl_context` when the protocol runs over TLS, `sasl` when it authenticates with SASL."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslCredentials | None = None


PLAINTEXT = ClientSecurity()


def client_security(conf: Mapping[str, Any]) -> ClientSecurity:
    """The security of a client whose config (Java key names) is `conf`; a ConfigError names the key to fix."""
    protocol = str(conf.get("security.protocol") or "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(f"Invalid value {protocol} for configuration security.protocol: must be one of "
                          f"{', '.join(SECURITY_PROTOCOLS)}")
    if protocol == "PLAINTEXT":
        return PLAINTEXT
    context = _ssl_context(conf) if protocol.endswith("SSL") else None
    credentials = _sasl_credentials(conf, protocol) if protocol.startswith("SASL") else None
    return ClientSecurity(protocol, context, credentials)


def _ssl_context(conf: Mapping[str, Any]) -> ssl.SSLContext:
    from bus.security.tls import client_ssl_context

    given = {key: _text(conf[key]) for key in SSL_KEYS if conf.get(key) is not None}
    try:
        return client_ssl_context(given)
    except SettingError as exc:
        raise ConfigError(str(exc)) from None


def _text(value: Any) -> str:
    """A config value as Kafka's properties hold it (lists, as in `ssl.enabled.protocols`, comma-joined)."""
    return ",".join(value) if isinstance(value, list | tuple) else str(value)


def _sasl_credentials(conf: Mapping[str, Any], protocol: str) -> SaslCredentials:
    mechanism = str(conf.get("sasl.mechanism") or DEFAULT_SASL_MECHANISM)
    if mechanism not in SASL_MECHANISMS:
        raise ConfigError(f"Invalid value {mechanism} for configuration sasl.mechanism: this client supports "
                          f"{', '.join(SASL_MECHANISMS)}")
    jaas = conf.get("sasl.jaas.config")
    if jaas:
        return SaslCredentials(mechanism, *_jaas_login(str(jaas)))
    username, password = conf.get("sasl.username"), conf.get("sasl.password")
    if username is None or password is None:
        raise ConfigError(f"security.protocol {protocol} needs credentials: sasl.jaas.config (Kafka's "
                          "PlainLoginModule or ScramLoginModule with username and password) or sasl.username and "
                          "sasl.password")
    return SaslCredentials(mechanism, str(username), str(password))


def _jaas_login(text: str) -> tuple[str, str]:
    """The username and password of a `sasl.jaas.config` login module."""
    try:
        entry = parse_jaas_entry(text)
    except JaasConfigError as exc:
        raise ConfigError(f"Invalid value for configuration sasl.jaas.config: {exc}") from None
    if entry.login_module not in _LOGIN_MODULES:
        raise ConfigError(f"Invalid value for configuration sasl.jaas.config: login module {entry.login_module} is "
                          f"not supported (use {' or '.join(_LOGIN_MODULES)})")
    missing = [option for option in ("username", "password") if option not in entry.options]
    if missing:
        raise ConfigError(f"Invalid value for configuration sasl.jaas.config: the login module has no "
                          f"{' or '.join(missing)} option")
    return entry.options["username"], entry.options["password"]
