"""The SASL servers (PLAIN, SCRAM-SHA-256/512) and a SASL listener's setup from its configs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.net.sasl.scram import ScramClient as KafkaPythonScramClient

from bus.config.definitions import ConfigError
from bus.security.listener_config import listener_config
from bus.security.principal import KafkaPrincipal
from bus.security.sasl import (
    SASL_SERVER_MAX_RECEIVE_SIZE,
    Authenticated,
    Challenge,
    Failed,
    PlainSaslServer,
    SaslServer,
    ScramSaslServer,
)
from bus.security.sasl_config import sasl_listener
from bus.security.scram import SCRAM_MECHANISMS, SCRAM_SHA_256, ScramCredential, ScramCredentials, ScramMechanism
from bus.security.scram_client import ScramClient
from bus.security.scram_messages import ClientFirst, ServerFirst

USERS = {"admin": "admin-secret", "alice": "alice-secret"}
GENERIC = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"


def _failed(outcome: object) -> Failed:
    assert isinstance(outcome, Failed), outcome
    return outcome


class TestPlain:
    @pytest.mark.parametrize("token", [b"\x00alice\x00alice-secret", b"alice\x00alice\x00alice-secret"])
    def test_good(self, token: bytes) -> None:
        assert PlainSaslServer(USERS).evaluate(token) == Authenticated(KafkaPrincipal("User", "alice"), b"")

    @pytest.mark.parametrize(("token", "message"), [
        (b"\x00alice\x00wrong", "Authentication failed: Invalid username or password"),
        (b"\x00alice\x00alice-secretx", "Authentication failed: Invalid username or password"),
        (b"\x00nobody\x00alice-secret", "Authentication failed: Invalid username or password"),
        (b"admin\x00alice\x00alice-secret",
         "Authentication failed: Client requested an authorization id that is different from username"),
        (b"\x00\x00alice-secret", "Authentication failed: username not specified"),
        (b"\x00alice\x00", "Authentication failed: password not specified"),
        (b"alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
        (b"\x00alice", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"\x00alice\x00alice-secret\x00", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"a\x00b\x00c\x00d\x00e", "Invalid SASL/PLAIN response: expected 3 tokens, got 4"),
        (b"", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
    ])
    def test_refused_with_kafkas_message(self, token: bytes, message: str) -> None:
        """PLAIN's failures are Kafka's SaslAuthenticationExceptions: the client sees the reason as it is."""
        failed = _failed(PlainSaslServer(USERS).evaluate(token))
        assert failed.reason == failed.client_message == message
        assert b"secret" not in failed.reason.encode()

    def test_one_exchange_per_server(self) -> None:
        server = PlainSaslServer(USERS)
        assert isinstance(server.evaluate(b"\x00alice\x00alice-secret"), Authenticated)
        assert server.ended
        assert "exchange is over" in _failed(server.evaluate(b"\x00alice\x00alice-secret")).reason


def _store(mechanism: ScramMechanism = SCRAM_SHA_256, iterations: int = 4096) -> ScramCredentials:
    store = ScramCredentials()
    for name, password in USERS.items():
        store.put(mechanism.name, name, ScramCredential.from_password(mechanism, password, iterations))
    return store


@pytest.mark.parametrize("mechanism", list(SCRAM_MECHANISMS.values()), ids=list(SCRAM_MECHANISMS))
class TestScram:
    def test_round_trip(self, mechanism: ScramMechanism) -> None:
        server = ScramSaslServer(mechanism, _store(mechanism))
        client = ScramClient(mechanism, "alice", "alice-secret")
        challenge = server.evaluate(client.first_message())
        assert isinstance(challenge, Challenge)
        outcome = server.evaluate(client.final_message(challenge.data))
        assert isinstance(outcome, Authenticated)
        assert outcome.principal == KafkaPrincipal("User", "alice")
        client.verify(outcome.data)
        assert server.ended

    def test_kafka_python_client(self, mechanism: ScramMechanism) -> None:
        """A third-party SCRAM client (kafka-python's) authenticates, and accepts our server's signature."""
        server = ScramSaslServer(mechanism, _store(mechanism))
        client = KafkaPythonScramClient("admin", "admin-secret", mechanism.name)
        challenge = server.evaluate(client.first_message())
        assert isinstance(challenge, Challenge)
        client.process_server_first_message(challenge.data)
        outcome = server.evaluate(client.final_message())
        assert isinstance(outcome, Authenticated) and outcome.principal.name == "admin"
        client.process_server_final_message(outcome.data)  # raises on a wrong server signature

    def test_wrong_password(self, mechanism: ScramMechanism) -> None:
        server = ScramSaslServer(mechanism, _store(mechanism))
        client = ScramClient(mechanism, "alice", "not-alices")
        challenge = server.evaluate(client.first_message())
        assert isinstance(challenge, Challenge)
        failed = _failed(server.evaluate(client.final_message(challenge.data)))
        assert failed.reason == "Invalid client credentials"
        assert failed.client_message == GENERIC.format(mechanism.name)

    def test_unknown_user_fails_at_client_first_like_kafka(self, mechanism: ScramMechanism) -> None:
        failed = _failed(ScramSaslServer(mechanism, _store(mechanism)).evaluate(b"n,,n=mallory,r=abc"))
        assert failed.reason == "Authentication failed: Invalid user credentials"
        assert failed.client_message == GENERIC.format(mechanism.name)  # the client cannot tell it from a bad proof

    def test_credential_of_the_other_mechanism_is_not_used(self, mechanism: ScramMechanism) -> None:
        other = next(m for m in SCRAM_MECHANISMS.values() if m != mechanism)
        assert isinstance(ScramSaslServer(mechanism, _store(other)).evaluate(b"n,,n=alice,r=abc"), Failed)

    def test_wrong_nonce(self, mechanism: ScramMechanism) -> None:
        server = ScramSaslServer(mechanism, _store(mechanism))
        client = ScramClient(mechanism, "alice", "alice-secret")
        challenge = server.evaluate(client.first_message())
        assert isinstance(challenge, Challenge)
        first = ServerFirst.parse(challenge.data)
        forged = ServerFirst.build(first.nonce + "x", first.salt, first.iterations)
        failed = _failed(server.evaluate(client.final_message(forged.text.encode())))
        assert failed.reason == "Invalid client nonce in the final client message."

    def test_replayed_client_final(self, mechanism: ScramMechanism) -> None:
        """A recorded client-final is refused by a new exchange (fresh server nonce) and after completion."""
        store = _store(mechanism)
        server = ScramSaslServer(mechanism, store)
        client = ScramClient(mechanism, "alice", "alice-secret", nonce="fixed-client-nonce")
        challenge = server.evaluate(client.first_message())
        assert isinstance(challenge, Challenge)
        client_final = client.final_message(challenge.data)
        assert isinstance(server.evaluate(client_final), Authenticated)
        assert "exchange is over" in _failed(server.evaluate(client_final)).reason

        replay = ScramSaslServer(mechanism, store)
        assert isinstance(replay.evaluate(b"n,,n=alice,r=fixed-client-nonce"), Challenge)
        assert _failed(replay.evaluate(client_final)).reason == "Invalid client nonce in the final client message."

    def test_out_of_order(self, mechanism: ScramMechanism) -> None:
        """A client-final first, or a client-first second, is malformed where it arrives."""
        assert "client first" in _failed(ScramSaslServer(mechanism, _store(mechanism)).evaluate(
            b"c=biws,r=abc,p=AAAA")).reason
        server = ScramSaslServer(mechanism, _store(mechanism))
        assert isinstance(server.evaluate(b"n,,n=alice,r=abc"), Challenge)
        assert "client final" in _failed(server.evaluate(b"n,,n=alice,r=abc")).reason

    def test_channel_binding_must_echo_the_gs2_header(self, mechanism: ScramMechanism) -> None:
        server = ScramSaslServer(mechanism, _store(mechanism))
        challenge = server.evaluate(b"n,,n=alice,r=abc")
        assert isinstance(challenge, Challenge)
        nonce = ServerFirst.parse(challenge.data).nonce
        failed = _failed(server.evaluate(f"c=eSws,r={nonce},p=AAAA".encode()))  # "y,,"
        assert failed.reason == "Invalid channel binding in the final client message."

    def test_short_proof(self, mechanism: ScramMechanism) -> None:
        server = ScramSaslServer(mechanism, _store(mechanism))
        challenge = server.evaluate(b"n,,n=alice,r=abc")
        assert isinstance(challenge, Challenge)
        nonce = ServerFirst.parse(challenge.data).nonce
        assert _failed(server.evaluate(f"c=biws,r={nonce},p=AAAA".encode())).reason == "Invalid client credentials"

    @pytest.mark.parametrize(("client_first", "reason", "public"), [
        (b"n,a=admin,n=alice,r=abc",
         "Authentication failed: Client requested an authorization id that is different from username", True),
        (b"n,,n=alice,r=abc,tokenauth=true",
         "Authentication failed: delegation token authentication is not supported", False),
        (b"n,,m=ext,n=alice,r=abc", "Authentication failed: unsupported mandatory SCRAM extension", False),
        (b"n,,n=al=41ice,r=abc", "Invalid SCRAM client first message format", False),  # only =2C and =3D
        (b"y,,n=alice,r=abc", "Invalid SCRAM client first message format", False),
    ])
    def test_client_first_refusals(self, mechanism: ScramMechanism, client_first: bytes, reason: str,
                                   public: bool) -> None:
        failed = _failed(ScramSaslServer(mechanism, _store(mechanism)).evaluate(client_first))
        assert failed.reason == reason
        assert failed.client_message == (reason if public else GENERIC.format(mechanism.name))

    def test_accepted_extras(self, mechanism: ScramMechanism) -> None:
        """An authzid equal to the user, and unknown extensions (ignored, as by Kafka), are fine."""
        server = ScramSaslServer(mechanism, _store(mechanism))
        assert isinstance(server.evaluate(b"n,a=alice,n=alice,r=abc,tokenauth=false,foo=bar"), Challenge)

    def test_credential_below_kafkas_minimum_iterations(self, mechanism: ScramMechanism) -> None:
        failed = _failed(ScramSaslServer(mechanism, _store(mechanism, iterations=4095)).evaluate(b"n,,n=alice,r=a"))
        assert failed.reason == f"Iterations 4095 is less than the minimum 4096 for {mechanism.name}"


_STORES = {mechanism: _store(mechanism) for mechanism in SCRAM_MECHANISMS.values()}


def _servers() -> list[SaslServer]:
    return [PlainSaslServer(USERS)] + [ScramSaslServer(m, store) for m, store in _STORES.items()]


_TOKENS = st.one_of(
    st.binary(max_size=200),
    st.sampled_from([b"n,,n=alice,r=abc", b"n,a=alice,n=alice,r=x", b"c=biws,r=abcdef,p=AAAA", b"\x00alice\x00x",
                     b"n,,n=alice,r=abc,tokenauth=true", b"v=AAAA", b"e=x"]),
    st.text(alphabet="nrcpvsia=,\x00 abc+/biws", max_size=60).map(str.encode),
)


@settings(max_examples=300, deadline=None)
@given(tokens=st.lists(_TOKENS, min_size=1, max_size=5), which=st.integers(0, 2))
def test_fuzzed_tokens_only_ever_fail(tokens: list[bytes], which: int) -> None:
    """Arbitrary token sequences never raise, and never authenticate anyone (nobody knows a password here)."""
    server = _servers()[which]
    for token in tokens:
        outcome = server.evaluate(token)
        assert isinstance(outcome, Challenge | Failed)
        if isinstance(outcome, Failed):
            assert server.ended
            assert "secret" not in outcome.reason + outcome.client_message


@settings(max_examples=100, deadline=None)
@given(nonce=st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters=","),
                     min_size=1, max_size=40),
       user=st.text(alphabet=st.characters(min_codepoint=1, max_codepoint=0x7F), min_size=1, max_size=20))
def test_any_ascii_user_and_nonce_round_trip(nonce: str, user: str) -> None:
    store = ScramCredentials()
    store.put("SCRAM-SHA-256", user, ScramCredential.from_password(SCRAM_SHA_256, "pw", 4096, b"salt"))
    server = ScramSaslServer(SCRAM_SHA_256, store)
    client = ScramClient(SCRAM_SHA_256, user, "pw", nonce=nonce)
    first = client.first_message()
    assert ClientFirst.parse(first).nonce == nonce
    challenge = server.evaluate(first)
    assert isinstance(challenge, Challenge)
    outcome = server.evaluate(client.final_message(challenge.data))
    assert isinstance(outcome, Authenticated) and outcome.principal.name == user


JAAS = {
    "listener.name.sasl_ssl.plain.sasl.jaas.config":
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";',
    "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" '
        'password="admin-secret";',
}


class TestListenerSetup:
    def test_mechanisms_and_servers(self) -> None:
        props = {"sasl.enabled.mechanisms": "GSSAPI", "listener.name.sasl_ssl.sasl.enabled.mechanisms":
                 "SCRAM-SHA-512,PLAIN", **JAAS}
        listener = sasl_listener(listener_config(props, "SASL_SSL"), ScramCredentials())
        assert listener.mechanisms == ("SCRAM-SHA-512", "PLAIN")
        assert listener.max_receive_size == SASL_SERVER_MAX_RECEIVE_SIZE == 524288
        assert dict(listener.plain_users) == USERS
        assert listener.jaas["SCRAM-SHA-512"].options["username"] == "admin"
        assert isinstance(listener.new_server("PLAIN"), PlainSaslServer)
        server = listener.new_server("SCRAM-SHA-512")
        assert isinstance(server, ScramSaslServer) and server.mechanism == "SCRAM-SHA-512"
        assert listener.new_server("SCRAM-SHA-256") is None
        assert "admin-secret" not in repr(listener)

    @pytest.mark.parametrize(("props", "message"), [
        ({}, "SASL mechanism GSSAPI is not supported"),  # Kafka's default mechanism needs Kerberos
        ({"sasl.enabled.mechanisms": ""}, "sasl.enabled.mechanisms: a SASL listener needs at least one mechanism"),
        ({"sasl.enabled.mechanisms": "PLAIN"},
         "listener.name.sasl_plaintext.plain.sasl.jaas.config is not set: the JAAS login module for PLAIN$"),
        ({"sasl.enabled.mechanisms": "PLAIN", "sasl.jaas.config": "x"},
         r"\(sasl.jaas.config without the listener prefix are ignored, as in Kafka\)"),
        ({"sasl.enabled.mechanisms": "PLAIN", "plain.sasl.jaas.config": "x"},
         r"\(plain.sasl.jaas.config without the listener prefix are ignored, as in Kafka\)"),
        ({"sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config":
          'org.apache.kafka.common.security.plain.PlainLoginModule required user_a="secret"'},
         "listener.name.sasl_plaintext.plain.sasl.jaas.config: JAAS config entry not terminated by semi-colon"),
        ({"sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config":
          'org.apache.kafka.common.security.scram.ScramLoginModule required;'},
         "login module org.apache.kafka.common.security.scram.ScramLoginModule cannot serve PLAIN"),
        ({"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER"},
         "listener.name.sasl_plaintext.sasl.enabled.mechanisms: SASL mechanism OAUTHBEARER is not supported"),
        ({"sasl.enabled.mechanisms": "PLAIN", "sasl.server.max.receive.size": "big"},
         "Invalid value big for configuration sasl.server.max.receive.size"),
    ])
    def test_config_errors_name_the_key(self, props: dict[str, str], message: str) -> None:
        with pytest.raises(ConfigError, match=message) as error:
            sasl_listener(listener_config(props, "SASL_PLAINTEXT"), ScramCredentials())
        assert "secret" not in str(error.value)
