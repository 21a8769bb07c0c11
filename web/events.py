"""The SSE hub: one bus consumer per console process, fanned out to every connected page.

A confluent-kafka consumer runs in one thread with no consumer group (``assign``, never
``subscribe``, nothing committed), so each console process sees every event. Live topics start at
their end; a topic that appears after the hub started is read from its beginning (all of it is newer
than the hub). Some topics also have *history* that in-process folds need (the open alerts, the last
minute of ingest statistics): those partitions start earlier, and records below the end offset seen
at assignment go to the folds (listeners) only, never to pages.

Each record is parsed and serialised once, then handed to the event loop, which puts it in the
bounded queue of each page that asked for its topic. A record may be malformed or foreign: one that is
not a JSON object still reaches pages (as text, or base64 for binary, under ``value``) and listeners,
and is counted (``console_bus_records_skipped_total{reader="events"}``); one that cannot be delivered
at all is counted and dropped, and so is a batch librdkafka cannot read (stepped past). No record stops
the hub or breaks a page's stream.

A page that does not keep up loses the oldest events and is told how many (``event: dropped``); a
page that goes away is removed at once (the response's generator is cancelled on disconnect and
unsubscribes in ``finally``).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import logging
import math
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition
from prometheus_client import CollectorRegistry, Gauge
from sse_starlette import ServerSentEvent

from contracts.topics import Topics
from web.metrics import skipped
from web.services.background import BackgroundThread

log = logging.getLogger(__name__)

READER = "events"
"""This reader's label in ``console_bus_records_skipped_total``."""
UNREADABLE_BATCH = {KafkaError._BAD_MSG, KafkaError._BAD_COMPRESSION}
"""librdkafka's errors for a batch on the log that it cannot parse or decompress."""
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")
"""A ``\\uD800``-``\\uDFFF`` escape: only such JSON can hold an unpaired surrogate (raw UTF-8 cannot)."""

Listener = Callable[[str, bytes | None, Any, int], None]
"""``(topic, key, value parsed from JSON or None, timestamp ms)``, called in the consumer thread."""


@dataclass(frozen=True)
class HistorySpec:
    """Where a topic's history starts: the beginning (``since_s`` None) or ``since_s`` seconds ago."""

    since_s: float | None = None


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"number {text[:40]} is out of range")
    return number


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def decode_value(raw: bytes | None) -> tuple[Any, str | None]:
    """The record's value as JSON, else as text, else as base64 (binary), and why it is not a JSON object
    (None for an object, or a tombstone, whose value is None).

    Strict JSON only: NaN, Infinity, a number too large for a float or an unpaired surrogate would parse,
    but could not be written back as JSON that browsers and the API's responses accept, so such a record
    is text. Too deep or too many digits is a ValueError or RecursionError of the parser: text too.
    """
    if raw is None:
        return None, None
    try:
        value = json.loads(raw, parse_float=_finite, parse_constant=_no_constant)
        if _SURROGATE_ESCAPE.search(raw):
            json.dumps(value, ensure_ascii=False).encode()  # UnicodeEncodeError on an unpaired one
    except (ValueError, RecursionError):
        try:
            return raw.decode(), "not JSON"
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(raw).decode()}, "not UTF-8"
    return value, None if isinstance(value, dict) else "not a JSON object"


def event_data(topic: str, value: Any) -> str:
    """The SSE ``data:``: the record plus a ``topic`` field (a non-object value goes under ``value``)."""
    record = dict(value) if isinstance(value, dict) else {"value": value}
    record["topic"] = topic
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


@dataclass(eq=False)
class Subscription:
    """One page's bounded queue of ``(topic, data)``; the oldest go first when it is full."""

    topics: frozenset[str]
    size: int
    queue: collections.deque[tuple[str, str]] = field(init=False)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    dropped: int = 0

    def __post_init__(self) -> None:
        self.queue = collections.deque(maxlen=self.size)

    def put(self, topic: str, data: str) -> None:
        if len(self.queue) == self.size:
            self.dropped += 1
        self.queue.append((topic, data))
        self.ready.set()


class EventHub:
    def __init__(self, bus: dict[str, str], topics: Iterable[str], history: dict[str, HistorySpec] | None = None,
                 queue_size: int = 256, metadata_interval_s: float = 5.0) -> None:
        """``bus``: the console's bus client settings (``ConsoleSettings.bus``)."""
        self._bus = bus
        self.topics = tuple(dict.fromkeys(topics))
        self.history = history or {}
        self.queue_size = queue_size
        self.metadata_interval_s = metadata_interval_s
        self._listeners: list[Listener] = []
        self._subscriptions: set[Subscription] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = BackgroundThread("console-event-hub", self._run)
        self._history_left: dict[tuple[str, int], int] = {}
        """Partition -> end offset at assignment, while its history is still being read."""
        self._history_seen: set[str] = set()
        """History topics whose existing records have all been read (or that did not exist)."""
        self._stepping: dict[tuple[str, int], int] = {}
        """Partition -> the offset last sought to, to get past a batch librdkafka cannot read."""
        self._lock = threading.Lock()

    # -- pages ------------------------------------------------------------------------------------
    def subscribe(self, topics: Iterable[str]) -> Subscription:
        subscription = Subscription(frozenset(topics), self.queue_size)
        self._subscriptions.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self._subscriptions.discard(subscription)

    @property
    def clients(self) -> int:
        return len(self._subscriptions)

    def register_metrics(self, registry: CollectorRegistry) -> None:
        Gauge("console_sse_clients", "Pages connected to GET /api/v1/events",
              registry=registry).set_function(lambda: self.clients)

    async def stream(self, topics: Iterable[str]) -> AsyncIterator[ServerSentEvent]:
        """The events of one page until it goes away: subscribed when the response starts, always unsubscribed."""
        subscription = self.subscribe(topics)
        try:
            while True:
                await subscription.ready.wait()
                subscription.ready.clear()
                if subscription.dropped:
                    dropped, subscription.dropped = subscription.dropped, 0
                    yield ServerSentEvent(json.dumps({"dropped": dropped}), event="dropped")
                while subscription.queue:
                    topic, data = subscription.queue.popleft()
                    yield ServerSentEvent(data, event=topic)
        finally:
            self.unsubscribe(subscription)

    def _fan_out(self, topic: str, data: str) -> None:
        for subscription in self._subscriptions:
            if topic in subscription.topics:
                subscription.put(topic, data)

    # -- in-process folds -------------------------------------------------------------------------
    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def history_loaded(self, topic: str) -> bool:
        """True once every record the topic held when the hub found it has reached the listeners."""
        with self._lock:
            return topic in self._history_seen

    # -- the consumer thread ----------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop(10)

    def _run(self) -> None:
        consumer = Consumer({
            **self._bus,
            # librdkafka wants a group id even for assign(); nothing joins it or commits to it.
            "group.id": f"console-hub-{uuid.uuid4().hex}", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "allow.auto.create.topics": False,
            # End-of-partition events end a history read even when its last offsets are markers or gone.
            "enable.partition.eof": True,
            "logger": logging.getLogger("web.events.bus"),
        })
        assigned: set[tuple[str, int]] = set()
        first_look = True
        next_look = 0.0
        try:
            while not self._thread.stopping:
                if time.monotonic() >= next_look:
                    next_look = time.monotonic() + self.metadata_interval_s
                    try:
                        self._assign_new(consumer, assigned, first_look)
                        first_look = False
                    except KafkaException as exc:
                        log.warning("event hub: bus metadata unavailable: %s", exc)
                message = consumer.poll(0.2)
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        self._history_done(message.topic(), message.partition())
                    elif error.code() in UNREADABLE_BATCH:
                        self._step_past(consumer, message)
                    else:
                        log.warning("event hub: %s", error)
                    continue
                try:
                    self._deliver(message)
                except Exception as exc:  # one record never stops the hub
                    skipped(READER, str(message.topic()), "undeliverable", repr(exc))
        except Exception:
            log.exception("event hub stopped")
        finally:
            consumer.close()

    def _step_past(self, consumer: Consumer, message: Any) -> None:
        """A batch librdkafka cannot read: it reports it, at the batch's first offset, on every fetch and never
        moves on. Seek one offset further each time until past the batch (whose length it does not tell)."""
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        skipped(READER, topic, "unreadable batch", f"partition {partition}: {message.error().str()}",
                record=(partition, offset))
        target = max(self._stepping.get((topic, partition), offset), offset) + 1
        self._stepping[(topic, partition)] = target
        consumer.seek(TopicPartition(topic, partition, target))

    def _assign_new(self, consumer: Consumer, assigned: set[tuple[str, int]], first_look: bool) -> None:
        metadata = consumer.list_topics(timeout=5)
        new: list[TopicPartition] = []
        for topic in self.topics:
            info = metadata.topics.get(topic)
            if info is None or info.error is not None:
                continue
            for partition in info.partitions:
                if (topic, partition) not in assigned:
                    new.append(self._start_position(consumer, topic, partition, first_look))
                    assigned.add((topic, partition))
        if new:
            consumer.incremental_assign(new)
        with self._lock:
            pending = {topic for topic, _partition in self._history_left}
            self._history_seen.update(topic for topic in self.history if topic not in pending)

    def _start_position(self, consumer: Consumer, topic: str, partition: int, first_look: bool) -> TopicPartition:
        spec = self.history.get(topic)
        if not first_look:
            return TopicPartition(topic, partition, OFFSET_BEGINNING)  # a new topic: all of it is news
        if spec is None:
            return TopicPartition(topic, partition, OFFSET_END)
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5)
        start = low
        if spec.since_s is not None:
            since_ms = int((time.time() - spec.since_s) * 1000)
            found = consumer.offsets_for_times([TopicPartition(topic, partition, since_ms)], timeout=5)[0]
            start = found.offset if found.offset >= 0 else high
        if start < high:
            with self._lock:
                self._history_left[(topic, partition)] = high
        return TopicPartition(topic, partition, start)

    def _history_done(self, topic: str, partition: int) -> None:
        with self._lock:
            found = self._history_left.pop((topic, partition), None) is not None
            if found and all(t != topic for t, _p in self._history_left):
                self._history_seen.add(topic)

    def _deliver(self, message: Any) -> None:
        """Listeners first, then pages (history is for the listeners only). The partition's history ends
        with its last record even when that record cannot be delivered."""
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        end = self._history_left.get((topic, partition))
        try:
            value, problem = decode_value(message.value())
            if problem is not None:
                skipped(READER, topic, problem, f"partition {partition} offset {offset}")
            _kind, timestamp = message.timestamp()
            for listener in self._listeners:
                try:
                    listener(topic, message.key(), value, timestamp)
                except Exception as exc:
                    name = getattr(listener, "__qualname__", "a listener")
                    skipped(READER, topic, "listener failed", f"{name} at offset {offset}: {exc!r}")
            if (end is None or offset >= end) and self._loop is not None and self._subscriptions:
                self._loop.call_soon_threadsafe(self._fan_out, topic, event_data(topic, value))
        finally:
            if end is not None and offset + 1 >= end:
                self._history_done(topic, partition)


def hub_topics(topics: Topics) -> tuple[str, ...]:
    """Topics pages may follow: the data topics except the raw captures (hundreds a second), and the surveillance
    control topics (the watch and statistic lists follow them live; the console folds them, see services.surveillance).
    """
    return (topics.ingest_stats, topics.alerts, topics.surveillance_hits, topics.surveillance_stats,
            topics.video_status, topics.deadletter, topics.heartbeat, topics.surveillance_replies,
            topics.control_watchlist, topics.control_stats)


def default_topics(topics: Topics) -> tuple[str, ...]:
    """What a page without ``?topics=`` gets: all hub topics but the per-device heartbeats."""
    return tuple(t for t in hub_topics(topics) if t != topics.heartbeat)
