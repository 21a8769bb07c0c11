"""How a node dials the other nodes' inter-broker and controller listeners, built from the listeners' own keys at
start: TLS with the node's trust store and key store (mutual TLS), SASL as the username and password of the
listener's login module; every misconfiguration a ConfigError naming the key."""

from __future__ import annotations

import re
import ssl

import pytest

from bus.config.broker import load_broker_config
from bus.config.definitions import ConfigError
from bus.network.node_security import controller_security, inter_broker_security
from testkit.tls import make_pki

SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
              'password="broker-secret";')
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
              'password="controller-secret" user_broker="controller-secret";')


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A node with SASL_SSL (SCRAM-SHA-512) between brokers and SASL_SSL (PLAIN) on its controller listener."""
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    return {
        "listeners": "SASL_SSL://127.0.0.1:1,CONTROLLER://127.0.0.1:2",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL",
        "inter.broker.listener.name": "SASL_SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.truststore),
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512", "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        "listener.name.controller.plain.sasl.jaas.config": PLAIN_JAAS,
    }


def test_each_peer_listener_gets_tls_and_the_nodes_own_login(secured: dict[str, str]) -> None:
    config = load_broker_config(secured)
    brokers, controllers = inter_broker_security(config), controller_security(config)
    assert (brokers.listener, brokers.protocol) == ("SASL_SSL", "SASL_SSL")
    assert brokers.credentials is not None and controllers.credentials is not None
    assert (brokers.credentials.mechanism, brokers.credentials.username) == ("SCRAM-SHA-512", "broker")
    assert (controllers.credentials.mechanism, controllers.credentials.password) == ("PLAIN", "controller-secret")
    assert isinstance(brokers.ssl_context, ssl.SSLContext) and brokers.ssl_context.check_hostname
    assert "secret" not in repr(brokers) + repr(controllers)  # a password never reaches a log line


def test_plaintext_peers_need_nothing() -> None:
    config = load_broker_config({})
    assert inter_broker_security(config).ssl_context is None and controller_security(config).credentials is None


def test_mutual_tls_between_nodes_presents_the_key_store(secured: dict[str, str]) -> None:
    props = {**secured, "listener.security.protocol.map": "SASL_SSL:SSL,CONTROLLER:SSL"}
    security = controller_security(load_broker_config(props))
    assert security.protocol == "SSL" and security.credentials is None and security.ssl_context is not None
    assert security.ssl_context.verify_mode == ssl.CERT_REQUIRED  # the controller's certificate is checked too


@pytest.mark.parametrize(("change", "builder", "message"), [
    ({"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"}, inter_broker_security,
     "sasl.mechanism.inter.broker.protocol must be included in listener.name.sasl_ssl.sasl.enabled.mechanisms"),
    ({"listener.name.controller.plain.sasl.jaas.config":
      "org.apache.kafka.common.security.plain.PlainLoginModule required user_broker=\"x\";"}, controller_security,
     "listener.name.controller.plain.sasl.jaas.config: the login module has no username or password option"),
    ({"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": None}, inter_broker_security,
     "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config is not set"),
    ({"listener.name.controller.plain.sasl.jaas.config": "not a jaas line"}, controller_security,
     "listener.name.controller.plain.sasl.jaas.config:"),
])
def test_misconfigurations_name_the_key(secured: dict[str, str], change: dict[str, str | None], builder: object,
                                        message: str) -> None:
    props = {key: value for key, value in {**secured, **change}.items() if value is not None}
    with pytest.raises(ConfigError, match=re.escape(message)):
        builder(load_broker_config(props))  # type: ignore[operator]
