"""How this node secures the connections it opens to the other nodes of its cluster (the client side of Kafka's
inter-broker and controller ChannelBuilders).

Two listeners are dialled: the inter-broker one (`inter.broker.listener.name`), for replica fetches and
transaction markers, and the first of `controller.listener.names`, for the KRaft RPCs, broker registration and
heartbeats and Envelope forwarding. Each is secured as its own listener's keys say, read as that listener sees
them (`listener.name.<listener>.<key>` first), as Kafka does:
- over TLS (SSL, SASL_SSL) the node trusts `ssl.truststore.*`, checks the host name unless
  `ssl.endpoint.identification.algorithm` is empty, and presents its `ssl.keystore.*` certificate, so a listener
  with `ssl.client.auth=required` gets the node's identity from it (mutual TLS);
- with SASL (SASL_PLAINTEXT, SASL_SSL) it logs in with `sasl.mechanism.inter.broker.protocol` or
  `sasl.mechanism.controller.protocol`, as the `username` and `password` of that mechanism's login module in the
  listener's `<mechanism>.sasl.jaas.config` (the same line whose `user_<name>` options list PLAIN's users).

Everything wrong is a ConfigError naming the key, raised at start, never at the first connection.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from bus.config.broker import BrokerConfig
from bus.config.definitions import ConfigError
from bus.security.jaas import JaasConfigError, parse_jaas_entry
from bus.security.listener_config import ConfigView, listener_config
from bus.security.sasl_login import SaslCredentials
from bus.security.tls import client_ssl_context

PLAINTEXT = "PLAINTEXT"


@dataclass(frozen=True)
class NodeSecurity:
    """What a connection to a listener of another node does after TCP connect: TLS with `ssl_context`, then a SASL
    login with `credentials`."""

    listener: str = PLAINTEXT
    protocol: str = PLAINTEXT
    ssl_context: ssl.SSLContext | None = None
    credentials: SaslCredentials | None = None


NO_SECURITY = NodeSecurity()


def inter_broker_security(config: BrokerConfig) -> NodeSecurity:
    """How this broker reaches the other brokers' inter-broker listener (replica fetches, transaction markers)."""
    return _node_security(config, config.inter_broker_listener, "sasl.mechanism.inter.broker.protocol")


def controller_security(config: BrokerConfig) -> NodeSecurity:
    """How this node reaches the controllers' listener (the KRaft RPCs, registration, heartbeats, forwarding)."""
    return _node_security(config, config.controller_listener_names[0], "sasl.mechanism.controller.protocol")


def _node_security(config: BrokerConfig, listener: str, mechanism_key: str) -> NodeSecurity:
    protocol = config.security_protocols.get(listener, PLAINTEXT)
    if protocol == PLAINTEXT:
        return NodeSecurity(listener)
    view = listener_config(config.static, listener)
    context = client_ssl_context(view) if protocol.endswith("SSL") else None
    credentials = _credentials(view, str(config[mechanism_key]), mechanism_key) if protocol.startswith("SASL_") \
        else None
    return NodeSecurity(listener, protocol, context, credentials)


def _credentials(view: ConfigView, mechanism: str, mechanism_key: str) -> SaslCredentials:
    """The node's own login: the `username` and `password` options of the listener's JAAS line for `mechanism`."""
    enabled: list[str] = view.value("sasl.enabled.mechanisms")
    if mechanism not in enabled:
        raise ConfigError(f"{mechanism_key} must be included in {view.source('sasl.enabled.mechanisms')} when SASL is "
                          f"used between the nodes ({mechanism} is not enabled on the listener)")
    key = f"{mechanism.lower()}.sasl.jaas.config"
    text = view.get(key) if view.overridden(key) else None
    if text is None:
        raise ConfigError(f"{view.prefix}{key} is not set: the node logs in to the other nodes with its username and "
                          f"password options ({mechanism_key}={mechanism})")
    try:
        options = parse_jaas_entry(text).options
    except JaasConfigError as exc:
        raise ConfigError(f"{view.source(key)}: {exc}") from None
    missing = [option for option in ("username", "password") if option not in options]
    if missing:
        raise ConfigError(f"{view.source(key)}: the login module has no {' or '.join(missing)} option, which the node "
                          f"logs in to the other nodes with ({mechanism_key}={mechanism})")
    return SaslCredentials(mechanism, options["username"], options["password"])
