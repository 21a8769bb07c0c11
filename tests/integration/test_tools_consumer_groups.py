"""`bus consumer-groups` against a broker process, with real confluent-kafka group members.

The tool's tables are parsed by column, as an operator's script would, and every reset is checked
through confluent-kafka's own view of the committed offsets.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic

from deploy.processes.broker import BrokerProcess
from tests.integration._support_groups import group_consumer, poll_until
from tests.integration._support_tools import bus, ok, unique

PARTITIONS = 3
PER_PARTITION = 10


@pytest.fixture
def topic(shared_broker: BrokerProcess) -> str:
    """A 3-partition topic holding 10 records per partition."""
    name = unique("tools-cg")
    admin = ConfluentAdmin({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(timeout=10)
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 5})
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.produce(name, value=f"{p}-{i}".encode(), partition=p)
    assert producer.flush(10) == 0
    return name


@pytest.fixture
def member(shared_broker: BrokerProcess, topic: str) -> Iterator[tuple[str, Consumer]]:
    """A group with one live confluent member that consumed everything and committed."""
    group = unique("tools-group")
    consumer = group_consumer(shared_broker.bootstrap, group, **{"client.id": "tools-client"})
    consumer.subscribe([topic])
    seen: list[bytes] = []
    poll_until([consumer], lambda: len(seen) == PARTITIONS * PER_PARTITION,
               on_message=lambda _c, m: seen.append(m.value()))
    consumer.commit(asynchronous=False)
    try:
        yield group, consumer
    finally:
        consumer.close()


def groups_tool(broker: BrokerProcess, *args: str):  # type: ignore[no-untyped-def]
    return bus("consumer-groups", "--bootstrap-server", broker.bootstrap, *args)


def table(stdout: str) -> list[dict[str, str]]:
    """Rows of a Kafka-style table (blank-line separated, whitespace-aligned) keyed by header."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    header = lines[0].split()
    return [dict(zip(header, line.split(), strict=True)) for line in lines[1:]]


def committed(broker: BrokerProcess, group: str, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        parts = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
        return [tp.offset for tp in parts]
    finally:
        consumer.close()


def test_describe_active_group(shared_broker: BrokerProcess, topic: str, member: tuple[str, Consumer]) -> None:
    group, _consumer = member
    result = groups_tool(shared_broker, "--describe", "--group", group)
    out = ok(result)
    assert out.startswith("\nGROUP ")
    assert out.splitlines()[1].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                           "CONSUMER-ID", "HOST", "CLIENT-ID"]
    rows = table(out)
    assert [(r["TOPIC"], r["PARTITION"]) for r in rows] == [(topic, str(p)) for p in range(PARTITIONS)]
    for row in rows:
        assert row["GROUP"] == group
        assert row["CURRENT-OFFSET"] == row["LOG-END-OFFSET"] == str(PER_PARTITION) and row["LAG"] == "0"
        assert row["CONSUMER-ID"].startswith("tools-client") and row["CLIENT-ID"] == "tools-client"
        assert row["HOST"].startswith("/")

    members = table(ok(groups_tool(shared_broker, "--describe", "--group", group, "--members")))
    assert len(members) == 1 and members[0]["#PARTITIONS"] == str(PARTITIONS)
    assert members[0]["CLIENT-ID"] == "tools-client"
    verbose = ok(groups_tool(shared_broker, "--describe", "--group", group, "--members", "--verbose"))
    assert f"{topic}:0,1,2" in verbose

    state_lines = ok(groups_tool(shared_broker, "--describe", "--group", group, "--state")).strip().splitlines()
    assert state_lines[0].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    cells = state_lines[1].split()
    assert cells[0] == group and cells[-3:] == ["range", "Stable", "1"]

    # Resetting a live group's offsets is refused (Kafka's message) and the offsets stay put.
    refused = groups_tool(shared_broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                          "--execute")
    assert refused.returncode == 1
    assert f"Assignments can only be reset if the group '{group}' is inactive, but the current state is Stable." \
        in refused.stdout
    assert committed(shared_broker, group, topic) == [PER_PARTITION] * PARTITIONS

    # So is deleting it.
    not_deleted = groups_tool(shared_broker, "--delete", "--group", group)
    assert not_deleted.returncode == 1 and "NON_EMPTY_GROUP" in not_deleted.stdout

    listed = ok(groups_tool(shared_broker, "--list")).splitlines()
    assert group in listed
    with_state = table(ok(groups_tool(shared_broker, "--list", "--state", "stable")))
    assert {"GROUP": group, "STATE": "Stable"} in with_state
    typed = table(ok(groups_tool(shared_broker, "--list", "--type")))
    assert {"GROUP": group, "TYPE": "Classic"} in typed


def test_reset_offsets_of_an_inactive_group(shared_broker: BrokerProcess, topic: str,
                                            member: tuple[str, Consumer]) -> None:
    group, consumer = member
    consumer.close()

    described = groups_tool(shared_broker, "--describe", "--group", group)
    assert f"Consumer group '{group}' has no active members." in described.stderr
    rows = table(ok(described))
    assert all(r["CONSUMER-ID"] == r["HOST"] == r["CLIENT-ID"] == "-" for r in rows) and len(rows) == PARTITIONS

    dry = ok(groups_tool(shared_broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                         "--dry-run"))
    assert [r["NEW-OFFSET"] for r in table(dry)] == ["0"] * PARTITIONS
    assert committed(shared_broker, group, topic) == [PER_PARTITION] * PARTITIONS  # dry run changed nothing

    ok(groups_tool(shared_broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
                   "--execute"))
    assert committed(shared_broker, group, topic) == [0] * PARTITIONS
    lag = table(ok(groups_tool(shared_broker, "--describe", "--group", group)))
    assert [r["LAG"] for r in lag] == [str(PER_PARTITION)] * PARTITIONS

    ok(groups_tool(shared_broker, "--reset-offsets", "--group", group, "--all-topics", "--shift-by", "4",
                   "--execute"))
    assert committed(shared_broker, group, topic) == [4] * PARTITIONS

    # --to-offset past the end is clamped to the log end, with Kafka's warning.
    clamped = groups_tool(shared_broker, "--reset-offsets", "--group", group, "--topic", f"{topic}:1",
                          "--to-offset", "99", "--execute")
    assert "is higher than latest offset" in clamped.stderr
    assert [r["NEW-OFFSET"] for r in table(ok(clamped))] == [str(PER_PARTITION)]
    assert committed(shared_broker, group, topic) == [4, PER_PARTITION, 4]

    ok(groups_tool(shared_broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-latest", "--execute"))
    assert committed(shared_broker, group, topic) == [PER_PARTITION] * PARTITIONS

    # A datetime before every record: the first offsets; after them all: the log end, with a warning each.
    past = (datetime.datetime.now() - datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.000")
    ok(groups_tool(shared_broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-datetime", past,
                   "--execute"))
    assert committed(shared_broker, group, topic) == [0] * PARTITIONS
    future = groups_tool(shared_broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-datetime",
                         "2999-01-01T00:00:00.000Z", "--dry-run")
    assert ok(future).count("Falling back to latest known offset.") == PARTITIONS
    ok(groups_tool(shared_broker, "--reset-offsets", "--group", group, "--topic", topic, "--by-duration", "PT1H",
                   "--execute"))
    assert committed(shared_broker, group, topic) == [0] * PARTITIONS

    exported = ok(groups_tool(shared_broker, "--reset-offsets", "--group", group, "--topic", topic, "--to-latest",
                              "--dry-run", "--export"))
    assert exported.splitlines() == [f"{topic},{p},{PER_PARTITION}" for p in range(PARTITIONS)]

    deleted = ok(groups_tool(shared_broker, "--delete", "--group", group))
    assert deleted == f"Deletion of requested consumer groups ('{group}') was successful.\n"
    gone = groups_tool(shared_broker, "--describe", "--group", group)
    assert gone.returncode == 1 and f"Consumer group '{group}' does not exist." in gone.stdout


def test_reset_a_new_group_from_file(shared_broker: BrokerProcess, topic: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A group that never existed can be given offsets (Kafka treats it as inactive)."""
    group = unique("tools-fresh")
    plan = tmp_path / "plan.csv"
    plan.write_text("".join(f"{topic},{p},{p + 2}\n" for p in range(PARTITIONS)))
    out = ok(groups_tool(shared_broker, "--reset-offsets", "--group", group, "--from-file", str(plan), "--execute"))
    assert [r["NEW-OFFSET"] for r in table(out)] == ["2", "3", "4"]
    assert committed(shared_broker, group, topic) == [2, 3, 4]
    offsets = table(ok(groups_tool(shared_broker, "--describe", "--group", group, "--offsets")))
    assert [r["LAG"] for r in offsets] == ["8", "7", "6"]

    deleted = groups_tool(shared_broker, "--delete-offsets", "--group", group, "--topic", topic)
    assert ok(deleted).startswith(f"Request succeeded for deleting offsets from group {group}.")
    assert committed(shared_broker, group, topic) == [-1001] * PARTITIONS


def test_missing_group(shared_broker: BrokerProcess) -> None:
    group = unique("tools-nogroup")
    result = groups_tool(shared_broker, "--describe", "--group", group)
    assert result.returncode == 1 and f"Error: Consumer group '{group}' does not exist." in result.stdout
    deleted = groups_tool(shared_broker, "--delete", "--group", group)
    assert deleted.returncode == 1 and "GROUP_ID_NOT_FOUND" in deleted.stdout


@pytest.mark.parametrize("argv, message", [
    (["--list", "--describe"], "exactly one action"),
    (["--describe"], "[all-groups], [group]"),
    (["--describe", "--group", "g", "--members", "--state"], "at most one"),
    (["--reset-offsets", "--group", "g", "--to-earliest"], "[all-topics], [topic]"),
    (["--reset-offsets", "--group", "g", "--all-topics"], "exactly one of"),
    (["--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--dry-run", "--execute"], "only accepts"),
    (["--list", "--state", "sleeping"], "Invalid state list"),
])
def test_bad_flags_exit_1(shared_broker: BrokerProcess, argv: list[str], message: str) -> None:
    result = groups_tool(shared_broker, *argv)
    assert result.returncode == 1
    assert message in result.stderr
