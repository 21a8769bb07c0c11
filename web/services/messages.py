"""The latest N messages of a topic (or one partition), with key, value, headers and timestamp.

A short-lived consumer that joins no group (``assign``, no commits) reads the last N offsets of each
partition, so looking at a topic never shows up as a consumer group or moves anyone's offsets.
The newest N by timestamp across partitions are returned, newest first. Bytes that are UTF-8 are
returned as text (the UI pretty-prints JSON); anything else as base64, so nothing is lost or mangled;
a value larger than ``MAX_VALUE_BYTES`` is cut there and marked truncated.

What the client library cannot read is shown as undecodable (``undecodable`` says why), never an
error for the whole page (nor a crash of the console), and counted (``web.metrics.skipped``): headers
with a name that is not UTF-8 (confluent-kafka cannot return them; key and value still are), and a
batch that does not decompress (librdkafka stops that partition there, so its entry ends the list).
"""

from __future__ import annotations

import base64
import operator
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import OffsetSpec

from ..backends import BUS, Backends, BackendUnavailable
from ..events import UNREADABLE_BATCH
from ..metrics import skipped
from . import bus
from .errors import Invalid, NotFound

MAX_LIMIT = 500
MAX_VALUE_BYTES = 64 * 1024
READER = "messages"
"""This reader's label in ``console_bus_records_skipped_total``."""
_headers_of = operator.methodcaller("headers")
"""``Message.headers()``, called through the C API, which checks what it returns. For a header name that is
not UTF-8, confluent-kafka (2.16) returns a list holding a NULL name with the UnicodeDecodeError still set:
the interpreter's specialised call of ``msg.headers()`` lets that through once warm, and touching the NULL
kills the process; through ``methodcaller`` it is a SystemError every time. (The message keeps that list;
nothing here reads its headers again.)"""


def blob(data: bytes | None, cap: int = MAX_VALUE_BYTES) -> dict[str, Any] | None:
    """Bytes as ``{"encoding": "utf-8"|"base64", "data", "size", "truncated"}`` (None stays None)."""
    if data is None:
        return None
    cut = data[:cap]
    try:
        text, encoding = cut.decode(), "utf-8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(cut).decode(), "base64"
    return {"encoding": encoding, "data": text, "size": len(data), "truncated": len(cut) < len(data)}


def _message(msg: Any) -> dict[str, Any]:
    ts_type, ts = msg.timestamp()
    out = {"partition": msg.partition(), "offset": msg.offset(), "timestamp": ts if ts_type else None,
           "key": blob(msg.key()), "value": blob(msg.value()), "headers": [], "undecodable": None}
    try:
        out["headers"] = [{"key": k, "value": blob(v)} for k, v in (_headers_of(msg) or [])]
    except (SystemError, ValueError) as exc:
        out["undecodable"] = "a header name is not UTF-8"
        _skipped(msg, "header name not UTF-8", exc.__cause__ or exc)
    return out


def _unreadable(msg: Any, error: KafkaError) -> dict[str, Any]:
    _skipped(msg, "unreadable batch", error.str())
    return {"partition": msg.partition(), "offset": msg.offset(), "timestamp": None, "key": None, "value": None,
            "headers": [], "undecodable": error.str()}


def _skipped(msg: Any, reason: str, detail: object) -> None:
    skipped(READER, msg.topic(), reason, f"partition {msg.partition()} offset {msg.offset()}: {detail}",
            record=(msg.partition(), msg.offset()))


def latest(backends: Backends, topic: str, limit: int, partition: int | None = None) -> list[dict[str, Any]]:
    if not 1 <= limit <= MAX_LIMIT:
        raise Invalid("limit", f"limit must be between 1 and {MAX_LIMIT}")
    described = bus.metadata(backends).topics.get(topic)
    if described is None:
        raise NotFound("topic", topic)
    ids = sorted(described.partitions)
    if partition is not None:
        if partition not in described.partitions:
            raise Invalid("partition", f"{topic} has no partition {partition} (it has {len(ids)})")
        ids = [partition]
    tps = [TopicPartition(topic, p) for p in ids]
    low = bus.offsets(backends, tps, OffsetSpec.earliest())
    high = bus.offsets(backends, tps, OffsetSpec.latest())
    starts = {p: max(low[(topic, p)], high[(topic, p)] - limit) for p in ids}
    pending = {p for p in ids if starts[p] < high[(topic, p)]}
    if not pending:
        return []
    # librdkafka insists on a group.id; with assign() and no commits the group is never joined or stored.
    consumer = Consumer({**backends.settings.bus, "group.id": "console-messages",
                         "enable.auto.commit": False, "enable.partition.eof": True, "client.id": "console-messages",
                         "socket.timeout.ms": int(backends.settings.backend_timeout_s * 1000),
                         "isolation.level": "read_uncommitted"})
    found: list[dict[str, Any]] = []
    try:
        consumer.assign([TopicPartition(topic, p, starts[p]) for p in sorted(pending)])
        deadline = time.monotonic() + backends.settings.backend_timeout_s
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=limit, timeout=0.2):
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        continue
                    if error.code() in UNREADABLE_BATCH:
                        if msg.partition() in pending:  # librdkafka repeats it on every fetch: once is enough
                            found.append(_unreadable(msg, error))
                            pending.discard(msg.partition())
                        continue
                    raise BackendUnavailable(BUS, error.str())
                if msg.offset() < high[(topic, msg.partition())]:
                    found.append(_message(msg))
                if msg.offset() >= high[(topic, msg.partition())] - 1:
                    pending.discard(msg.partition())
    finally:
        consumer.close()
    found.sort(key=lambda m: (m["timestamp"] or 0, m["partition"], m["offset"]), reverse=True)
    return found[:limit]

