"""The drill's load: the device fleet that fails over, the consumer group standing in for the loaders, and the
record counts a drill compares between the sites."""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from contracts.topics import NEW_TOPIC_ERRORS, Topics
from ingest.city import build_city
from ingest.traffic import Traffic, TrafficConfig

TOPICS = Topics()
CAPTURES = list(TOPICS.captures)
HOLD = "hold"  # the fleet's state while it keeps its records for a planned switch


class Fleet(threading.Thread):
    """Capture devices: produce to the active site, keep a replay window, fail over when acks stop.

    ``switch(site)`` is the planned move of failback: flush to the current site, then send to the new one;
    ``switch(HOLD)`` keeps what the devices capture meanwhile (sent on the next switch).
    """

    def __init__(self, sites: dict[str, str], rate: float, failover_after: float, replay: float,
                 upload: Callable[[list[tuple[str, bytes]]], None] | None = None) -> None:
        super().__init__(daemon=True)
        self.sites, self.rate = sites, rate
        self.upload = upload
        """With ``--images``: the devices put each capture's image into the primary's store before publishing it."""
        self.failover_after, self.replay = failover_after, replay
        self.traffic = Traffic(build_city(7, 24), TrafficConfig(seed=7, curve="flat", malformed_rate=0.0))
        self.window: collections.deque[tuple[float, str, bytes, bytes, str]] = collections.deque()
        self.held: list[tuple[str, bytes, bytes, str]] = []
        self.acked: dict[str, tuple[str, float]] = {}  # record id -> (site, time) of its first acknowledgement
        self.acks: list[tuple[float, str]] = []  # every acknowledgement (replays too), for the chart
        self.kind: dict[str, str] = {}
        self.active = "primary"
        self.requested: str | None = None
        self.failed_over = False
        self.switched_at: float | None = None
        self.first_ack: dict[str, float] = {}  # site -> first acknowledgement since the fleet moved there
        self.last_ack = time.time()
        self.stopping = threading.Event()

    def _producer(self, site: str) -> Producer:
        return Producer({"bootstrap.servers": self.sites[site], "linger.ms": 5, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 600_000, "log_level": 0})

    def _send(self, producer: Producer, site: str, topic: str, key: bytes, value: bytes, record_id: str) -> None:
        def done(err: Any, _msg: Any) -> None:
            if err is None:
                now = time.time()
                self.last_ack = now
                self.acked.setdefault(record_id, (site, now))
                self.acks.append((now, site))
                self.first_ack.setdefault(site, now)

        while True:
            try:
                producer.produce(topic, value, key, on_delivery=done)
                return
            except BufferError:
                producer.poll(0.05)

    def run(self) -> None:
        producer = self._producer(self.active)
        start, sent = time.monotonic(), 0
        self.last_ack = time.time()  # the silence that triggers a failover counts from here
        while not self.stopping.is_set():
            due = max(int((time.monotonic() - start) * self.rate) - sent, 0)
            batch = self.traffic.records(due, time.monotonic() - start)
            if self.upload is not None:
                self.upload([(key, b"\xff\xd8" + key.encode() + bytes(2048)) for key in map(_image_key, batch) if key])
            for emitted in batch:
                record_id = json.loads(emitted.value)["record_id"]
                topic = TOPICS.of_kind(emitted.kind)
                self.kind[record_id] = emitted.kind.value
                self.window.append((time.time(), topic, emitted.key, emitted.value, record_id))
                if self.active == HOLD:
                    self.held.append((topic, emitted.key, emitted.value, record_id))
                else:
                    self._send(producer, self.active, topic, emitted.key, emitted.value, record_id)
            sent += due
            cutoff = time.time() - self.replay
            while self.window and self.window[0][0] < cutoff:
                self.window.popleft()
            producer.poll(0.02)
            if self.requested is not None:
                producer = self._switch(producer, self.requested)
            elif self._primary_silent():
                producer = self._failover()
        producer.flush(30)

    def _primary_silent(self) -> bool:
        return not self.failed_over and self.active == "primary" and time.time() - self.last_ack > self.failover_after

    def _failover(self) -> Producer:
        """No acknowledgement for `failover_after` seconds: fall back to the DR bootstrap, re-send the window."""
        self.active, self.failed_over, self.switched_at = "dr", True, time.time()
        self.first_ack.pop("dr", None)
        producer = self._producer("dr")
        for _, topic, key, value, record_id in list(self.window):
            self._send(producer, "dr", topic, key, value, record_id)
        return producer

    def _switch(self, producer: Producer, site: str) -> Producer:
        if self.active != HOLD:
            producer.flush(60)  # a planned switch: everything sent to the old site is acknowledged first
        self.active, self.requested, self.last_ack = site, None, time.time()
        if site == HOLD:
            return producer
        self.first_ack.pop(site, None)
        producer = self._producer(site)
        for topic, key, value, record_id in self.held:
            self._send(producer, site, topic, key, value, record_id)
        self.held.clear()
        return producer

    def switch(self, site: str, timeout: float = 90) -> None:
        self.requested = site
        wait_until(lambda: self.active == site, timeout, f"devices switched to {site}")


class Loader(threading.Thread):
    """A consumer group standing in for the group-based loaders; it follows the devices from site to site."""

    def __init__(self, sites: dict[str, str], fleet: Fleet) -> None:
        super().__init__(daemon=True)
        self.sites, self.fleet = sites, fleet
        self.seen: collections.Counter[str] = collections.Counter()
        self.first_record: dict[str, float] = {}  # site -> first record read there after moving
        self.stopping = threading.Event()

    def _consumer(self, site: str) -> Consumer:
        consumer = Consumer({"bootstrap.servers": self.sites[site], "group.id": "drill-loader",
                             "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                             "auto.commit.interval.ms": 500, "log_level": 0})
        consumer.subscribe(CAPTURES)
        return consumer

    def run(self) -> None:
        site, consumer = "primary", self._consumer("primary")
        while not self.stopping.is_set():
            if self.fleet.active not in (site, HOLD):
                # The group moves where the mirror committed its translated offsets. Closing the old consumer
                # may wait for a dead site (leave group, commit), so that is left to a thread.
                threading.Thread(target=consumer.close, daemon=True).start()
                site = self.fleet.active
                self.first_record.pop(site, None)
                consumer = self._consumer(site)
            for msg in consumer.consume(500, 0.2):
                if not msg.error():
                    self.seen[json.loads(msg.value())["record_id"]] += 1
                    self.first_record.setdefault(site, time.time())
        consumer.close()


def _image_key(emitted: Any) -> str | None:
    """The key in ``captures`` a record's ``image_url`` names (None: it names none)."""
    url = json.loads(emitted.value).get("image_url") or ""
    prefix = "s3://captures/"
    return url[len(prefix):] if url.startswith(prefix) else None


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Until `condition()` holds. A retriable Kafka error while asking (a partition between leaders, a broker
    restarting) is asked again, not a failed drill."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except KafkaException as exc:
            error = exc.args[0]
            # librdkafka marks a watermark query's NOT_LEADER_FOR_PARTITION (a partition the mirror just created
            # on a broker that has just started) as not retriable; it is as transient as the others.
            if not (error.retriable() or error.code() in NEW_TOPIC_ERRORS) or time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.2)


def record_ids(bootstrap: str) -> collections.Counter[str]:
    """Every record id in the capture topics of a cluster, with how often it occurs."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "drill-audit", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "log_level": 0})
    out: collections.Counter[str] = collections.Counter()
    try:
        ends = {(tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=10)[1]
                for tp in _partitions(consumer)}
        consumer.assign([TopicPartition(t, p, 0) for t, p in ends])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            positions = {(tp.topic, tp.partition): tp.offset
                         for tp in consumer.position([TopicPartition(t, p) for t, p in ends])}
            if all(positions[tp] >= end or (positions[tp] < 0 and end == 0) for tp, end in ends.items()):
                break
            for msg in consumer.consume(1000, 0.5):
                if not msg.error():
                    out[json.loads(msg.value())["record_id"]] += 1
    finally:
        consumer.close()
    return out


def _partitions(consumer: Consumer) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for topic in CAPTURES
            for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions]


def end_total(bootstrap: str) -> int:
    """Records in the capture topics of a cluster (their high watermarks: no transactions here)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "drill-audit", "log_level": 0})
    try:
        return sum(consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in _partitions(consumer))
    finally:
        consumer.close()


def create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in CAPTURES]).values():
        future.result(30)


