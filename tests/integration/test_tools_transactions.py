"""`bus transactions` against a broker process, with a real librdkafka transactional producer.

While its transaction is open, `list` and `describe` show its transactional id, producer and partition,
and `describe-producers` where the transaction starts; `abort --start-offset` then ends it with an ABORT marker,
which a read_committed confluent consumer sees: the aborted record is skipped and what follows is readable.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic

from deploy.processes.broker import BrokerProcess
from tests.integration._support_tools import bus, ok, unique


def table(out: str) -> list[dict[str, str]]:
    """A table as Kafka's tools print it (each cell padded and followed by a tab) as one dict per row."""
    rows = []
    for line in out.splitlines():
        assert line.endswith("\t"), repr(line)
        rows.append([cell.strip() for cell in line[:-1].split("\t")])
    return [dict(zip(rows[0], row, strict=True)) for row in rows[1:]]


@pytest.fixture(scope="module")
def topic(shared_broker: BrokerProcess) -> str:
    name = unique("tools-txn")
    admin = ConfluentAdmin({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=10)
    return name


@pytest.fixture
def open_transaction(shared_broker: BrokerProcess, topic: str) -> Iterator[tuple[str, Producer]]:
    """A transactional producer with one record written in a transaction left open: (transactional id, producer)."""
    txn_id = unique("tools-txn-id")
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 60000})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic, value=b"in-transaction", partition=0)
    assert producer.flush(10) == 0
    yield txn_id, producer


def transactions(broker: BrokerProcess, *args: str):  # type: ignore[no-untyped-def]
    return bus("transactions", "--bootstrap-server", broker.bootstrap, *args)


def test_list_and_describe_show_the_open_transaction(shared_broker: BrokerProcess, topic: str,
                                                     open_transaction: tuple[str, Producer]) -> None:
    txn_id, producer = open_transaction
    listed = ok(transactions(shared_broker, "list"))
    assert listed.splitlines()[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    (row,) = [r for r in table(listed) if r["TransactionalId"] == txn_id]
    assert row["Coordinator"] == "1" and row["TransactionState"] == "Ongoing"

    (described,) = table(ok(transactions(shared_broker, "describe", "--transactional-id", txn_id)))
    assert list(described) == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                               "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                               "TopicPartitions"]
    assert described["TransactionalId"] == txn_id and described["ProducerId"] == row["ProducerId"]
    assert (described["TransactionState"], described["TransactionTimeoutMs"]) == ("Ongoing", "60000")
    assert described["TopicPartitions"] == f"{topic}-0"
    assert int(described["CurrentTransactionStartTimeMs"]) > 0 and int(described["TransactionDurationMs"]) >= 0

    producers = table(ok(transactions(shared_broker, "describe-producers", "--topic", topic, "--partition", "0")))
    (mine,) = [p for p in producers if p["ProducerId"] == row["ProducerId"]]
    assert mine["CurrentTransactionStartOffset"] != "None"
    producer.abort_transaction(10)
    described_after = table(ok(transactions(shared_broker, "describe", "--transactional-id", txn_id)))[0]
    assert described_after["TransactionState"] in ("PrepareAbort", "CompleteAbort")


def test_abort_by_start_offset(shared_broker: BrokerProcess, topic: str,
                               open_transaction: tuple[str, Producer]) -> None:
    _txn_id, _producer = open_transaction
    producers = table(ok(transactions(shared_broker, "describe-producers", "--topic", topic, "--partition", "0")))
    (hanging,) = [p for p in producers if p["CurrentTransactionStartOffset"] != "None"]
    start = int(hanging["CurrentTransactionStartOffset"])
    plain = Producer({"bootstrap.servers": shared_broker.bootstrap})
    plain.produce(topic, value=b"after", partition=0)
    assert plain.flush(10) == 0

    assert ok(transactions(shared_broker, "abort", "--topic", topic, "--partition", "0", "--start-offset",
                           str(start))) == ""
    after = table(ok(transactions(shared_broker, "describe-producers", "--topic", topic, "--partition", "0")))
    assert [p["CurrentTransactionStartOffset"] for p in after if p["ProducerId"] == hanging["ProducerId"]] == ["None"]

    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": unique("txn-judge"),
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, start)])
        values = []
        for _ in range(100):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
                if message.value() == b"after":
                    break
        assert b"in-transaction" not in values and values[-1:] == [b"after"]
    finally:
        consumer.close()

    again = transactions(shared_broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", str(start))
    assert again.returncode == 1
    assert again.stderr.strip() == f"Could not find any open transactions starting at offset {start} on partition " \
                                   f"{topic}-0"


def test_bad_input_exits_1_with_one_line(shared_broker: BrokerProcess, topic: str) -> None:
    cases = [
        (("describe", "--transactional-id", "no-such-id"),
         "Error while executing transactions command : The transactionalId no-such-id could not be found. "
         "(TRANSACTIONAL_ID_NOT_FOUND)"),
        (("describe-producers", "--topic", "no-such-topic", "--partition", "0"),
         "Error while executing transactions command : Topic 'no-such-topic' does not exist. "
         "(UNKNOWN_TOPIC_OR_PARTITION)"),
        (("abort", "--topic", topic, "--partition", "0", "--producer-id", "5"),
         "Either --start-offset, or all of --producer-id, --producer-epoch and --coordinator-epoch, must be given "
         "to abort a transaction"),
    ]
    for args, message in cases:
        result = transactions(shared_broker, *args)
        assert (result.returncode, result.stdout, result.stderr.strip()) == (1, "", message), args
    result = transactions(shared_broker, "describe")
    assert result.returncode == 1 and "--transactional-id" in result.stderr and "Traceback" not in result.stderr
