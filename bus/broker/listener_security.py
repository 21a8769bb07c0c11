"""How each listener secures its connections (Kafka's ChannelBuilders), built once at start from the config.

A listener's security protocol (`listener.security.protocol.map`) decides: PLAINTEXT connections are
User:ANONYMOUS; SSL ones run a TLS handshake (`ssl.*`) and are the principal `ssl.principal.mapping.rules` makes of
the client certificate (ANONYMOUS without one); SASL_PLAINTEXT and SASL_SSL ones (after TLS for the latter)
authenticate with a mechanism of `sasl.enabled.mechanisms` and are the user they logged in as. Every key is read
as the listener sees it (`listener.name.<listener>.<key>` first), and everything that can be wrong with it (a key
store that cannot be read, a mechanism without its JAAS login module, a bad mapping rule) is a ConfigError naming
the key, raised here, before the broker serves.

Not yet supported, and refused here with a message saying so: TLS or SASL on a controller listener, and between the
nodes of a cluster (the inter-broker listener of a node with other nodes in its quorum must be PLAINTEXT).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from bus.config.broker import BrokerConfig
from bus.config.definitions import ConfigError
from bus.security.listener_config import listener_config
from bus.security.principal import SslPrincipalMapper, principal_mapper
from bus.security.sasl_config import SaslListener, sasl_listener
from bus.security.scram import ScramCredentialStore
from bus.security.tls import server_ssl_context

PLAINTEXT = "PLAINTEXT"
_NOT_YET = "TLS and SASL between the nodes of a cluster are not supported yet"


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


def listener_securities(config: BrokerConfig, credentials: ScramCredentialStore, *,
                        clustered: bool) -> dict[str, ListenerSecurity]:
    """Every listener's security by name. `credentials`: where SCRAM logins find users (the metadata image);
    `clustered`: whether the node has other nodes in its quorum, which then reach it on its inter-broker listener."""
    _check_supported(config, clustered)
    return {listener.name: _security(config, listener.name, credentials) for listener in config.listeners}


def _check_supported(config: BrokerConfig, clustered: bool) -> None:
    for name in config.controller_listener_names:
        if name in config.security_protocols and config.security_protocol(name) != PLAINTEXT:
            raise ConfigError(f"controller listener {name} uses security protocol {config.security_protocol(name)} "
                              f"in listener.security.protocol.map: only PLAINTEXT is supported there ({_NOT_YET})")
    if not config.is_broker:
        return
    inter_broker = config.inter_broker_listener
    protocol = config.security_protocol(inter_broker)
    if clustered and protocol != PLAINTEXT:
        raise ConfigError(f"inter.broker.listener.name {inter_broker} uses security protocol {protocol}: a node of a "
                          f"cluster needs a PLAINTEXT inter-broker listener ({_NOT_YET})")
    if protocol.startswith("SASL_"):
        view = listener_config(config.static, inter_broker)
        mechanism = config["sasl.mechanism.inter.broker.protocol"]
        if mechanism not in view.value("sasl.enabled.mechanisms"):
            raise ConfigError("sasl.mechanism.inter.broker.protocol must be included in sasl.enabled.mechanisms when "
                              f"SASL is used for inter-broker communication ({mechanism} is not enabled on "
                              f"{inter_broker})")


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
