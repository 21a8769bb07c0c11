"""A SASL listener's setup from its configs: the mechanisms it offers and a new SASL server per connection.

As on a Kafka broker, each mechanism in `sasl.enabled.mechanisms` needs its JAAS login module in
`listener.name.<listener>.<mechanism>.sasl.jaas.config` (Kafka ignores a plain `sasl.jaas.config` on a broker,
with a warning; here it is an error naming the key to set, since there is no static JAAS file to fall back
on). PLAIN's users are the login module's `user_<name>="<password>"` options; SCRAM's credentials come from
the credential store (the metadata image), the login module giving only this broker's own user.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bus.config.definitions import ConfigError
from bus.security.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, JaasConfigError, JaasEntry, parse_jaas_entry
from bus.security.listener_config import ConfigView
from bus.security.sasl import PLAIN, PlainSaslServer, SaslServer, ScramSaslServer
from bus.security.scram import SCRAM_MECHANISMS, ScramCredentialStore

SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
_PLAIN_USER_PREFIX = "user_"


@dataclass(frozen=True)
class SaslListener:
    """What one SASL listener authenticates with; `new_server` is called once per SaslHandshake."""

    mechanisms: tuple[str, ...]  # in `sasl.enabled.mechanisms` order: SaslHandshake's answer
    jaas: Mapping[str, JaasEntry]  # per mechanism
    credentials: ScramCredentialStore
    max_receive_size: int  # `sasl.server.max.receive.size`: the caller refuses bigger tokens before authentication
    plain_users: Mapping[str, str] = field(repr=False)

    def new_server(self, mechanism: str) -> SaslServer | None:
        """A server for `mechanism`, None if this listener does not offer it (UNSUPPORTED_SASL_MECHANISM)."""
        if mechanism not in self.mechanisms:
            return None
        if mechanism == PLAIN:
            return PlainSaslServer(self.plain_users)
        return ScramSaslServer(SCRAM_MECHANISMS[mechanism], self.credentials)


def sasl_listener(config: ConfigView, credentials: ScramCredentialStore) -> SaslListener:
    """The SASL setup of the listener whose `listener_config` is `config`; a ConfigError names the key to fix."""
    max_receive_size: int = config.value("sasl.server.max.receive.size")
    mechanisms: list[str] = config.value("sasl.enabled.mechanisms")
    key = config.source("sasl.enabled.mechanisms")
    if not mechanisms:
        raise ConfigError(f"{key}: a SASL listener needs at least one mechanism")
    unsupported = [mechanism for mechanism in mechanisms if mechanism not in SUPPORTED_MECHANISMS]
    if unsupported:
        raise ConfigError(f"Invalid value {','.join(mechanisms)} for configuration {key}: SASL mechanism "
                          f"{unsupported[0]} is not supported (supported: {', '.join(SUPPORTED_MECHANISMS)})")
    jaas = {mechanism: _jaas_entry(config, mechanism) for mechanism in mechanisms}
    plain = jaas.get(PLAIN)
    users = {name.removeprefix(_PLAIN_USER_PREFIX): password for name, password in plain.options.items()
             if name.startswith(_PLAIN_USER_PREFIX)} if plain else {}
    return SaslListener(tuple(dict.fromkeys(mechanisms)), jaas, credentials, max_receive_size, users)


def _jaas_entry(config: ConfigView, mechanism: str) -> JaasEntry:
    """`<mechanism lower-case>.sasl.jaas.config` as the listener sees it (Kafka's `JaasContext.loadServerContext`)."""
    key = f"{mechanism.lower()}.sasl.jaas.config"
    if not config.overridden(key):  # Kafka reads it only listener-prefixed
        ignored = [name for name in (key, "sasl.jaas.config") if name in config]
        note = f" ({' and '.join(ignored)} without the listener prefix are ignored, as in Kafka)" if ignored else ""
        raise ConfigError(f"{config.prefix or 'listener.name.<listener>.'}{key} is not set: the JAAS login module "
                          f"for {mechanism}{note}")
    text = config[key]
    try:
        entry = parse_jaas_entry(text)
    except JaasConfigError as exc:
        raise ConfigError(f"{config.source(key)}: {exc}") from None
    expected = PLAIN_LOGIN_MODULE if mechanism == PLAIN else SCRAM_LOGIN_MODULE
    if entry.login_module != expected:
        raise ConfigError(f"{config.source(key)}: login module {entry.login_module} cannot serve {mechanism}; "
                          f"use {expected}")
    return entry
