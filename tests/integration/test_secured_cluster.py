"""`python -m deploy.cluster --nodes 3 --secure`: TLS and SASL between the nodes as well as to the clients.

Replica fetches and transaction markers run over SASL_SSL with SCRAM, the KRaft RPCs, registration, heartbeats and
forwarding over the SASL_SSL controller listener with PLAIN, every node checking the others' certificates. Judged
by librdkafka (confluent-kafka) and by raw connections that try to reach the controller listener without the
cluster's credentials: none gets a response, and the cluster keeps its three brokers. ACLs and SCRAM credentials
are metadata: they survive a kill -9 of the quorum leader and a restart of the whole cluster."""

from __future__ import annotations

import asyncio
import json
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from bus.network.network_client import NodeAuthenticationError, NodeConnection, NodeConnectionError
from bus.network.node_security import NodeSecurity
from bus.protocol.messages import request_shapes
from bus.security.sasl_login import SaslCredentials
from deploy.processes.cluster import StartedCluster, start_deploy_cluster, until
from testkit.tls import make_pki

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 30
DESCRIBE_QUORUM = 55
DESCRIBE_ACLS = 29
DESCRIBE_SCRAM = 50


class Secured:
    """A running `--secure` cluster: its addresses, its CA and its generated passwords (read from its files)."""

    def __init__(self, data_dir: Path, started: StartedCluster) -> None:
        self.data_dir = data_dir
        self.started = started
        self.security = data_dir / "security"
        self.passwords: dict[str, str] = json.loads((self.security / "passwords.json").read_text())

    @property
    def bootstrap(self) -> str:
        return ",".join(self.started.servers)

    def conf(self, user: str = "admin", password: str | None = None, **extra: str) -> dict[str, str]:
        """librdkafka's settings for `user` over SASL_SSL with SCRAM-SHA-512, trusting the cluster's CA."""
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
                "sasl.password": self.passwords[user] if password is None else password,
                "ssl.ca.location": str(self.security / "ca.pem"), **extra}

    def controller_addresses(self) -> list[tuple[str, int]]:
        voters = (self.data_dir / "voters").read_text().strip().split(",")
        return [(v.split("@")[1].rsplit(":", 1)[0], int(v.rsplit(":", 1)[1])) for v in voters]

    def node_pid(self, node_id: int) -> int:
        for proc in psutil.process_iter(["cmdline"]):
            if str(self.data_dir / f"node-{node_id}.properties") in (proc.info["cmdline"] or []):
                return proc.pid
        raise AssertionError(f"node {node_id} is not running")

    def stop(self) -> None:
        self.started.proc.send_signal(signal.SIGTERM)
        self.started.proc.wait(90)


def _start(data_dir: Path) -> Secured:
    return Secured(data_dir, start_deploy_cluster(data_dir, "--secure"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    secured = _start(tmp_path_factory.mktemp("secured"))
    try:
        yield secured
    finally:
        secured.stop()


def _quorum_leader(secured: Secured) -> int | None:
    from bus.client.admin import AdminClient as NativeAdmin

    conf = {"bootstrap.servers": secured.bootstrap, "default.api.timeout.ms": 3000,
            "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" '
                                f'password="{secured.passwords["admin"]}";',
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(secured.security / "ca.pem")}
    try:
        with NativeAdmin(conf) as admin:
            quorum = admin.describe_metadata_quorum()
    except Exception:  # no leader yet, or the node asked is the dead one
        return None
    return quorum.leader_id if quorum.leader_id >= 0 else None


def _produce(conf: dict[str, str], topic: str, values: list[bytes]) -> None:
    producer = Producer({**conf, "acks": "all", "message.timeout.ms": "20000"})
    failures: list[KafkaError] = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _msg: failures.append(err) if err else None)
    assert producer.flush(TIMEOUT) == 0
    assert not failures, failures


def _consume(conf: dict[str, str], topic: str, count: int) -> list[bytes]:
    consumer = Consumer({**conf, "group.id": f"g-{topic}-{time.monotonic_ns()}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    return got


def test_replicas_follow_over_sasl_ssl_and_the_client_properties_are_printed_not_the_passwords(
        cluster: Secured) -> None:
    admin = AdminClient(cluster.conf())
    admin.create_topics([NewTopic("plates", 3, 3)])["plates"].result(TIMEOUT)
    values = [f"plate-{i}".encode() for i in range(200)]
    _produce(cluster.conf(), "plates", values)  # acks=all: every follower fetched it over SASL_SSL
    assert sorted(_consume(cluster.conf(), "plates", len(values))) == sorted(values)
    partitions = admin.list_topics("plates", timeout=TIMEOUT).topics["plates"].partitions.values()
    assert all(sorted(p.isrs) == [1, 2, 3] for p in partitions)
    printed = cluster.started.printed
    assert str(cluster.security / "client.properties") in printed and "security.protocol=SASL_SSL" in printed
    logs = "".join(path.read_text() for path in cluster.data_dir.glob("node-*.log"))
    for password in cluster.passwords.values():
        assert password not in printed and password not in logs
        for proc in psutil.process_iter(["cmdline"]):
            assert password not in " ".join(proc.info["cmdline"] or []), proc.info["cmdline"]
    for path in [*cluster.security.iterdir(), *cluster.data_dir.glob("node-*.properties")]:
        if path.name != "ca.pem":
            assert path.stat().st_mode & 0o077 == 0, f"{path} is readable by others"
    # The bus tools take the printed file as their --command-config.
    tool = subprocess.run([sys.executable, "-m", "bus", "topics", "--bootstrap-server", cluster.bootstrap,
                           "--command-config", str(cluster.security / "client.properties"), "--describe",
                           "--topic", "plates"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert tool.returncode == 0 and "ReplicationFactor: 3" in tool.stdout, tool.stdout + tool.stderr


def _try_controller(address: tuple[str, int], security: NodeSecurity) -> BaseException | None:
    """A DescribeQuorum on the controller listener with `security`; the error it ends with (None: answered)."""
    async def attempt() -> BaseException | None:
        connection = NodeConnection(*address, "intruder", request_timeout_s=5, connect_timeout_s=5,
                                    security=security)
        try:
            await connection.request(request_shapes(DESCRIBE_QUORUM, 1).make("DescribeQuorumRequest", topics=()), 1)
        except NodeConnectionError as exc:
            return exc
        finally:
            await connection.close()
        return None
    return asyncio.run(attempt())


def test_nobody_without_the_clusters_credentials_gets_an_answer_on_the_controller_listener(
        cluster: Secured, tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    trusting = ssl.create_default_context(cafile=str(cluster.security / "ca.pem"))
    foreign_ca = ssl.create_default_context(cafile=str(pki.truststore))
    address = cluster.controller_addresses()[0]
    attempts = {
        "plaintext": NodeSecurity(),
        "tls without a login": NodeSecurity("CONTROLLER", "SSL", trusting),
        "the admin's password": NodeSecurity("CONTROLLER", "SASL_SSL", trusting,
                                             SaslCredentials("PLAIN", "admin", cluster.passwords["admin"])),
        "a wrong broker password": NodeSecurity("CONTROLLER", "SASL_SSL", trusting,
                                                SaslCredentials("PLAIN", "broker", "guessed")),
        "another CA's listener": NodeSecurity("CONTROLLER", "SASL_SSL", foreign_ca,
                                              SaslCredentials("PLAIN", "broker", cluster.passwords["broker"])),
    }
    for what, security in attempts.items():
        error = _try_controller(address, security)
        assert error is not None, f"{what}: the controller answered"
    assert isinstance(_try_controller(address, attempts["the admin's password"]), NodeAuthenticationError)
    assert isinstance(_try_controller(address, attempts["another CA's listener"]), NodeAuthenticationError)
    # The node's own credentials are what it takes (and all it takes).
    node = NodeSecurity("CONTROLLER", "SASL_SSL", trusting,
                        SaslCredentials("PLAIN", "broker", cluster.passwords["broker"]))
    assert _try_controller(address, node) is None
    metadata = AdminClient(cluster.conf()).list_topics(timeout=TIMEOUT)
    assert sorted(metadata.brokers) == [1, 2, 3]


def _acl(user: str, topic: str, operation: AclOperation) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, f"User:{user}", "*", operation,
                      AclPermissionType.ALLOW)


def _alice_is_held_to_her_acls(secured: Secured) -> None:
    alice = secured.conf("alice")
    _produce(alice, "evidence", [b"seen"])
    admin = AdminClient(alice)  # held: a dropped handle fails its futures with _DESTROY
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic("not-hers", 1, 3)])["not-hers"].result(TIMEOUT)
    assert refused.value.args[0].code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                            KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    wrong = Producer({**secured.conf("alice", password="not-hers"), "message.timeout.ms": "5000"})
    errors: list[KafkaError] = []
    wrong.produce("evidence", b"x", on_delivery=lambda err, _msg: errors.append(err))
    wrong.flush(15)
    assert errors and errors[0] is not None


@pytest.mark.slow
def test_acls_and_scram_credentials_survive_a_leader_kill_and_a_cluster_restart(tmp_path: Path) -> None:
    secured = _start(tmp_path)
    try:
        admin = AdminClient(secured.conf())
        admin.create_topics([NewTopic("evidence", 1, 3)])["evidence"].result(TIMEOUT)
        secured.passwords["alice"] = "alice-secret"
        upsert = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                              b"alice-secret")
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(TIMEOUT)
        for future in admin.create_acls([_acl("alice", "evidence", AclOperation.WRITE)]).values():
            future.result(TIMEOUT)
        until(lambda: _every_broker_knows_alice(secured), TIMEOUT, "alice's ACL and credential on every broker")
        _alice_is_held_to_her_acls(secured)

        leader = until(lambda: _quorum_leader(secured), TIMEOUT, "a quorum leader")
        psutil.Process(secured.node_pid(leader)).kill()  # kill -9 the active controller
        new_leader = until(lambda: (lambda found: found if found not in (None, leader) else None)(
            _quorum_leader(secured)), 60, "a new quorum leader")
        assert new_leader != leader
        _alice_is_held_to_her_acls(secured)

        secured.stop()
        secured = _start(tmp_path)  # no --secure: a cluster made secured starts secured
        secured.passwords["alice"] = "alice-secret"
        until(lambda: _every_broker_knows_alice(secured), 60, "alice's ACL and credential after the restart")
        _alice_is_held_to_her_acls(secured)
    finally:
        secured.stop()


def _every_broker_knows_alice(secured: Secured) -> bool | None:
    """Whether each broker's own metadata image holds alice's ACL and SCRAM credential (asked of each broker on its
    own connection: ACLs reach the brokers one by one, and a client's metadata request may go to any of them, so one
    successful write proves nothing of the others; Kafka's tests wait on every broker's authorizer likewise)."""
    security = NodeSecurity("SASL_SSL", "SASL_SSL",
                            ssl.create_default_context(cafile=str(secured.security / "ca.pem")),
                            SaslCredentials("SCRAM-SHA-512", "admin", secured.passwords["admin"]))
    acls = request_shapes(DESCRIBE_ACLS, 3).make(
        "DescribeAclsRequest", resource_type_filter=2, resource_name_filter="evidence", pattern_type_filter=3,
        principal_filter="User:alice", host_filter=None, operation=1, permission_type=1)
    credentials = request_shapes(DESCRIBE_SCRAM, 0).make(
        "DescribeUserScramCredentialsRequest",
        users=(request_shapes(DESCRIBE_SCRAM, 0).make("UserName", name="alice"),))

    async def knows(server: str) -> bool:
        host, port = server.rsplit(":", 1)
        connection = NodeConnection(host, int(port), "test", request_timeout_s=5, connect_timeout_s=5,
                                    security=security)
        try:
            described = await connection.request(acls, 3)
            scram = await connection.request(credentials, 0)
        except NodeConnectionError:
            return False
        finally:
            await connection.close()
        return bool(described.resources) and scram.results[0].error_code == 0

    return True if all(asyncio.run(knows(server)) for server in secured.started.servers) else None
