"""The clients of a chaos run, recording what they were told into a :class:`~deploy.chaos.checker.History`.

* an idempotent producer with ``acks=all`` sends unique values round-robin over the partitions;
* a transactional producer sends a few values per transaction and commits most, aborts some on purpose;
* consumer-group members with ``isolation.level=read_committed`` read everything, each assignment numbered.

Every value is unique (a prefix per client and a counter), so the checker can follow each one. A send that ends
in an error is in doubt (a timeout may still have written it), never lost; a transaction whose commit or abort
failed is in doubt too. Each client runs in a thread of its own until :meth:`Workload.stop`.
"""

from __future__ import annotations

import contextlib
import functools
import random
import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from .checker import Ack, History, Read

QUIET = {"log_level": 0}
"""Faults make librdkafka log every lost connection; the run reports what matters in its own words."""


class Workload:
    def __init__(self, client: Mapping[str, str], topic: str, partitions: int, rng: random.Random,
                 consumers: int = 2, rate: float = 200.0) -> None:
        self.client = dict(client)
        self.topic = topic
        self.partitions = partitions
        self.rng = random.Random(rng.random())
        self.consumers = consumers
        self.interval = 1.0 / rate
        self.history = History()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._produce, name="chaos-producer", daemon=True),
                         threading.Thread(target=self._transact, name="chaos-transactions", daemon=True),
                         *(threading.Thread(target=self._consume, args=(f"c{n}",), name=f"chaos-consumer-{n}",
                                            daemon=True) for n in range(consumers))]
        self.errors: list[str] = []
        self.producers_recreated = 0  # transactional producers replaced after being fenced

    def start(self) -> Workload:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self, timeout: float = 120.0) -> History:
        """Stop sending, let the producers drain (their last sends end acknowledged or in doubt) and the consumers
        catch up to the end of the log, then stop them."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        return self.history

    def acknowledged(self) -> int:
        with self._lock:
            return len(self.history.acks)

    # --- the idempotent producer -------------------------------------------------------------------------------

    def _produce(self) -> None:
        producer = Producer({**self.client, **QUIET, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                             "message.timeout.ms": 60_000, "client.id": "chaos-producer"})
        sent = 0

        def delivered(error: KafkaError | None, message: Any, *, value: bytes, seq: int) -> None:
            with self._lock:
                if error is None:
                    self.history.acks.append(Ack(message.partition(), message.offset(), value, seq, "producer"))
                else:
                    self.history.in_doubt.add(value)

        while not self._stop.is_set():
            value = b"p-%08d" % sent
            with self._lock:
                self.history.sent.add(value)
            try:
                producer.produce(self.topic, value, partition=sent % self.partitions,
                                 on_delivery=functools.partial(delivered, value=value, seq=sent))
            except BufferError:
                producer.poll(0.1)
                continue
            sent += 1
            producer.poll(0)
            time.sleep(self.interval)
        remaining = producer.flush(90)
        if remaining:
            self.errors.append(f"the producer still had {remaining} sends unanswered after 90 s")

    # --- the transactional producer ----------------------------------------------------------------------------

    def _transact(self) -> None:
        sent = 0
        while not self._stop.is_set():
            producer = self._transactional_producer()
            if producer is None:
                return
            while not self._stop.is_set():
                values = [b"t-%08d" % (sent + i) for i in range(self.rng.randint(1, 5))]
                ok = self._transaction(producer, values, sent)
                sent += len(values)
                if not ok:
                    # Fenced: the coordinator aborted a transaction that outlived transaction.timeout.ms (a fault
                    # held it up) and bumped the epoch, which librdkafka treats as fatal (Kafka answers
                    # PRODUCER_FENCED so, KIP-588). An application makes a new producer, as Kafka Streams does.
                    self.producers_recreated += 1
                    break
                time.sleep(self.interval * len(values))

    def _transactional_producer(self) -> Producer | None:
        producer = Producer({**self.client, **QUIET, "transactional.id": "chaos-transactions",
                             "transaction.timeout.ms": 20_000, "message.timeout.ms": 20_000,
                             "client.id": "chaos-transactions"})
        try:
            producer.init_transactions(60)
        except KafkaException as exc:
            self.errors.append(f"init_transactions: {exc}")
            return None
        return producer

    def _transaction(self, producer: Producer, values: list[bytes], first: int) -> bool:
        """One transaction of ``values``: committed (its records acknowledged), aborted on purpose one time in five,
        or in doubt when the bus failed it; False once the producer cannot go on."""
        acked: list[Ack] = []

        def delivered(error: KafkaError | None, message: Any) -> None:
            if error is None:
                value = message.value()
                acked.append(Ack(message.partition(), message.offset(), value, first + values.index(value),
                                 "transactions"))

        with self._lock:
            self.history.sent.update(values)
        try:
            producer.begin_transaction()
            for value in values:
                producer.produce(self.topic, value, partition=self.rng.randrange(self.partitions),
                                 on_delivery=delivered)
            if self.rng.random() < 0.2:
                producer.abort_transaction(30)
                with self._lock:
                    self.history.aborted.update(values)
            else:
                producer.commit_transaction(30)
                with self._lock:
                    self.history.acks += acked
        except KafkaException as exc:
            with self._lock:
                self.history.in_doubt.update(values)
            return self._recover(producer, exc)
        return True

    def _recover(self, producer: Producer, exc: KafkaException) -> bool:
        """After a failed transaction: abort it when the error allows; False when the producer is done for (fatal)."""
        error = exc.args[0]
        if error.txn_requires_abort():
            with contextlib.suppress(KafkaException):  # else the coordinator aborts it when it times out
                producer.abort_transaction(30)
            return True
        return not error.fatal()  # a retriable error: the next transaction begins again

    # --- the consumers -----------------------------------------------------------------------------------------

    def _consume(self, name: str) -> None:
        assignment = 0

        def assigned(_consumer: Consumer, _partitions: list[TopicPartition]) -> None:
            nonlocal assignment
            assignment += 1

        consumer = Consumer({**self.client, **QUIET, "group.id": "chaos-readers", "client.id": f"chaos-{name}",
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                             "session.timeout.ms": 10_000, "heartbeat.interval.ms": 1_000})
        consumer.subscribe([self.topic], on_assign=assigned, on_revoke=assigned)
        try:
            idle_since: float | None = None
            while True:
                message = consumer.poll(0.5)
                if message is None or message.error():
                    if self._stop.is_set():
                        idle_since = idle_since or time.monotonic()
                        if time.monotonic() - idle_since > 10:  # caught up: nothing new for 10 s after the stop
                            return
                    continue
                idle_since = None
                partition, offset, value = _where(message)
                with self._lock:
                    self.history.reads.append(Read(name, assignment, partition, offset, value))
        finally:
            consumer.close()


def final_log(client: Mapping[str, str], topic: str, partitions: int,
              isolation: str) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of ``topic`` up to its end, per partition, as (offset, value), read with ``isolation``."""
    consumer = Consumer({**client, **QUIET, "group.id": f"chaos-final-{isolation}", "enable.auto.commit": False,
                         "isolation.level": isolation, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        found: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        ended: set[int] = set()
        deadline = time.monotonic() + 120
        while len(ended) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: the final read did not reach every partition's end in 120 s")
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    ended.add(_where(message)[0])
                continue
            partition, offset, value = _where(message)
            ended.discard(partition)
            found[partition].append((offset, value))
        return found
    finally:
        consumer.close()


def _where(message: Message) -> tuple[int, int, bytes]:
    """A consumed record's partition, offset and value (an EOF event: its partition, its offset, no value)."""
    partition, offset, value = message.partition(), message.offset(), message.value()
    assert partition is not None and offset is not None, "a consumed message has both"
    return partition, offset, value or b""
