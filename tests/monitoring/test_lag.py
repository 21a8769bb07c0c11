"""``consumer_lag`` measures a group over every partition it committed (not only the monitor's inputs), with a
real broker and confluent-kafka clients; a group that never committed has no lag figure (the rule stays quiet)."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from deploy.processes.broker import BrokerProcess
from ingest.producer import open_producer
from monitoring.lag import GroupLag


def test_lag_over_every_committed_partition(broker: BrokerProcess) -> None:
    open_producer(broker.bootstrap).ensure_topics({"lag.a": 2, "lag.b": 1})
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for n in range(30):
        producer.produce("lag.a", b"x", partition=n % 2)
        producer.produce("lag.b", b"y", partition=0)
    assert producer.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lagging", "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("lag.a", 0, 5), TopicPartition("lag.a", 1, 15),
                                 TopicPartition("lag.b", 0, 30)], asynchronous=False)
    finally:
        consumer.close()
    lag = GroupLag(broker.bootstrap)
    assert lag("lagging") == (15 - 5) + (15 - 15) + (30 - 30)
    assert lag("never-committed") is None
