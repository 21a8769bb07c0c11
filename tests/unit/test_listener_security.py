"""Listeners' security protocols (`listener.security.protocol.map`, the inter-broker listener) as KafkaConfig reads
them, and each listener's TLS/SASL setup built at start, where every misconfiguration is one ConfigError naming
the key to fix."""

from __future__ import annotations

import re

import pytest

from bus.config.broker import load_broker_config
from bus.config.definitions import ConfigError
from bus.network.listener_security import listener_securities
from bus.security.scram import ScramCredentials
from testkit.tls import make_pki

PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"


def refused(message: str) -> pytest.RaisesExc[ConfigError]:
    return pytest.raises(ConfigError, match=re.escape(message))


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.truststore)}


def test_the_default_map_knows_the_four_protocols_and_the_controller_listener() -> None:
    config = load_broker_config({"listeners": "PLAINTEXT://:1,SASL_SSL://:2,SSL://:3,CONTROLLER://:4"})
    assert {name: config.security_protocol(name) for name in ("PLAINTEXT", "SASL_SSL", "SSL", "CONTROLLER")} == {
        "PLAINTEXT": "PLAINTEXT", "SASL_SSL": "SASL_SSL", "SSL": "SSL", "CONTROLLER": "PLAINTEXT"}
    assert config.inter_broker_listener == "PLAINTEXT"


def test_custom_listener_names_need_the_map() -> None:
    with refused("Listener with name CLIENT defined in listeners not found in "
                                          "listener.security.protocol.map"):
        load_broker_config({"listeners": "CLIENT://:1,CONTROLLER://:2"})
    config = load_broker_config({"listeners": "CLIENT://:1,INTERNAL://:3,CONTROLLER://:2",
                                 "listener.security.protocol.map": "CLIENT:sasl_ssl,INTERNAL:PLAINTEXT,"
                                                                   "CONTROLLER:PLAINTEXT",
                                 "inter.broker.listener.name": "internal"})
    assert config.security_protocol("CLIENT") == "SASL_SSL" and config.inter_broker_listener == "INTERNAL"
    with refused("listener.security.protocol.map: 'CLIENT:TLS' is not NAME:PROTOCOL"):
        load_broker_config({"listener.security.protocol.map": "CLIENT:TLS"})


def test_the_inter_broker_listener_must_be_advertised() -> None:
    with refused("inter.broker.listener.name must be a listener name defined in "
                                          "advertised.listeners. The valid options based on currently configured "
                                          "listeners are SASL_SSL"):
        load_broker_config({"listeners": "SASL_SSL://:1,CONTROLLER://:2"})
    config = load_broker_config({"listeners": "SASL_SSL://:1,CONTROLLER://:2",
                                 "security.inter.broker.protocol": "SASL_SSL"})
    assert config.inter_broker_listener == "SASL_SSL"
    with refused("Only one of inter.broker.listener.name and security.inter.broker.protocol"):
        load_broker_config({"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "SSL"})


def test_every_listener_gets_its_security(tls: dict[str, str]) -> None:
    config = load_broker_config({
        **tls, "listeners": "PLAINTEXT://:1,SSL://:2,SASL_SSL://:3,SASL_PLAINTEXT://:4,CONTROLLER://:5",
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=(.*?),.*$/$1/L,DEFAULT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        **{f"listener.name.{listener}.{mechanism}.sasl.jaas.config": jaas
           for listener in ("sasl_ssl", "sasl_plaintext")
           for mechanism, jaas in (("plain", PLAIN_JAAS), ("scram-sha-512", SCRAM_JAAS))},
        "listener.name.sasl_plaintext.connections.max.reauth.ms": "60000",
        "bus.ssl.handshake.timeout.ms": "2500", "connection.failed.authentication.delay.ms": "250"})
    security = listener_securities(config, ScramCredentials())
    assert security["PLAINTEXT"].tls is None and security["PLAINTEXT"].sasl is None
    assert security["SSL"].tls is not None and security["SSL"].principal_mapper is not None
    assert security["SSL"].principal_mapper.name("CN=Alice,O=city") == "alice"
    assert security["SASL_SSL"].tls is not None and security["SASL_SSL"].sasl is not None
    assert security["SASL_SSL"].sasl.mechanisms == ("PLAIN", "SCRAM-SHA-512")
    assert security["SASL_SSL"].max_reauth_ms == 0 and security["SASL_PLAINTEXT"].max_reauth_ms == 60000
    assert security["SASL_PLAINTEXT"].tls is None and security["SASL_PLAINTEXT"].sasl is not None
    assert security["SSL"].handshake_timeout_s == 2.5 and security["SASL_SSL"].failure_delay_s == 0.25


@pytest.mark.parametrize(("props", "message"), [
    ({"listeners": "PLAINTEXT://:1,SSL://:2,CONTROLLER://:3"},
     "ssl.keystore.location: a listener with security protocol SSL needs a key store"),
    ({"listeners": "PLAINTEXT://:1,SSL://:2,CONTROLLER://:3", "ssl.keystore.type": "PEM",
      "listener.name.ssl.ssl.keystore.location": "/no/such/keystore.pem"},
     "listener.name.ssl.ssl.keystore.location: /no/such/keystore.pem: No such file or directory"),
    ({"listeners": "PLAINTEXT://:1,SASL_PLAINTEXT://:2,CONTROLLER://:3", "sasl.enabled.mechanisms": "PLAIN"},
     "listener.name.sasl_plaintext.plain.sasl.jaas.config is not set"),
    ({"listeners": "PLAINTEXT://:1,SASL_PLAINTEXT://:2,CONTROLLER://:3", "sasl.enabled.mechanisms": "GSSAPI"},
     "SASL mechanism GSSAPI is not supported"),
    ({"listeners": "PLAINTEXT://:1,CONTROLLER://:2", "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,"
      "CONTROLLER:SASL_PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN"},
     "listener.name.controller.plain.sasl.jaas.config is not set"),
])
def test_misconfigurations_name_the_key(props: dict[str, str], message: str) -> None:
    with refused(message):
        listener_securities(load_broker_config(props), ScramCredentials())
