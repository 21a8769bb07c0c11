"""How each listener secures its connections (Kafka's ChannelBuilders), built once at start from the config.

A listener's security protocol (`listener.security.protocol.map`) decides: PLAINTEXT connections are
User:ANONYMOUS; SSL ones run a TLS handshake (`ssl.*`) and are the principal `ssl.principal.mapping.rules` makes of
the client certificate (ANONYMOUS without one); SASL_PLAINTEXT and SASL_SSL ones (after TLS for the latter)
authenticate with a mechanism of `sasl.enabled.mechanisms` and are the user they logged in as. Every key is read
as the listener sees it (`listener.name.<listener>.<key>` first), and everything that can be wrong with it (a key
store that cannot be read, a mechanism without its JAAS login module, a bad mapping rule) is a ConfigError naming
the key, raised here, before the broker serves.

The controller listener is secured like any other: the other nodes dial it, and the inter-broker listener, with the
security `bus.network.node_security` builds from the same keys.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from bus.config.broker import BrokerConfig
from bus.security.listener_config import listener_config
from bus.security.principal import SslPrincipalMapper, principal_mapper
from bus.security.sasl_config import SaslListener, sasl_listener
from bus.security.scram import ScramCredentialStore
from bus.security.tls import server_ssl_context

PLAINTEXT = "PLAINTEXT"


@dataclass(frozen=True)
class ListenerSecurity:
    name: str
    protocol: str
    tls: ssl.SSLContext | None = None  # SSL and SASL_SSL
    principal_mapper: SslPrincipalMapper | None = None  # SSL: the client certificate's DN to a user name
    sasl: SaslListener | None = None  # SASL_PLAINTEXT and SASL_SSL
    max_reauth_ms: int = 0  # connections.max.reauth.ms: a SASL session's lifetime (0: none)
    handshake_timeout_s: float = 10.0  # bus.ssl.handshake.timeout.ms
    failure_delay_s: float = 0.1  # connection.failed.authentication.delay.ms


def listener_securities(config: BrokerConfig, credentials: ScramCredentialStore) -> dict[str, ListenerSecurity]:
    """Every listener's security by name. `credentials`: where SCRAM logins find users (the metadata image)."""
    return {listener.name: _security(config, listener.name, credentials) for listener in config.listeners}


def _security(config: BrokerConfig, name: str, credentials: ScramCredentialStore) -> ListenerSecurity:
    protocol = config.security_protocol(name)
    timeout_s = int(config["bus.ssl.handshake.timeout.ms"]) / 1000.0
    delay_s = int(config["connection.failed.authentication.delay.ms"]) / 1000.0
    if protocol == PLAINTEXT:
        return ListenerSecurity(name, protocol, handshake_timeout_s=timeout_s, failure_delay_s=delay_s)
    view = listener_config(config.static, name)
    tls = server_ssl_context(view, protocol) if protocol.endswith("SSL") else None
    if protocol == "SSL":
        return ListenerSecurity(name, protocol, tls, principal_mapper(view), handshake_timeout_s=timeout_s,
                                failure_delay_s=delay_s)
    max_reauth_ms: int = view.value("connections.max.reauth.ms")
    return ListenerSecurity(name, protocol, tls, sasl=sasl_listener(view, credentials),
                            max_reauth_ms=max(max_reauth_ms, 0), handshake_timeout_s=timeout_s,
                            failure_delay_s=delay_s)
