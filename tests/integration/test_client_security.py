"""The native client and the `bus` tools against secured listeners of a real broker (`tests/support/secure_broker.py`):
producer, consumer (in a group) and admin over SASL_SSL with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 and over mutual
TLS; refusals as AuthenticationErrors in seconds; a tool with wrong or no credentials failing in one line; a SCRAM
user made with `bus configs --entity-type users` that confluent-kafka then logs in as; and KIP-368 re-authentication
keeping a busy producer's connection alive across sessions."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from bus.cli import main
from bus.client import KafkaConsumer, KafkaProducer
from bus.client.admin import (
    AclBinding,
    AclOperation,
    AdminClient,
    NewTopic,
    PatternType,
    PermissionType,
    ResourceType,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from bus.client.errors import KafkaConnectionError, SaslAuthenticationError, SslAuthenticationError
from contracts.processes import ROOT
from testkit.clients import consume, producer_config
from tests.support.secure_broker import PASSWORDS, SecureBroker, start_secure_broker

REAUTH_MS = 2000
FAST = {"socket.connection.setup.timeout.ms": 5000, "request.timeout.ms": 10000, "max.block.ms": 10000}
# Who logs in with what: PLAIN's JAAS user, and the two users `bus storage format --add-scram` made.
LOGINS = {"PLAIN": "carol", "SCRAM-SHA-256": "admin", "SCRAM-SHA-512": "alice"}


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    secured = start_secure_broker(tmp_path_factory.mktemp("client-security"), reauth_ms=REAUTH_MS)
    try:
        yield secured
    finally:
        secured.broker.stop()


def _round_trip(conf: dict[str, Any], values: list[bytes]) -> list[bytes]:
    """Create a topic with the admin client, produce `values`, read them back in a consumer group and commit."""
    topic = f"native-{uuid.uuid4().hex[:8]}"
    with AdminClient({**conf, **FAST}) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
    with KafkaProducer({**conf, **FAST, "linger.ms": 0}) as producer:
        for value in values:
            producer.send(topic, value=value).get(15)
    consumer = KafkaConsumer({**conf, **FAST, "group.id": f"group-{topic}", "auto.offset.reset": "earliest",
                              "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < len(values) and time.monotonic() < deadline:
            got += [record.value for record in consumer.poll(0.5)]
        consumer.commit_sync()
    finally:
        consumer.close()
    with AdminClient({**conf, **FAST}) as admin:
        assert [o.offset for o in admin.list_consumer_group_offsets(f"group-{topic}").values()] == [len(values)]
    return got


@pytest.mark.parametrize("mechanism", sorted(LOGINS))
def test_producer_consumer_and_admin_over_sasl_ssl(secure: SecureBroker, mechanism: str) -> None:
    values = [f"{mechanism} {i}".encode() for i in range(3)]
    assert _round_trip(secure.client_config("SASL_SSL", mechanism, LOGINS[mechanism]), values) == values


def test_producer_consumer_and_admin_over_mutual_tls(secure: SecureBroker) -> None:
    values = [b"with alice's certificate"]
    assert _round_trip(secure.client_config("SSL"), values) == values


def test_librdkafka_style_credentials(secure: SecureBroker) -> None:
    conf = secure.client_config("SASL_PLAINTEXT") | {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                                                     "sasl.password": PASSWORDS["alice"]}
    with AdminClient({**conf, **FAST}) as admin:
        assert admin.describe_cluster().brokers


# -- refusals -------------------------------------------------------------------------------------------------------


def _refused(make: Any) -> Exception:
    started = time.monotonic()
    with pytest.raises(Exception) as raised:
        make()
    assert time.monotonic() - started < 8, "an authentication failure must not wait for a timeout"
    return raised.value


def test_a_wrong_password_is_refused_at_once_by_admin_producer_and_consumer(secure: SecureBroker) -> None:
    conf = {**secure.client_config("SASL_SSL", "SCRAM-SHA-512", "alice", "guessed"), **FAST}
    expected = "Authentication failed during authentication due to invalid credentials with SASL mechanism " \
               "SCRAM-SHA-512"
    admin_error = _refused(lambda: AdminClient(conf))
    with KafkaProducer(conf) as producer:
        producer_error = _refused(lambda: producer.send("anything", value=b"x"))
    consumer = KafkaConsumer({**conf, "group.id": "refused"})
    consumer.subscribe(["anything"])
    consumer_error = _refused(lambda: consumer.poll(5))
    consumer.close(timeout=1)
    for error in (admin_error, producer_error, consumer_error):
        assert isinstance(error, SaslAuthenticationError) and str(error) == expected
    plain = _refused(lambda: AdminClient({**secure.client_config("SASL_SSL", "PLAIN", "carol", "guessed"), **FAST}))
    assert isinstance(plain, SaslAuthenticationError) and str(plain) == "Authentication failed: Invalid username " \
                                                                         "or password"


def test_tls_refusals(secure: SecureBroker) -> None:
    untrusted = secure.pki.untrusted_ca.write_certificate(secure.broker.data_dir.parent / "other-ca.pem")
    wrong_ca = _refused(lambda: AdminClient({**secure.client_config("SASL_SSL", "PLAIN", "carol"),
                                             "ssl.truststore.location": str(untrusted), **FAST}))
    assert isinstance(wrong_ca, SslAuthenticationError) and "certificate verify failed" in str(wrong_ca)
    no_certificate = {k: v for k, v in secure.client_config("SSL").items() if not k.startswith("ssl.keystore")}
    refused = _refused(lambda: AdminClient({**no_certificate, **FAST}))
    assert isinstance(refused, SslAuthenticationError), refused
    foreign = {**secure.client_config("SSL"), "ssl.keystore.location": str(secure.pki.untrusted_client_keystore)}
    assert isinstance(_refused(lambda: AdminClient({**foreign, **FAST})), SslAuthenticationError)
    plaintext = _refused(lambda: AdminClient({"bootstrap.servers": secure.address("SASL_SSL"), **FAST}))
    assert isinstance(plaintext, KafkaConnectionError) and "security.protocol is PLAINTEXT" in str(plaintext)


def _properties(path: Path, conf: dict[str, str]) -> Path:
    path.write_text("".join(f"{key}={value}\n" for key, value in conf.items() if key != "bootstrap.servers"))
    return path


@pytest.mark.parametrize("credentials", ["wrong", "none"])
def test_a_tool_without_the_right_credentials_exits_1_with_one_line(secure: SecureBroker, tmp_path: Path,
                                                                    credentials: str) -> None:
    command = [sys.executable, "-m", "bus", "topics", "--bootstrap-server", secure.address("SASL_SSL"), "--list"]
    if credentials == "wrong":
        config = secure.client_config("SASL_SSL", "SCRAM-SHA-256", "admin", "not-the-password")
        command += ["--command-config", str(_properties(tmp_path / "client.properties", config))]
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("Error while executing topic command : ")
    assert time.monotonic() - started < 15
    assert "not-the-password" not in done.stderr
    reason = "invalid credentials with SASL mechanism SCRAM-SHA-256" if credentials == "wrong" else \
        "security.protocol is PLAINTEXT"
    assert reason in done.stderr


# -- SCRAM users made with bus configs -------------------------------------------------------------------------------


def _confluent(secure: SecureBroker, mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {"bootstrap.servers": secure.address("SASL_SSL"), "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
            "ssl.ca.location": str(secure.pki.truststore)}


def _confluent_produce(conf: dict[str, Any], topic: str) -> KafkaError | None:
    """One record's delivery error (None: delivered)."""
    producer = Producer(producer_config(conf["bootstrap.servers"], **conf))
    outcome: list[KafkaError | None] = []
    producer.produce(topic, value=b"from confluent", on_delivery=lambda error, _message: outcome.append(error))
    producer.flush(15)
    return outcome[0] if outcome else KafkaError(KafkaError._TIMED_OUT)


def test_a_scram_user_made_with_bus_configs_logs_in_with_confluent(
        secure: SecureBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    admin = secure.client_config("SASL_SSL", "SCRAM-SHA-256", "admin")
    admin_config = _properties(tmp_path / "admin.properties", admin)
    connection = ["--bootstrap-server", secure.address("SASL_SSL"), "--command-config", str(admin_config)]
    topic = f"dave-{uuid.uuid4().hex[:6]}"

    def bus(*argv: str) -> str:
        assert main([argv[0], *connection, *argv[1:]]) == 0, capsys.readouterr().err
        return capsys.readouterr().out

    assert bus("configs", "--alter", "--entity-type", "users", "--entity-name", "dave", "--add-config",
               "SCRAM-SHA-256=[iterations=8192,password=dave-secret],SCRAM-SHA-512=[password=dave-secret]") == \
        "Completed updating config for user dave.\n"
    assert bus("configs", "--describe", "--entity-type", "users", "--entity-name", "dave") == \
        "SCRAM credential configs for user-principal 'dave' are SCRAM-SHA-256=iterations=8192, " \
        "SCRAM-SHA-512=iterations=4096\n"
    bus("topics", "--create", "--topic", topic)
    bus("acls", "--add", "--allow-principal", "User:dave", "--operation", "All", "--topic", topic)
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        assert _confluent_produce(_confluent(secure, mechanism, "dave", "dave-secret"), topic) is None
    assert len(consume(secure.broker.bootstrap, topic, count=2)) == 2

    bus("configs", "--alter", "--entity-type", "users", "--entity-name", "dave", "--delete-config", "SCRAM-SHA-512")
    error = _confluent_produce({**_confluent(secure, "SCRAM-SHA-512", "dave", "dave-secret"),
                                "message.timeout.ms": 3000}, topic)
    assert error is not None and error.code() != KafkaError.NO_ERROR
    assert _confluent_produce(_confluent(secure, "SCRAM-SHA-256", "dave", "dave-secret"), topic) is None


# -- KIP-368 ---------------------------------------------------------------------------------------------------------


def test_a_busy_producer_reauthenticates_instead_of_losing_its_connection(secure: SecureBroker) -> None:
    """Sessions on SASL_PLAINTEXT last REAUTH_MS: over three of them the producer's connection re-authenticates in
    place (the broker counts re-authentications), so no request is lost to a closed connection (no retries)."""
    conf = {**secure.client_config("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice"), **FAST}
    topic = f"reauth-{uuid.uuid4().hex[:6]}"
    with AdminClient(conf) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
    before = secure.metric("bus_successful_reauthentication_total", listener="SASL_PLAINTEXT")
    with KafkaProducer({**conf, "linger.ms": 0}) as producer:
        futures = []
        deadline = time.monotonic() + 3 * REAUTH_MS / 1000
        while time.monotonic() < deadline:
            futures.append(producer.send(topic, value=b"x"))
            time.sleep(0.05)
        for future in futures:
            future.get(15)
        assert producer.metrics()["record-retry-total"] == 0
    assert secure.metric("bus_successful_reauthentication_total", listener="SASL_PLAINTEXT") >= before + 2


def test_a_refused_reauthentication_fails_the_records_with_the_authentication_error(secure: SecureBroker) -> None:
    """erin's credential is deleted while her producer runs: its next re-authentication is refused, and the records
    sent after that fail with the SaslAuthenticationError, not with a timeout."""
    topic = f"erin-{uuid.uuid4().hex[:6]}"
    with AdminClient({**secure.client_config("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice"), **FAST}) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion("erin", "SCRAM-SHA-512", 4096, "erin-pw")])
        admin.create_acls([AclBinding(ResourceType.TOPIC, topic, PatternType.LITERAL, "User:erin", "*",
                                      AclOperation.ALL, PermissionType.ALLOW)])
        with KafkaProducer({**secure.client_config("SASL_PLAINTEXT", "SCRAM-SHA-512", "erin", "erin-pw"), **FAST,
                            "linger.ms": 0}) as producer:
            producer.send(topic, value=b"before").get(15)
            admin.alter_user_scram_credentials([UserScramCredentialDeletion("erin", "SCRAM-SHA-512")])
            error: Exception | None = None
            deadline = time.monotonic() + 3 * REAUTH_MS / 1000
            while error is None and time.monotonic() < deadline:
                try:
                    producer.send(topic, value=b"after").get(15)
                except SaslAuthenticationError as exc:
                    error = exc
                time.sleep(0.05)
    assert isinstance(error, SaslAuthenticationError) and "invalid credentials" in str(error)
