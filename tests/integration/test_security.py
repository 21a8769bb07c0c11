"""TLS and SASL at the broker's listeners, judged by the clients: confluent-kafka (librdkafka), kafka-python,
aiokafka and kcat produce and consume over SASL_SSL with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 and over mutual
TLS, and are refused with a wrong password, an untrusted CA, a certificate of another CA or no TLS at all.

One broker serves it all (a PLAINTEXT listener for setup, SASL_SSL, SSL with `ssl.client.auth=required`,
SASL_PLAINTEXT with a 2 s session lifetime, a PLAINTEXT controller listener), with the StandardAuthorizer: a
principal that is no super user is refused, which shows which principal a connection got. Its first SCRAM users
come from `bus storage format --add-scram`, the next ones from AlterUserScramCredentials through confluent-kafka's
AdminClient; the last test restarts it and logs in again. Raw sockets send what no client sends: garbage for a
ClientHello, a handshake that never ends, a Produce before authenticating, tokens malformed or too large.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
import ssl
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from aiokafka.helpers import create_ssl_context
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from cryptography.x509.oid import NameOID
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.errors import KafkaError as KpKafkaError
from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialUpsertion,
)
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest as SaslAuthenticateV1
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from bus.protocol import records as rb
from contracts.ports import free_port
from contracts.processes import ROOT
from deploy.processes.broker import BrokerProcess
from deploy.processes.cluster import ClusterProcess, started, until
from testkit.clients import consume, create_topic, producer_config
from testkit.raw_kafka import (
    RawKafka,
    api_versions_request,
    header_only,
    metadata_request,
    produce_request,
)
from testkit.tls import name
from tests.support.secure_broker import PASSWORDS, SecureBroker, format_storage, start_secure_broker

REAUTH_MS = 2000
FAILURE_DELAY_S = 0.3
HANDSHAKE_TIMEOUT_S = 1.5
# Who logs in with what: the users `storage format` created (admin, alice), the one AlterUserScramCredentials created
# (bob, both mechanisms), and PLAIN's JAAS users (carol; mallory is no super user).
USERS = {("PLAIN", "confluent"): "carol", ("PLAIN", "kafka-python"): "carol", ("PLAIN", "aiokafka"): "carol",
         ("PLAIN", "kcat"): "carol", ("SCRAM-SHA-256", "confluent"): "admin", ("SCRAM-SHA-256", "kcat"): "admin",
         ("SCRAM-SHA-256", "kafka-python"): "bob", ("SCRAM-SHA-256", "aiokafka"): "bob",
         ("SCRAM-SHA-512", "confluent"): "bob", ("SCRAM-SHA-512", "kcat"): "bob",
         ("SCRAM-SHA-512", "kafka-python"): "alice", ("SCRAM-SHA-512", "aiokafka"): "alice"}
CLIENTS = ("confluent", "kafka-python", "aiokafka", "kcat")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_AUTHENTICATION_FAILED = 58
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
DOWN = {KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}  # what librdkafka says of TLS refusals


@dataclass
class GuestedBroker(SecureBroker):
    guest_keystore: Path  # CN=eve,OU=guests,O=city, signed by the trusted CA: mapped by DEFAULT, no super user


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GuestedBroker]:
    base = tmp_path_factory.mktemp("secure")
    started = start_secure_broker(base, reauth_ms=REAUTH_MS, failure_delay_ms=int(FAILURE_DELAY_S * 1000),
                                  handshake_timeout_ms=int(HANDSHAKE_TIMEOUT_S * 1000))
    try:
        guest = started.pki.ca.issue(name((NameOID.ORGANIZATION_NAME, "city"),
                                          (NameOID.ORGANIZATIONAL_UNIT_NAME, "guests"),
                                          (NameOID.COMMON_NAME, "eve"))).write_keystore(base / "eve.pem")
        secured = GuestedBroker(started.broker, started.pki, started.ports, started.metrics_port, guest)
        admin = AdminClient(_confluent(secured, "SCRAM-SHA-256", "admin"))
        for mechanism, iterations in ((ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 8192)):
            upsertion = UserScramCredentialUpsertion("bob", ScramCredentialInfo(mechanism, iterations), b"bob-secret")
            assert admin.alter_user_scram_credentials([upsertion])["bob"].result(15) is None
        yield secured
    finally:
        started.broker.stop()


def _topic(secure: GuestedBroker, tag: str) -> str:
    topic = f"secure-{tag}-{uuid.uuid4().hex[:6]}"
    create_topic(secure.broker.bootstrap, topic)
    return topic


# -- the clients --------------------------------------------------------------------------------------------------


def _confluent(secure: GuestedBroker, mechanism: str, user: str, password: str | None = None,
               listener: str = "SASL_SSL") -> dict[str, Any]:
    return {"bootstrap.servers": secure.address(listener), "security.protocol": listener, "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": PASSWORDS[user] if password is None else password,
            "ssl.ca.location": str(secure.pki.truststore), "socket.timeout.ms": 5000,
            "reconnect.backoff.max.ms": 500}


def _mtls_confluent(secure: GuestedBroker, keystore: Path, ca: Path | None = None) -> dict[str, Any]:
    return {"bootstrap.servers": secure.address("SSL"), "security.protocol": "SSL",
            "ssl.ca.location": str(ca or secure.pki.truststore), "ssl.certificate.location": str(keystore),
            "ssl.key.location": str(keystore), "socket.timeout.ms": 5000, "reconnect.backoff.max.ms": 500}


def _confluent_round_trip(conf: dict[str, Any], topic: str, value: bytes) -> list[bytes]:
    producer = Producer(producer_config(conf["bootstrap.servers"], **conf))
    producer.produce(topic, value=value)
    assert producer.flush(15) == 0
    return [m.value() for m in consume(conf["bootstrap.servers"], topic, count=1, **conf)]


def _kafka_python_options(secure: GuestedBroker, mechanism: str | None, user: str | None,
                          keystore: Path | None = None) -> dict[str, Any]:
    options: dict[str, Any] = {"ssl_cafile": str(secure.pki.truststore), "request_timeout_ms": 10000}
    if mechanism is None:
        return {**options, "bootstrap_servers": secure.address("SSL"), "security_protocol": "SSL",
                "ssl_certfile": str(keystore), "ssl_keyfile": str(keystore)}
    assert user is not None
    return {**options, "bootstrap_servers": secure.address("SASL_SSL"), "security_protocol": "SASL_SSL",
            "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": PASSWORDS[user]}


def _kafka_python_round_trip(options: dict[str, Any], topic: str, value: bytes) -> list[bytes]:
    producer = KafkaProducer(**options)
    try:
        producer.send(topic, value).get(15)
    finally:
        producer.close(5)
    consumer = KafkaConsumer(**options, consumer_timeout_ms=10000, auto_offset_reset="earliest")
    try:
        consumer.assign([KpTopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        return [next(consumer).value]  # the partition holds the one record
    finally:
        consumer.close()


def _aiokafka_options(secure: GuestedBroker, mechanism: str | None, user: str | None,
                      keystore: Path | None = None) -> dict[str, Any]:
    if mechanism is None:
        context = create_ssl_context(cafile=str(secure.pki.truststore), certfile=str(keystore),
                                     keyfile=str(keystore))
        return {"bootstrap_servers": secure.address("SSL"), "security_protocol": "SSL", "ssl_context": context}
    assert user is not None
    return {"bootstrap_servers": secure.address("SASL_SSL"), "security_protocol": "SASL_SSL",
            "ssl_context": create_ssl_context(cafile=str(secure.pki.truststore)), "sasl_mechanism": mechanism,
            "sasl_plain_username": user, "sasl_plain_password": PASSWORDS[user]}


def _aiokafka_round_trip(options: dict[str, Any], topic: str, value: bytes) -> list[bytes]:
    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**options)
        await producer.start()
        try:
            await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**options, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([AioTopicPartition(topic, 0)])
            await consumer.seek_to_beginning()
            batches = await consumer.getmany(timeout_ms=5000)
            return [record.value for records in batches.values() for record in records]
        finally:
            await consumer.stop()

    return asyncio.run(run())


def _kcat(options: list[str], *arguments: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["kcat", *options, *arguments], input=stdin, capture_output=True, timeout=30)


def _kcat_round_trip(options: list[str], topic: str, value: bytes) -> list[bytes]:
    produced = _kcat(options, "-P", "-t", topic, stdin=value + b"\n")
    assert produced.returncode == 0, produced.stderr.decode()
    consumed = _kcat(options, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert consumed.returncode == 0, consumed.stderr.decode()
    return consumed.stdout.splitlines()


def _kcat_options(secure: GuestedBroker, mechanism: str | None, user: str | None,
                  keystore: Path | None = None) -> list[str]:
    listener = "SASL_SSL" if mechanism else "SSL"
    options = ["-b", secure.address(listener), "-X", f"security.protocol={listener}", "-X",
               f"ssl.ca.location={secure.pki.truststore}"]
    if mechanism is None:
        return [*options, "-X", f"ssl.certificate.location={keystore}", "-X", f"ssl.key.location={keystore}"]
    assert user is not None
    return [*options, "-X", f"sasl.mechanism={mechanism}", "-X", f"sasl.username={user}", "-X",
            f"sasl.password={PASSWORDS[user]}"]


def _round_trip(secure: GuestedBroker, client: str, topic: str, value: bytes, mechanism: str | None = None,
                user: str | None = None) -> list[bytes]:
    """Produce `value` with `client` (SASL_SSL as `user` with `mechanism`, else mutual TLS with alice's certificate)
    and read the partition back with the same client and credentials."""
    keystore = None if mechanism else secure.pki.client_keystore
    if client == "confluent":
        conf = (_confluent(secure, mechanism, user) if mechanism and user
                else _mtls_confluent(secure, secure.pki.client_keystore))
        return _confluent_round_trip(conf, topic, value)
    if client == "kafka-python":
        return _kafka_python_round_trip(_kafka_python_options(secure, mechanism, user, keystore), topic, value)
    if client == "aiokafka":
        return _aiokafka_round_trip(_aiokafka_options(secure, mechanism, user, keystore), topic, value)
    return _kcat_round_trip(_kcat_options(secure, mechanism, user, keystore), topic, value)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_clients_produce_and_consume_over_sasl_ssl(secure: GuestedBroker, client: str, mechanism: str) -> None:
    user = USERS[(mechanism, client)]
    topic = _topic(secure, f"{client}-{mechanism.lower()}")
    value = f"{client} as {user} with {mechanism}".encode()
    assert _round_trip(secure, client, topic, value, mechanism, user) == [value]


@pytest.mark.parametrize("client", CLIENTS)
def test_clients_produce_and_consume_over_mutual_tls(secure: GuestedBroker, client: str) -> None:
    """Alice's certificate (CN=alice,OU=ops,O=city) is User:ops-alice by the mapping rule, a super user."""
    topic = _topic(secure, f"{client}-mtls")
    value = f"{client} with a client certificate".encode()
    assert _round_trip(secure, client, topic, value) == [value]


def _produce_error(conf: dict[str, Any], topic: str) -> KafkaError:
    producer = Producer(producer_config(conf["bootstrap.servers"], **conf, **{"message.timeout.ms": 10000}))
    errors: list[KafkaError] = []
    producer.produce(topic, value=b"x", on_delivery=lambda error, _message: errors.append(error))
    producer.flush(15)
    assert errors and errors[0] is not None
    return errors[0]


def test_the_authorizer_sees_the_principal_each_listener_gives(secure: GuestedBroker) -> None:
    """The mapping rule's principal (and a certificate no rule but DEFAULT maps) and a SASL user reach the
    authorizer: neither the guest's full DN nor mallory is a super user, so their produce is refused."""
    topic = _topic(secure, "authorized")
    assert _produce_error(_mtls_confluent(secure, secure.guest_keystore), topic).code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _produce_error(_confluent(secure, "PLAIN", "mallory"), topic).code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _confluent_round_trip(_confluent(secure, "PLAIN", "carol"), topic, b"carol may") == [b"carol may"]


# -- refusals -----------------------------------------------------------------------------------------------------


def _confluent_refusal(conf: dict[str, Any]) -> set[int]:
    """The error codes a confluent-kafka client reports when it cannot get past authentication (from the first one
    on, for a moment: librdkafka may say "all brokers down" before it says why)."""
    errors: list[KafkaError] = []
    producer = Producer({**conf, "error_cb": errors.append, "reconnect.backoff.ms": 1000,
                         "reconnect.backoff.max.ms": 1000})
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.05)
    producer.poll(0.3)
    assert errors, "no error reported"
    return {error.code() for error in errors}


def test_refused_a_wrong_password_an_untrusted_ca_a_foreign_certificate_and_plaintext(
        secure: GuestedBroker, caplog: pytest.LogCaptureFixture) -> None:
    failed_sasl = secure.metric("bus_failed_authentication_total", listener="SASL_SSL")
    failed_tls = secure.metric("bus_failed_authentication_total", listener="SSL", mechanism="SSL")
    for mechanism in MECHANISMS:
        started = time.monotonic()
        user = "carol" if mechanism == "PLAIN" else "bob"
        assert KafkaError._AUTHENTICATION in _confluent_refusal(_confluent(secure, mechanism, user, "guessed"))
        assert time.monotonic() - started >= FAILURE_DELAY_S  # the verdict waits for the failure delay
    with caplog.at_level(logging.WARNING, "kafka"), pytest.raises(KpKafkaError):
        KafkaProducer(**{**_kafka_python_options(secure, "SCRAM-SHA-512", "alice"),
                         "sasl_plain_password": "guessed", "bootstrap_timeout_ms": 2000})
    # kafka-python names the failure, or (when the broker's close after the answer overtakes its read under load)
    # only sees the connection go: both are a refusal; the broker's log below says why.
    assert "SaslAuthenticationFailedError" in caplog.text or "socket disconnected" in caplog.text, caplog.text
    untrusted_ca = secure.pki.untrusted_ca.write_certificate(secure.broker.data_dir.parent / "untrusted-ca.pem")
    for conf in ({**_confluent(secure, "PLAIN", "carol"), "ssl.ca.location": str(untrusted_ca)},  # untrusted CA
                 _mtls_confluent(secure, secure.pki.client_keystore, ca=untrusted_ca),
                 _mtls_confluent(secure, secure.pki.untrusted_client_keystore)):  # a certificate of another CA
        assert _confluent_refusal(conf) <= DOWN
    plaintext = {"bootstrap.servers": secure.address("SSL"), "socket.timeout.ms": 5000}
    assert _confluent_refusal(plaintext) <= DOWN
    assert secure.metric("bus_failed_authentication_total", listener="SASL_SSL") >= failed_sasl + 4
    # mallory's certificate and the plaintext client fail the handshake on the broker's side
    assert secure.metric("bus_failed_authentication_total", listener="SSL", mechanism="SSL") >= failed_tls + 2
    logs = secure.broker.logs()
    assert "guessed" not in logs and "Failed authentication with 127.0.0.1:" in logs
    assert "(mechanism SCRAM-SHA-512, user 'alice'): Invalid client credentials" in logs


# -- SCRAM credentials through the admin API ------------------------------------------------------------------------


def test_describe_and_alter_user_scram_credentials(secure: GuestedBroker) -> None:
    admin = AdminClient(_confluent(secure, "SCRAM-SHA-256", "admin"))
    described = admin.describe_user_scram_credentials().result(15)
    mechanisms = {user: sorted((info.mechanism, info.iterations) for info in description.scram_credential_infos)
                  for user, description in described.items()}
    assert mechanisms == {"admin": [(ScramMechanism.SCRAM_SHA_256, 4096)],
                          "alice": [(ScramMechanism.SCRAM_SHA_512, 8192)],
                          "bob": [(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 8192)]}
    with pytest.raises(KafkaException, match="does not exist"):
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(15)
    too_few = UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw")
    with pytest.raises(KafkaException, match="Too few iterations"):
        admin.alter_user_scram_credentials([too_few])["dave"].result(15)
    dave = UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"dave-pw")
    assert admin.alter_user_scram_credentials([dave])["dave"].result(15) is None
    topic = _topic(secure, "dave")
    assert _produce_error(_confluent(secure, "SCRAM-SHA-512", "dave", "dave-pw"), topic).code() == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED  # logged in (not a super user)
    deletion = UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_512)
    assert admin.alter_user_scram_credentials([deletion])["dave"].result(15) is None
    assert KafkaError._AUTHENTICATION in _confluent_refusal(_confluent(secure, "SCRAM-SHA-512", "dave", "dave-pw"))


# -- raw sockets: what no client sends ------------------------------------------------------------------------------


def _tls_context(secure: GuestedBroker, keystore: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(secure.pki.truststore))
    if keystore is not None:
        context.load_cert_chain(str(keystore))
    return context


def _raw(secure: GuestedBroker, listener: str, keystore: Path | None = None) -> RawKafka:
    raw = RawKafka(secure.address(listener))
    if listener.endswith("SSL"):
        raw.sock = _tls_context(secure, keystore).wrap_socket(raw.sock, server_hostname="localhost")
    return raw


def _closed_by_peer(sock: socket.socket, wait: float = 5.0) -> bool:
    """True when the broker closes the connection within `wait` seconds having sent nothing."""
    sock.settimeout(wait)
    try:
        return sock.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


def _closes(sock: socket.socket, wait: float = 10.0) -> bool:
    """True when the broker closes a connection whose TLS handshake cannot succeed within `wait` seconds (a TLS
    alert may come first; no Kafka answer can)."""
    sock.settimeout(wait)
    received = b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
            if len(received) > 1024:
                return False
    except (ConnectionResetError, BrokenPipeError):
        pass
    except TimeoutError:
        return False
    return True


def _handshake(raw: RawKafka, mechanism: str) -> Any:
    return raw.request(SaslHandshakeRequest(mechanism=mechanism))


def _authenticate(raw: RawKafka, token: bytes) -> Any:
    return raw.request(SaslAuthenticateRequest(auth_bytes=token))


def assert_sasl_still_serves(secure: GuestedBroker, tag: str) -> None:
    topic = _topic(secure, tag)
    assert _confluent_round_trip(_confluent(secure, "SCRAM-SHA-512", "alice"), topic, b"fine") == [b"fine"]


def test_garbage_and_plaintext_on_a_tls_port_and_a_handshake_that_never_ends(secure: GuestedBroker) -> None:
    api_versions = header_only(18, 0, 1)  # what a client configured for PLAINTEXT sends first
    for payload in (b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", struct.pack(">i", len(api_versions)) + api_versions):
        with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=5) as sock:
            sock.sendall(payload)
            assert _closes(sock)
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_SSL"]), timeout=5) as silent, \
            socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=5) as partial:
        partial.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, and nothing more
        assert _closes(silent) and _closes(partial)
    assert HANDSHAKE_TIMEOUT_S * 0.9 <= time.monotonic() - started < HANDSHAKE_TIMEOUT_S + 5
    assert_sasl_still_serves(secure, "after-tls-garbage")


def test_before_authentication_only_the_exchange_is_answered(secure: GuestedBroker) -> None:
    """A Produce or Metadata before the handshake, or anything but SaslAuthenticate after it, closes the connection
    with nothing sent; ApiVersions is answered."""
    batch = rb.build_batch([(0, 1_700_000_000_000, None, b"sneaky")], base_offset=0)
    topic = _topic(secure, "sneaky")
    for listener in ("SASL_SSL", "SASL_PLAINTEXT"):
        for handshake_first, request in ((False, produce_request(topic, 0, batch)), (False, metadata_request()),
                                         (True, produce_request(topic, 0, batch)), (True, metadata_request())):
            with _raw(secure, listener) as raw:
                assert raw.request(api_versions_request()).error_code == ErrorCode.none
                if handshake_first:
                    assert _handshake(raw, "PLAIN").error_code == ErrorCode.none
                raw.send_frame(raw.encode(request))
                assert _closed_by_peer(raw.sock)
    assert consume(secure.broker.bootstrap, topic, count=0) == []  # nothing was written


def test_unknown_mechanisms_bad_tokens_and_tokens_too_large(secure: GuestedBroker) -> None:
    with _raw(secure, "SASL_SSL") as raw:
        started = time.monotonic()
        answer = _handshake(raw, "GSSAPI")
        assert time.monotonic() - started >= FAILURE_DELAY_S
        assert answer.error_code == UNSUPPORTED_SASL_MECHANISM and answer.mechanisms == MECHANISMS
        assert _closed_by_peer(raw.sock)
    for mechanism, token, message in (
            ("PLAIN", b"no-nul-at-all", "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
            ("PLAIN", b"\x00carol\x00\xff\xfe", "Authentication failed: Invalid username or password"),
            ("SCRAM-SHA-256", b"\x00" * 5000, "Authentication failed during authentication due to invalid "
                                              "credentials with SASL mechanism SCRAM-SHA-256"),
            ("SCRAM-SHA-512", b"n,,n=alice,r=" + b"A" * 100_000, None)):
        with _raw(secure, "SASL_PLAINTEXT") as raw:
            assert _handshake(raw, mechanism).error_code == ErrorCode.none
            started = time.monotonic()
            answer = _authenticate(raw, token)
            if message is None:  # a well-formed first message: the exchange goes on
                assert answer.error_code == ErrorCode.none
                continue
            assert time.monotonic() - started >= FAILURE_DELAY_S
            assert (answer.error_code, answer.error_message) == (SASL_AUTHENTICATION_FAILED, message)
            assert _closed_by_peer(raw.sock)
    with _raw(secure, "SASL_SSL") as raw:  # over sasl.server.max.receive.size: closed, nothing read past it
        assert _handshake(raw, "PLAIN").error_code == ErrorCode.none
        raw.send_raw(struct.pack(">i", 524288 + 1) + b"\x00" * 1024)
        assert _closed_by_peer(raw.sock)
    assert_sasl_still_serves(secure, "after-bad-tokens")


def test_the_v0_handshake_takes_bare_tokens(secure: GuestedBroker) -> None:
    """SaslHandshake v0 (which Kafka 4.0 still serves) is followed by a bare size-prefixed token, then requests."""
    with _raw(secure, "SASL_SSL") as raw:
        answer = raw.request(SaslHandshakeV0(mechanism="PLAIN"))
        assert answer.error_code == ErrorCode.none
        raw.send_frame(b"\x00carol\x00carol-secret")
        assert raw.read_frame() == b""
        assert raw.request(metadata_request()).brokers
    with _raw(secure, "SASL_PLAINTEXT") as raw:
        raw.request(SaslHandshakeV0(mechanism="PLAIN"))
        raw.send_frame(b"\x00carol\x00wrong")
        assert _closed_by_peer(raw.sock)


def test_sasl_requests_outside_an_exchange_are_illegal_and_harmless(secure: GuestedBroker) -> None:
    with _raw(secure, "PLAINTEXT") as raw:
        assert _handshake(raw, "PLAIN").error_code == ILLEGAL_SASL_STATE
        assert _authenticate(raw, b"\x00carol\x00carol-secret").error_code == ILLEGAL_SASL_STATE
        assert raw.request(metadata_request()).brokers  # the connection stays
    with _raw(secure, "SASL_SSL") as raw:
        _handshake(raw, "PLAIN")
        assert _authenticate(raw, b"\x00carol\x00carol-secret").error_code == ErrorCode.none
        answer = _authenticate(raw, b"\x00carol\x00carol-secret")
        assert answer.error_code == ILLEGAL_SASL_STATE
        assert answer.error_message == "SaslAuthenticate request received after successful authentication"
        assert _handshake(raw, "PLAIN").error_code == ILLEGAL_SASL_STATE  # no session lifetime on SASL_SSL
        assert raw.request(metadata_request()).brokers


def test_connections_that_never_authenticate_cost_little_and_block_nobody(secure: GuestedBroker) -> None:
    process = psutil.Process(secure.broker.proc.pid)  # type: ignore[union-attr]
    before = process.memory_info().rss
    idle: list[socket.socket] = []
    try:
        for _ in range(100):  # TLS done, SASL handshake done, never a token
            raw = _raw(secure, "SASL_SSL")
            _handshake(raw, "SCRAM-SHA-512")
            idle.append(raw.sock)
        for listener in ("SASL_PLAINTEXT", "SSL", "SASL_SSL"):  # connected, silent
            idle += [socket.create_connection(("127.0.0.1", secure.ports[listener]), timeout=5) for _ in range(100)]
        for sock in idle[100:200]:  # half a token each
            sock.sendall(struct.pack(">i", 400_000) + b"\x00" * 1000)
        assert_sasl_still_serves(secure, "among-idle")
        grown = process.memory_info().rss - before
        assert grown < 80 << 20, f"RSS grew {grown >> 20} MiB for 400 unauthenticated connections"
        started = time.monotonic()
        assert all(_closes(sock) for sock in idle[200:400])  # the TLS handshakes time out
        assert time.monotonic() - started < HANDSHAKE_TIMEOUT_S + 8
    finally:
        for sock in idle:
            sock.close()


# -- re-authentication (KIP-368) --------------------------------------------------------------------------------------


def test_sessions_end_unless_renewed(secure: GuestedBroker) -> None:
    """On SASL_PLAINTEXT a session lasts 2 s: kafka-python renews it and keeps producing over the same connections;
    a connection that does not is closed when its session ends."""
    topic = _topic(secure, "reauth")
    renewed = secure.metric("bus_successful_reauthentication_total", listener="SASL_PLAINTEXT")
    expired = secure.metric("bus_expired_connections_killed_total", listener="SASL_PLAINTEXT")
    with _raw(secure, "SASL_PLAINTEXT") as raw:
        raw.request(SaslHandshakeRequest(mechanism="PLAIN"))
        answer = raw.request(SaslAuthenticateV1(auth_bytes=b"\x00carol\x00carol-secret"))
        assert answer.error_code == ErrorCode.none and answer.session_lifetime.total_seconds() * 1000 == REAUTH_MS
        started = time.monotonic()
        assert raw.request(metadata_request()).brokers
        assert _closed_by_peer(raw.sock, REAUTH_MS / 1000 + 5)
        assert time.monotonic() - started >= REAUTH_MS / 1000 * 0.9
    producer = KafkaProducer(bootstrap_servers=secure.address("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="bob",
                             sasl_plain_password="bob-secret", request_timeout_ms=10000)
    try:
        deadline = time.monotonic() + 2.5 * REAUTH_MS / 1000
        sent = 0
        while time.monotonic() < deadline:
            producer.send(topic, f"record {sent}".encode()).get(10)
            sent += 1
            time.sleep(0.2)
    finally:
        producer.close(5)
    assert len(consume(secure.broker.bootstrap, topic, count=sent)) == sent
    assert secure.metric("bus_successful_reauthentication_total", listener="SASL_PLAINTEXT") > renewed
    assert secure.metric("bus_expired_connections_killed_total", listener="SASL_PLAINTEXT") >= expired + 1


# -- last: a restart --------------------------------------------------------------------------------------------------


def test_credentials_survive_a_restart(secure: GuestedBroker) -> None:
    """The users `storage format` created and the ones AlterUserScramCredentials created log in after a restart."""
    secure.broker.restart()
    for mechanism, user in (("SCRAM-SHA-256", "admin"), ("SCRAM-SHA-512", "bob"), ("SCRAM-SHA-512", "alice")):
        topic = _topic(secure, f"restarted-{user}")
        assert _confluent_round_trip(_confluent(secure, mechanism, user), topic, user.encode()) == [user.encode()]


# -- a configuration that cannot work --------------------------------------------------------------------------------


@pytest.mark.parametrize(("listener", "overrides", "mentions"), [
    ("SSL", {"listener.name.ssl.ssl.keystore.location": "/no/such/keystore.pem"},
     "listener.name.ssl.ssl.keystore.location: /no/such/keystore.pem: No such file or directory"),
    ("SASL_PLAINTEXT", {}, "listener.name.sasl_plaintext.plain.sasl.jaas.config is not set: the JAAS login module "
                           "for PLAIN"),
])
def test_a_bad_security_config_stops_the_start_with_one_line(tmp_path: Path, listener: str,
                                                             overrides: dict[str, str], mentions: str) -> None:
    listeners = (f"PLAINTEXT://127.0.0.1:{free_port()},CONTROLLER://127.0.0.1:{free_port()},"
                 f"{listener}://127.0.0.1:{free_port()}")
    command = [sys.executable, "-m", "bus", "broker", "--override", f"listeners={listeners}",
               "--override", f"log.dirs={tmp_path}", "--override", "ssl.keystore.type=PEM",
               "--override", "sasl.enabled.mechanisms=PLAIN"]
    for key, value in overrides.items():
        command += ["--override", f"{key}={value}"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=60)
    error = done.stderr.decode()
    assert done.returncode == 2, error
    assert "Traceback" not in error
    assert error.strip().splitlines()[-1] == f"bus broker: configuration error: {mentions}"


# -- a cluster: alterations go to the active controller, every node gets them -----------------------------------------


def _described(node: BrokerProcess) -> dict[str, list[tuple[int, int]]] | None:
    """Each user's (mechanism, iterations) as `node` describes them; None while it cannot answer."""
    try:
        with RawKafka(node.bootstrap) as raw:
            answer = raw.request(DescribeUserScramCredentialsRequest(users=None))
    except OSError:
        return None
    return {result.user: sorted((info.mechanism, info.iterations) for info in result.credential_infos)
            for result in answer.results}


@pytest.mark.slow
def test_a_cluster_forwards_alterations_and_every_node_has_the_credentials(tmp_path: Path) -> None:
    """Every node is formatted with the same first user, as Kafka's operators do; an alteration sent to a node that
    is not the active controller is forwarded to it (KIP-590), and every node describes the committed result."""
    cluster = ClusterProcess(tmp_path, 3)
    for node in cluster:
        format_storage(node, "SCRAM-SHA-256=[name=admin,password=admin-secret]")
    running = started(cluster)
    next(running)
    try:
        leader = cluster.leader()
        follower = next(node for node_id, node in cluster.nodes.items() if node_id != leader)
        salted = hashlib.pbkdf2_hmac("sha512", b"bob-secret", b"bob-salt", 8192)
        with RawKafka(follower.bootstrap) as raw:
            answer = raw.request(AlterUserScramCredentialsRequest(deletions=(), upsertions=(ScramCredentialUpsertion(
                name="bob", mechanism=2, iterations=8192, salt=b"bob-salt", salted_password=salted),)))
        assert [(result.user, result.error_code) for result in answer.results] == [("bob", ErrorCode.none)]
        expected = {"admin": [(1, 4096)], "bob": [(2, 8192)]}
        until(lambda: all(_described(node) == expected for node in cluster) or None, 30,
              "the credentials on every node")
    finally:
        running.close()
