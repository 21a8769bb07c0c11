"""Helpers for the surveillance tests: a site whose services run as real processes
(`deploy.processes.surveillance`), a capture publisher and readers of the output topics. The city map, the
solution config and the capture records are `testkit.surveillance`'s.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from contracts.records import encode, encode_feature
from deploy.processes.broker import BrokerProcess
from deploy.processes.surveillance import ServiceProcess
from testkit.surveillance import capture_time, write_config


def scrape(url: str) -> dict[tuple[str, ...], float]:
    """A /metrics page as (sample name, its label values sorted) -> value."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {(sample.name, *sorted(sample.labels.values())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


UNREADABLE: tuple[bytes, ...] = (b"\xff\xfe{not json", b"[" * 50_000 + b"]" * 50_000, b"9" * 5_000, b"[1, 2]", b"42",
                                 b'{"unrelated": "keys", "n": 1}')
"""Values no consumer can use, each on every topic it reads: not UTF-8 JSON, JSON nested past the interpreter's
recursion limit (``json.loads`` raises RecursionError), an integer past Python's 4,300-digit limit (a
ValueError that is no JSONDecodeError), and JSON of the wrong shape: a list, a number, unrelated keys."""


def without(record: dict[str, Any], field: str) -> bytes:
    """A valid-looking record that lacks ``field``."""
    return encode({k: v for k, v in record.items() if k != field})


@dataclass
class Publisher:
    """Produces captures (keyed by checkpoint, as the devices do) and commands; remembers where each landed."""

    bootstrap: str
    placed: dict[str, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 2, "log_level": 3,
                                   "acks": "all"})

    def captures(self, topic: str, records: list[dict]) -> None:
        for record in records:
            def placed(err: Any, msg: Any, record_id: str = record["record_id"]) -> None:
                assert err is None, err
                self.placed[record_id] = (msg.partition(), msg.offset())
            self._send(topic, record["checkpoint_id"].encode(), encode(record), placed)
        self.flush()

    def command(self, topic: str, key: str, value: dict | bytes | None) -> None:
        raw = encode(value) if isinstance(value, dict) else value
        self._send(topic, key.encode(), raw, None)
        self.flush()

    def _send(self, topic: str, key: bytes, value: bytes | None, callback: Callable | None) -> None:
        while True:
            try:
                self._producer.produce(topic, value, key, on_delivery=callback)
                return
            except BufferError:
                self._producer.poll(0.05)

    def flush(self) -> None:
        assert self._producer.flush(30) == 0

    def close(self) -> None:
        """Destroy the client before the broker goes (else it logs refused reconnects until collected)."""
        self._producer.flush(5)
        del self._producer


class Reader:
    """Reads one topic from the beginning, without a group, decoding JSON values (a value that is not JSON, a
    test's deliberate garbage, stays bytes)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.records: list[tuple[bytes | None, Any]] = []
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "log_level": 3,
                                   "enable.auto.commit": False})
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])

    def read(self, until: Callable[[list[Any]], bool], timeout: float = 30.0, quiet_s: float = 0.0) -> list[Any]:
        """Values read so far once ``until(values)`` holds (then ``quiet_s`` more seconds of reading)."""
        deadline = time.monotonic() + timeout
        while not until(self.values()):
            assert time.monotonic() < deadline, f"timed out with {len(self.records)} records"
            self._poll(0.2)
        end = time.monotonic() + quiet_s
        while time.monotonic() < end:
            self._poll(0.1)
        return self.values()

    def _poll(self, timeout: float) -> None:
        for message in self._consumer.consume(1000, timeout):
            if message.error() is None:
                self.records.append((message.key(), _decoded(message.value())))

    def values(self) -> list[Any]:
        return [value for _key, value in self.records]

    def close(self) -> None:
        self._consumer.close()


def _decoded(value: bytes | None) -> Any:
    try:
        return None if value is None else json.loads(value)
    except (ValueError, RecursionError):
        return value


@dataclass
class Site:
    broker: BrokerProcess
    directory: Path
    publisher: Publisher
    services: list[ServiceProcess] = field(default_factory=list)
    readers: list[Reader] = field(default_factory=list)

    def service(self, *args: str, **surveillance: Any) -> ServiceProcess:
        """A service process (not started); ``args`` are its flags, ``surveillance`` its config section."""
        config = write_config(self.directory, self.broker.bootstrap, **surveillance)
        service = ServiceProcess(config, self.directory / f"service-{len(self.services)}.log", args)
        self.services.append(service)
        return service

    def reader(self, topic: str, partitions: int = 2) -> Reader:
        reader = Reader(self.broker.bootstrap, topic, partitions)
        self.readers.append(reader)
        return reader


@pytest.fixture
def site(broker: BrokerProcess, tmp_path: Path) -> Iterator[Site]:
    created = Site(broker, tmp_path, Publisher(broker.bootstrap))
    try:
        yield created
    finally:
        for service in created.services:
            service.stop()
        for reader in created.readers:
            reader.close()
        created.publisher.close()


def plate_watch(watch_id: str, plate: str, **extra: Any) -> dict:
    return {"watch_id": watch_id, "kind": "plate", "plate": plate, "reason": "test", "requested_by": "tester",
            "requested_at": capture_time(), **extra}


def face_watch(watch_id: str, identity: list[float], threshold: float = 0.8, **extra: Any) -> dict:
    return {"watch_id": watch_id, "kind": "face", "feature": encode_feature(identity), "threshold": threshold,
            "reason": "test", "requested_by": "tester", "requested_at": capture_time(), **extra}

