"""Our native producer and consumer vs confluent-kafka (librdkafka), on our broker, in the same run.

100-byte records, one partition, the same broker process for all four measurements; each client runs
in its own process so no two share an interpreter. Producers use acks=all with idempotence (both
clients' default) and linger.ms=5; each producer writes its own topic, and each consumer reads the
records its own client produced, from the beginning, until it has them all. Prints records/s per
client and the ratio ours / confluent. Targets (issue 5): producer >= 250,000 records/s, consumer
>= 400,000 records/s.

    .venv/bin/python benchmarks/client_throughput.py [--records N]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deploy.processes.broker import BrokerProcess

VALUE = b"x" * 100
PRODUCER_TARGET = 250_000
CONSUMER_TARGET = 400_000


def _create_topics(bootstrap: str, names: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, num_partitions=1, replication_factor=1) for n in names])
    for future in futures.values():
        future.result(30)


def _ours_produce(bootstrap: str, topic: str, records: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    from bus.client.producer import KafkaProducer

    producer = KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    producer.send(topic, VALUE, partition=0).get(30)
    start = time.perf_counter()
    send = producer.send
    for _ in range(records):
        send(topic, VALUE, partition=0)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    errors = producer.metrics()["record-error-total"]
    producer.close()
    out.put((records - errors) / elapsed)


def _confluent_produce(bootstrap: str, topic: str, records: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "enable.idempotence": True,
                         "queue.buffering.max.messages": 2_000_000})
    producer.produce(topic, VALUE, partition=0)
    producer.flush(30)
    start = time.perf_counter()
    produce = producer.produce
    for _ in range(records):
        try:
            produce(topic, VALUE, partition=0)
        except BufferError:
            producer.poll(0.001)
            produce(topic, VALUE, partition=0)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    out.put((records - remaining) / elapsed)


def _ours_consume(bootstrap: str, topic: str, records: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    from bus.client.consumer import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0)])
    consumer.position(TopicPartition(topic, 0))
    seen = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 120
    while seen < records and time.monotonic() < deadline:
        for record in consumer.poll(1.0):
            _ = record.value
            seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    out.put(seen / elapsed)


def _confluent_consume(bootstrap: str, topic: str, records: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-client", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 120
    while seen < records and time.monotonic() < deadline:
        for message in consumer.consume(1000, 1.0):
            if not message.error():
                _ = message.value()
                seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    out.put(seen / elapsed)


def _run(target, *args: object) -> float:  # type: ignore[no-untyped-def]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, out))
    proc.start()
    try:
        return float(out.get(timeout=300))
    finally:
        proc.join(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data").start()
        try:
            bootstrap = broker.bootstrap
            _create_topics(bootstrap, ["bench-ours", "bench-confluent"])
            ours_p = _run(_ours_produce, bootstrap, "bench-ours", args.records)
            theirs_p = _run(_confluent_produce, bootstrap, "bench-confluent", args.records)
            # Each consumer reads what its own producer wrote (+1 warm-up record).
            ours_c = _run(_ours_consume, bootstrap, "bench-ours", args.records + 1)
            theirs_c = _run(_confluent_consume, bootstrap, "bench-confluent", args.records + 1)
        finally:
            broker.stop()
    rows = [("producer", ours_p, theirs_p, PRODUCER_TARGET), ("consumer", ours_c, theirs_c, CONSUMER_TARGET)]
    print(f"{args.records:,} records of {len(VALUE)} bytes, one partition, our broker")
    print(f"{'':10}{'ours rec/s':>14}{'confluent rec/s':>18}{'ratio':>8}{'target':>12}  met")
    ok = True
    for name, ours, theirs, target in rows:
        met = ours >= target
        ok &= met
        print(f"{name:10}{ours:14,.0f}{theirs:18,.0f}{ours / theirs:8.2f}{target:12,}  {'yes' if met else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
