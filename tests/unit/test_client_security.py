"""The native client's security, without a broker: configs resolved into a ClientSecurity, and the SASL login
(`bus.client.sasl`) driven against the broker's own sans-IO SASL servers, so both sides of the exchange are the ones
the real connection uses."""

from __future__ import annotations

import datetime
import functools
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from bus.client.config import producer_config
from bus.client.errors import ConfigError, SaslAuthenticationError, UnsupportedSaslMechanismError
from bus.client.sasl import authenticate
from bus.client.security import PLAINTEXT, SaslCredentials, client_security
from bus.protocol.messages import shapes
from bus.security.sasl import Authenticated, Challenge, PlainSaslServer, SaslServer, ScramSaslServer
from bus.security.sasl_login import SASL_AUTHENTICATE, SASL_HANDSHAKE
from bus.security.scram import SCRAM_MECHANISMS, ScramCredential, ScramCredentials
from bus.security.scram_messages import ServerFinal
from testkit.tls import make_pki

SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="s3cret";'


# -- configs ------------------------------------------------------------------------------------------------------


def test_plaintext_is_the_default_and_ignores_tls_and_sasl_keys() -> None:
    assert client_security({}) is PLAINTEXT
    assert client_security({"security.protocol": "PLAINTEXT", "sasl.mechanism": "PLAIN"}) is PLAINTEXT


def test_credentials_come_from_the_jaas_line_or_librdkafkas_keys() -> None:
    jaas = client_security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                            "sasl.jaas.config": SCRAM_JAAS, "sasl.username": "bob", "sasl.password": "other"})
    assert jaas.sasl == SaslCredentials("SCRAM-SHA-512", "alice", "s3cret") and jaas.ssl_context is None
    plain = client_security({"security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN",
                             "sasl.username": "carol", "sasl.password": "pw"})
    assert plain.protocol == "SASL_PLAINTEXT" and plain.sasl == SaslCredentials("PLAIN", "carol", "pw")
    assert "pw" not in repr(plain.sasl)


@pytest.mark.parametrize(("conf", "message"), [
    ({"security.protocol": "SASL_SSL2"}, "security.protocol"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.username": "a", "sasl.password": "b"}, "GSSAPI"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "needs credentials"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": "com.example.Login required username=x password=topsecret;"}, "not supported"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="x";'},
     "no password option"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required password="topsecret"'},
     "semi-colon"),
    ({"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": "/nonexistent/ca.pem"},
     "ssl.truststore.location"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent/ca.jks"}, "need a JVM"),
])
def test_bad_security_configs_name_the_key_and_never_the_secret(conf: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        client_security(conf)
    assert "topsecret" not in str(raised.value)


def test_tls_settings_build_the_context(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    security = client_security({"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                                "ssl.truststore.location": str(pki.truststore), "ssl.keystore.type": "PEM",
                                "ssl.keystore.location": str(pki.client_keystore)})
    assert security.sasl is None and security.ssl_context is not None
    assert security.ssl_context.check_hostname and security.ssl_context.verify_mode == ssl.CERT_REQUIRED
    unverified_host = client_security({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                       "sasl.username": "u", "sasl.password": "p", "ssl.truststore.type": "PEM",
                                       "ssl.truststore.certificates": pki.ca.identity.chain_pem(),
                                       "ssl.endpoint.identification.algorithm": ""})
    assert unverified_host.ssl_context is not None and not unverified_host.ssl_context.check_hostname


def test_a_printed_config_hides_its_secrets() -> None:
    config = producer_config({"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL",
                              "sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": SCRAM_JAAS,
                              "sasl.password": "s3cret"})
    assert "s3cret" not in repr(config) and "[hidden]" in repr(config) and "SCRAM-SHA-256" in repr(config)


# -- the SASL login against the broker's SASL servers ----------------------------------------------------------------


class SaslBroker:
    """SaslHandshake and SaslAuthenticate answered as the broker's handlers answer them (one server per login)."""

    def __init__(self, servers: dict[str, Callable[[], SaslServer]], lifetime_ms: int = 0,
                 handshake_error: ErrorCode = ErrorCode.none) -> None:
        self.servers = servers
        self.lifetime_ms = lifetime_ms
        self.handshake_error = handshake_error
        self.server: SaslServer | None = None
        self.requests: list[Any] = []

    def version_for(self, api_key: int, wanted: range | None) -> int:
        return {SASL_HANDSHAKE: 1, SASL_AUTHENTICATE: 2}[api_key]

    def exchange(self, request: Any, version: int) -> Any:
        self.requests.append(request)
        s = shapes(int(request.__api_key__), version)
        if request.__api_key__ == SASL_HANDSHAKE:
            error = self.handshake_error
            if error == ErrorCode.none and request.mechanism not in self.servers:
                error = ErrorCode.unsupported_sasl_mechanism
            if error == ErrorCode.none:
                self.server = self.servers[request.mechanism]()
            return s.make("SaslHandshakeResponse", error_code=error, mechanisms=tuple(self.servers))
        assert self.server is not None
        outcome = self.server.evaluate(request.auth_bytes)
        if isinstance(outcome, Challenge | Authenticated):
            lifetime = self.lifetime_ms if isinstance(outcome, Authenticated) else 0
            return s.make("SaslAuthenticateResponse", error_code=ErrorCode.none, auth_bytes=outcome.data,
                          session_lifetime=datetime.timedelta(milliseconds=lifetime))
        return s.make("SaslAuthenticateResponse", error_code=ErrorCode.sasl_authentication_failed,
                      error_message=outcome.client_message, auth_bytes=b"")

    def login(self, credentials: SaslCredentials) -> int:
        return authenticate(self.exchange, self.version_for, credentials)


def _store(password: str = "s3cret", iterations: int = 4096) -> ScramCredentials:
    store = ScramCredentials()
    for name, mechanism in SCRAM_MECHANISMS.items():
        store.put(name, "alice", ScramCredential.from_password(mechanism, password, iterations))
    return store


def _broker(store: ScramCredentials, **kwargs: Any) -> SaslBroker:
    servers: dict[str, Callable[[], SaslServer]] = {
        name: functools.partial(ScramSaslServer, mechanism, store) for name, mechanism in SCRAM_MECHANISMS.items()}
    servers["PLAIN"] = functools.partial(PlainSaslServer, {"alice": "s3cret"})
    return SaslBroker(servers, **kwargs)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_login_succeeds_and_returns_the_session_lifetime(mechanism: str) -> None:
    broker = _broker(_store(), lifetime_ms=2500)
    assert broker.login(SaslCredentials(mechanism, "alice", "s3cret")) == 2500
    tokens = 1 if mechanism == "PLAIN" else 2
    assert len(broker.requests) == 1 + tokens and all(b"s3cret" not in bytes(getattr(r, "auth_bytes", b""))
                                                      for r in broker.requests[2:])


@pytest.mark.parametrize(("mechanism", "message"), [
    ("PLAIN", "Authentication failed: Invalid username or password"),
    ("SCRAM-SHA-512", "Authentication failed during authentication due to invalid credentials with SASL mechanism "
                      "SCRAM-SHA-512"),
])
def test_a_wrong_password_is_the_brokers_message(mechanism: str, message: str) -> None:
    with pytest.raises(SaslAuthenticationError) as raised:
        _broker(_store()).login(SaslCredentials(mechanism, "alice", "guessed"))
    assert str(raised.value) == message


def test_an_unknown_user_and_an_unoffered_mechanism_are_refused() -> None:
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        _broker(_store()).login(SaslCredentials("SCRAM-SHA-256", "mallory", "s3cret"))
    only_plain = SaslBroker({"PLAIN": lambda: PlainSaslServer({})})
    with pytest.raises(UnsupportedSaslMechanismError,
                       match=r"'SCRAM-SHA-256' not enabled in the server, enabled mechanisms are \[PLAIN\]"):
        only_plain.login(SaslCredentials("SCRAM-SHA-256", "alice", "s3cret"))
    not_sasl = SaslBroker({}, handshake_error=ErrorCode.illegal_sasl_state)
    with pytest.raises(SaslAuthenticationError, match="does not authenticate with SASL"):
        not_sasl.login(SaslCredentials("PLAIN", "alice", "s3cret"))


def test_a_server_that_cannot_prove_it_knows_the_credential_is_refused() -> None:
    """A SCRAM server must sign the exchange with the ServerKey: one that answers with another signature is an
    impostor (it only relays), and the client refuses it even though the server said yes."""
    broker = _broker(_store())
    real = broker.exchange

    def forged(request: Any, version: int) -> Any:
        response = real(request, version)
        if getattr(response, "auth_bytes", b"").startswith(b"v="):
            return shapes(SASL_AUTHENTICATE, version).make(
                "SaslAuthenticateResponse", error_code=ErrorCode.none, auth_bytes=ServerFinal.build(b"\0" * 32))
        return response

    with pytest.raises(SaslAuthenticationError, match="Invalid server signature"):
        authenticate(forged, broker.version_for, SaslCredentials("SCRAM-SHA-256", "alice", "s3cret"))
