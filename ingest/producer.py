"""The simulator's only door to the bus: a small producing interface and its confluent-kafka binding.

Everything above this module speaks :class:`RecordProducer`, so switching to the bus's native
client (being written in parallel) is one new class here and one line in :func:`open_producer`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

Delivered = Callable[[str | None], None]
"""Called once per record: ``None`` when the broker acknowledged it, else the error text."""

BusSettings = Mapping[str, str] | str
"""How a client reaches the bus: a principal's librdkafka settings (:func:`contracts.bus_client.librdkafka`), or a
bare bootstrap address (PLAINTEXT: tests, the DR site's bus)."""


def librdkafka_settings(bus: BusSettings) -> dict[str, str]:
    """``bus`` as librdkafka settings (a bare address becomes ``bootstrap.servers``)."""
    return {"bootstrap.servers": bus} if isinstance(bus, str) else dict(bus)


class RecordProducer(Protocol):
    def ensure_topics(self, partitions: Mapping[str, int], timeout: float = 15.0) -> None:
        """Create the topics that do not exist yet (existing ones are left as they are)."""

    def produce(self, topic: str, key: bytes, value: bytes, on_delivery: Delivered) -> None:
        """Queue one record; asynchronous and batched, ``on_delivery`` reports the outcome."""

    def poll(self, timeout: float = 0.0) -> None:
        """Serve delivery reports."""

    def flush(self, timeout: float) -> int:
        """Wait for queued records; returns how many are still undelivered."""

    def abandon(self) -> None:
        """Give up on every record not delivered yet: each reports an error (a bus that stopped answering)."""


class ConfluentProducer:
    """librdkafka's producer: linger-based batching, bounded queue, acks from the leader."""

    def __init__(self, bus: BusSettings, config: Mapping[str, Any] | None = None) -> None:
        from confluent_kafka import Producer

        self._bus = librdkafka_settings(bus)
        self._producer = Producer({
            **self._bus,
            "linger.ms": 5,
            "batch.num.messages": 2000,
            "queue.buffering.max.messages": 200_000,
            "acks": "all",
            "client.id": "ingest-simulator",
            **(config or {}),
        })

    def ensure_topics(self, partitions: Mapping[str, int], timeout: float = 15.0) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({**self._bus, "log_level": 3})  # no info chatter at exit
        existing = set(admin.list_topics(timeout=timeout).topics)
        wanted = [NewTopic(t, n) for t, n in partitions.items() if t not in existing]
        if not wanted:
            return
        for topic, future in admin.create_topics(wanted, request_timeout=timeout).items():
            try:
                future.result(timeout)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise RuntimeError(f"cannot create topic {topic}: {exc}") from exc

    def produce(self, topic: str, key: bytes, value: bytes, on_delivery: Delivered) -> None:
        def report(err: Any, _msg: Any) -> None:
            on_delivery(None if err is None else str(err))

        while True:
            try:
                self._producer.produce(topic, value, key, on_delivery=report)
                return
            except BufferError:  # local queue full: let the sender drain it (back-pressure)
                self._producer.poll(0.05)

    def poll(self, timeout: float = 0.0) -> None:
        self._producer.poll(timeout)

    def flush(self, timeout: float) -> int:
        return self._producer.flush(timeout)

    def abandon(self) -> None:
        self._producer.purge(in_queue=True, in_flight=True)  # each reports _PURGE_QUEUE / _PURGE_INFLIGHT
        self._producer.flush(0)


def open_producer(bus: BusSettings, config: Mapping[str, Any] | None = None) -> RecordProducer:
    """A producer reaching the bus as ``bus`` says; ``config`` adds or replaces client settings (e.g. ``client.id``)."""
    return ConfluentProducer(bus, config)
