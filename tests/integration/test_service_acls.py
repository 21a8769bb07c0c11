"""Each service principal on a secured bus can do what its row of `contracts/bus_acls.py` grants and nothing else.

The bus is a one-node secured cluster started by the code `make up` uses (`deploy.cluster` with
`deploy.cluster_security`, its secrets in a `secrets/` directory), the identities made and the table applied by
`deploy.acls`; the clients are confluent-kafka's, configured from each principal's properties file through
`contracts.bus_client`, as the services are. A second such bus stands for the DR site: the table applied in the
standby role, its own passwords, the first one's CA.
"""

from __future__ import annotations

import contextlib
import stat
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from contracts import bus_client
from contracts.bus_acls import CHECKPOINT_TOPICS, MATRIX, Role, all_bindings
from contracts.config import Config
from contracts.ports import free_port
from contracts.topics import DR_PREFIX, Topics
from deploy import acls, cluster
from deploy.cluster_security import ADMIN_USER, ClusterSecurity

TOPICS = Topics()
DENIED = (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
          KafkaError.CLUSTER_AUTHORIZATION_FAILED)


class SecuredBus:
    def __init__(self, secrets: Path, bootstrap: str) -> None:
        self.secrets = secrets
        self.config = Config({"bus": {"bootstrap_servers": bootstrap, "client_properties_dir": str(secrets)}}, None)

    def settings(self, principal: str) -> dict[str, str]:
        return bus_client.librdkafka(self.config, principal)

    def produce(self, principal: str, topic: str) -> KafkaError | None:
        """The error of producing one record to ``topic`` as ``principal`` (None: acknowledged)."""
        outcome: list[KafkaError | None] = []
        producer = Producer({**self.settings(principal), "message.timeout.ms": 10000, "log_level": 0})
        producer.produce(topic, b"v", on_delivery=lambda err, _msg: outcome.append(err))
        producer.flush(15)
        assert outcome, f"no delivery report for {principal} -> {topic}"
        return outcome[0]

    def consume(self, principal: str, topic: str, group: str) -> KafkaError | None:
        """The first error reading ``topic`` in ``group`` as ``principal`` (None: a record, or the end, reached)."""
        consumer = Consumer({**self.settings(principal), "group.id": group, "auto.offset.reset": "earliest",
                             "enable.partition.eof": True, "log_level": 0})
        try:
            consumer.subscribe([topic])
            for _ in range(60):
                message = consumer.poll(0.5)
                if message is None:
                    continue
                error = message.error()
                if error is None or error.code() == KafkaError._PARTITION_EOF:
                    consumer.commit(message=message, asynchronous=False) if error is None else None
                    return None
                if error.code() in DENIED:
                    return error
            raise AssertionError(f"{principal} read nothing from {topic} in 30 s")
        except KafkaException as exc:
            return exc.args[0]
        finally:
            consumer.close()


@contextlib.contextmanager
def _secured_bus(data: Path, role: Role, ca_directory: Path | None = None) -> Iterator[SecuredBus]:
    """A one-node secured bus in ``data`` with the table applied in ``role`` and the solution's topics made."""
    secrets = data / "secrets"
    port = free_port()
    nodes = cluster.plan(1, "127.0.0.1", port, data / "bus", free_port())
    security = ClusterSecurity.ensure(secrets, ca_directory)
    processes = cluster.NodeProcesses(data, security)
    (data / "bus").mkdir()
    processes.launch(nodes[0], nodes, cluster.cluster_id(data / "bus"), cluster.replication_defaults(1))
    try:
        admin_java = security.client_properties() | {"bootstrap.servers": nodes[0].bootstrap}
        cluster.wait_for_quorum(nodes[0].bootstrap, 1, 60, admin_java)
        passwords = acls.ensure_principals(secrets, nodes[0].bootstrap, security.truststore,
                                           security.passwords[ADMIN_USER])
        created, deleted = acls.apply(bus_client.read_properties(secrets / "admin.properties"), TOPICS, passwords,
                                      role)
        assert (created, deleted) == (len(set(all_bindings(TOPICS, role))), 0)
        admin = AdminClient(bus_client.librdkafka(Config({"bus": {"client_properties_dir": str(secrets)}}, None),
                                                  "admin") | {"log_level": 0})
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in (*TOPICS.data(), *TOPICS.control())]).values():
            future.result(30)
        yield SecuredBus(secrets, nodes[0].bootstrap)
    finally:
        processes.stop(30)


@pytest.fixture(scope="module")
def bus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBus]:
    with _secured_bus(tmp_path_factory.mktemp("secured"), Role.ACTIVE) as active:
        yield active


@pytest.fixture(scope="module")
def standby(bus: SecuredBus, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBus]:
    with _secured_bus(tmp_path_factory.mktemp("standby"), Role.STANDBY, ca_directory=bus.secrets) as site:
        yield site


def test_properties_files_are_owner_only_and_applying_again_changes_nothing(bus: SecuredBus) -> None:
    for principal in bus_client.PRINCIPALS:
        path = bus.secrets / f"{principal}.properties"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert bus_client.java(bus.config, principal)["sasl.jaas.config"].count(f'username="{principal}"') == 1
    passwords = acls.ensure_principals(bus.secrets, bus.settings("admin")["bootstrap.servers"],
                                       bus.secrets / "ca.pem", bus.settings("admin")["sasl.password"])
    assert passwords["console"] == bus.settings("console")["sasl.password"], "a password is made once"
    assert acls.apply(bus_client.read_properties(bus.secrets / "admin.properties"), TOPICS, passwords) == (0, 0)


def test_each_producer_writes_only_its_topics(bus: SecuredBus) -> None:
    assert bus.produce("simulator", TOPICS.vehicle) is None
    assert bus.produce("monitor", TOPICS.alerts) is None
    assert bus.produce("surveillance", TOPICS.alerts) is None  # watch hits and cloned plates are alerts too
    assert bus.produce("console", TOPICS.audit) is None
    assert bus.produce("console", TOPICS.control_watchlist) is None
    for principal, topic in (("simulator", TOPICS.alerts), ("console", TOPICS.alerts),
                             ("capture-ingest", TOPICS.alerts), ("hit-loader", TOPICS.alerts),
                             ("simulator", TOPICS.audit), ("surveillance", TOPICS.control_watchlist),
                             ("monitor", TOPICS.vehicle), ("cameras", TOPICS.vehicle), ("mirror", TOPICS.vehicle)):
        error = bus.produce(principal, topic)
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (principal, topic, error)


def test_each_consumer_reads_only_its_topics_in_its_groups(bus: SecuredBus) -> None:
    assert bus.produce("simulator", TOPICS.face) is None
    assert bus.consume("capture-ingest", TOPICS.face, "spark-ingest-test") is None
    assert bus.consume("surveillance", TOPICS.face, "surveillance-test") is None
    assert bus.consume("monitor", TOPICS.face, "monitoring-images") is None  # its image sampler (issue 28)
    denied = [("simulator", TOPICS.face, "spark-x"),            # a producer cannot read captures back
              ("capture-ingest", TOPICS.face, "console-x"),     # its topic, a group it does not own
              ("hit-loader", TOPICS.face, "surveillance-loader"),
              ("monitor", TOPICS.audit, "monitoring"),
              ("cameras", TOPICS.vehicle, "spark-x")]
    for principal, topic, group in denied:
        error = bus.consume(principal, topic, group)
        assert error is not None and error.code() in DENIED, (principal, topic, group, error)


def test_the_console_cannot_delete_topics_or_alter_configs(bus: SecuredBus) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient(bus.settings("console"))
    name = f"console-made-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)  # its admin page may create topics
    with pytest.raises(KafkaException) as deleted:
        admin.delete_topics([name])[name].result(30)
    assert deleted.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as altered:
        entry = ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource("topic", name, incremental_configs=[entry])
        next(iter(admin.incremental_alter_configs([resource]).values())).result(30)
    assert altered.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as audit_gone:
        admin.delete_topics([TOPICS.audit])[TOPICS.audit].result(30)
    assert audit_gone.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_service_without_its_row_is_refused(bus: SecuredBus) -> None:
    """The table is what lets a service work: the same principal with its ACLs deleted can no longer produce."""
    admin_settings = bus_client.read_properties(bus.secrets / "admin.properties")
    passwords = {p: bus_client.librdkafka(bus.config, p)["sasl.password"] for p in bus_client.PRINCIPALS}
    saved = MATRIX["simulator"]
    MATRIX["simulator"] = []
    try:
        assert acls.apply(admin_settings, TOPICS, passwords)[1] == 6
        error = bus.produce("simulator", TOPICS.vehicle)
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        MATRIX["simulator"] = saved
        acls.apply(admin_settings, TOPICS, passwords)
    assert bus.produce("simulator", TOPICS.vehicle) is None


def test_a_wrong_password_cannot_log_in(bus: SecuredBus) -> None:
    settings = {**bus.settings("console"), "sasl.password": "guessed"}
    admin = AdminClient({**settings, "log_level": 0})
    with pytest.raises(KafkaException) as failed:
        admin.list_topics(timeout=10)
    assert failed.value.args[0].code() in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT, KafkaError._TIMED_OUT)


def test_show_prints_one_binding_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert acls.main(["--show"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(all_bindings(TOPICS)) + 1
    assert not any(line.startswith("User:dr-loaders") for line in lines)  # the active site's table
    assert acls.main(["--show", "--role", "standby"]) == 0
    standby = capsys.readouterr().out.splitlines()
    assert f"User:dr-loaders        ALLOW WRITE            TOPIC    LITERAL  {DR_PREFIX}{TOPICS.ingest_stats}" \
        in standby
    assert "User:simulator         ALLOW WRITE            TOPIC    LITERAL  capture.vehicle" in lines
    assert not any(line.startswith("User:simulator") and "capture.face" in line and " READ " in line for line in lines)
    assert not any(" DELETE " in line for line in lines)


def test_show_refuses_a_missing_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as refused:
        acls.main(["--show", "--config", str(tmp_path / "absent.toml")])
    assert refused.value.code == 2 and "absent.toml" in capsys.readouterr().err


def test_at_the_standby_site_the_mirror_makes_and_writes_the_copies(standby: SecuredBus) -> None:
    """What the mirror does at its target: create a data topic, grow it, keep its configs in line, write it and its
    checkpoints, commit a group's translated offsets; a control topic stays out of its reach."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions

    admin = AdminClient({**standby.settings("mirror"), "log_level": 0})
    name = TOPICS.vehicle
    superuser = AdminClient({**standby.settings("admin"), "log_level": 0})
    superuser.delete_topics([name])[name].result(30)  # as the mirror finds it at first: absent
    for _ in range(50):
        with contextlib.suppress(KafkaException):
            admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
            break
    assert name in admin.list_topics(timeout=10).topics
    admin.create_partitions([NewPartitions(name, 2)])[name].result(30)
    entry = ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)
    next(iter(admin.incremental_alter_configs([ConfigResource("topic", name, incremental_configs=[entry])])
              .values())).result(30)
    assert standby.produce("mirror", name) is None
    assert standby.produce("mirror", CHECKPOINT_TOPICS[0]) is None  # created on first write (auto-creation)
    offsets = ConsumerGroupTopicPartitions("spark-kafka-source-x", [TopicPartition(name, 0, 1)])
    admin.alter_consumer_group_offsets([offsets])["spark-kafka-source-x"].result(30)
    for topic in (TOPICS.video_commands, DR_PREFIX + TOPICS.ingest_stats):  # a control topic, a DR job's own
        error = standby.produce("mirror", topic)
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, topic


def test_at_the_standby_site_the_loaders_read_the_copies_and_write_only_their_own(standby: SecuredBus) -> None:
    assert standby.produce("admin", TOPICS.face) is None
    assert standby.consume("dr-loaders", TOPICS.face, "spark-dr-ingest") is None
    assert standby.consume("dr-loaders", TOPICS.surveillance_hits, "surveillance-loader") is None
    assert standby.consume("dr-loaders", TOPICS.vehicle, "dr-images") is None  # the image copier's group
    assert standby.produce("dr-loaders", DR_PREFIX + TOPICS.ingest_stats) is None
    for topic in (TOPICS.ingest_stats, TOPICS.face, TOPICS.deadletter):  # the mirror is their only writer
        error = standby.produce("dr-loaders", topic)
        assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, topic


def test_at_the_dr_site_the_monitor_creates_and_reads_the_dr_jobs_own_stats(standby: SecuredBus) -> None:
    """Promoted, the DR site's monitor judges the DR ingest's stats and dead letters (``dr.``-prefixed): it creates
    them at its start when missing (refused, it exited and took `make up` down with it)."""
    admin = AdminClient({**standby.settings("monitor"), "log_level": 0})
    names = [DR_PREFIX + TOPICS.ingest_stats, DR_PREFIX + TOPICS.deadletter]
    superuser = AdminClient({**standby.settings("admin"), "log_level": 0})
    for future in superuser.delete_topics(names).values():  # as the monitor may find them: absent
        with contextlib.suppress(KafkaException):
            future.result(30)
    for name in names:
        for _ in range(50):  # the deletion may still be under way
            try:
                admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
                break
            except KafkaException as exc:
                assert exc.args[0].code() != KafkaError.TOPIC_AUTHORIZATION_FAILED, name
                time.sleep(0.2)
        assert standby.consume("monitor", name, "monitoring") is None, name


def test_the_sites_roles_keep_each_principal_to_its_side(bus: SecuredBus, standby: SecuredBus) -> None:
    """At the active site the mirror only reads and the DR loaders have nothing; a password of one site opens
    nothing at the other."""
    error = bus.produce("mirror", TOPICS.vehicle)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    error = bus.consume("dr-loaders", TOPICS.face, "spark-dr-ingest")
    assert error is not None and error.code() in DENIED
    assert standby.settings("console")["sasl.password"] != bus.settings("console")["sasl.password"]
    crossed = AdminClient({**standby.settings("console"), "sasl.password": bus.settings("console")["sasl.password"],
                           "log_level": 0})
    with pytest.raises(KafkaException):
        crossed.list_topics(timeout=10)
