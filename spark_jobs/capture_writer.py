"""What each Spark task of the ingest job does with its slice of the bus: validate, stamp, write.

:func:`process_partition` is the ``mapInArrow`` function: it takes the source's Arrow batches
(key, value, topic, partition, offset, ...) and sorts each record with the shared schema code
(:mod:`contracts.records`) into valid rows (main + index tables), unrecognized rows (their own table,
counted) and dead letters (``capture.deadletter`` with the reason). ``ingest_time`` is stamped
per chunk right before that chunk's write, so it is the time the row reached HBase's door.

It yields one small row per topic with counts and capture->ingest latencies, which is all the
driver collects: the job's only action per micro-batch, and the batch's offsets are committed
by Spark only after every task (hence every HBase write and dead letter) has finished.

HBase rows are idempotent (deterministic keys), so a replayed batch changes nothing there; dead
letters are at-least-once: a batch replayed after a crash may send its dead letters again (their
topic/partition/offset fields identify duplicates).

Nothing here imports pyspark, so it is tested with plain Arrow batches, a gateway and a broker.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from contracts.records import Kind, Status, encode, epoch_ms, now_time, parse
from contracts.tables import captures as tables
from contracts.topics import Topics
from ingest.producer import RecordProducer, open_producer

log = logging.getLogger("spark_jobs.capture_writer")

RESULT_SCHEMA = "topic string, valid long, unrecognized long, invalid long, latencies_ms array<long>"
CHUNK_ROWS = 1000
MAX_LATENCY_SAMPLES = 2000


@dataclass(frozen=True)
class WriterSettings:
    """Everything a task needs, pickled into it: endpoints, topic names, batch size, retries."""

    hbase_host: str
    hbase_port: int
    bootstrap: str
    topic_kinds: Mapping[str, str]
    deadletter_topic: str = Topics.deadletter
    chunk_rows: int = CHUNK_ROWS
    retries: int = 5
    hbase_transport: str = "buffered"
    hbase_protocol: str = "binary"

    def kind_of(self, topic: str) -> Kind | None:
        value = self.topic_kinds.get(topic)
        return Kind(value) if value else None


@dataclass
class TopicTally:
    valid: int = 0
    unrecognized: int = 0
    invalid: int = 0
    latencies_ms: list[int] = field(default_factory=list)


# One connection per Python worker and endpoint: Spark reuses workers between tasks and batches.
_CONNECTIONS: dict[tuple, Any] = {}
_PRODUCERS: dict[str, RecordProducer] = {}


def _connection(settings: WriterSettings) -> Any:
    import happybase

    key = (settings.hbase_host, settings.hbase_port, settings.hbase_transport, settings.hbase_protocol)
    conn = _CONNECTIONS.get(key)
    if conn is None:
        conn = _CONNECTIONS[key] = happybase.Connection(
            settings.hbase_host, settings.hbase_port, transport=settings.hbase_transport,
            protocol=settings.hbase_protocol, timeout=60_000, autoconnect=True)
    return conn


def _drop_connection(settings: WriterSettings) -> None:
    key = (settings.hbase_host, settings.hbase_port, settings.hbase_transport, settings.hbase_protocol)
    conn = _CONNECTIONS.pop(key, None)
    if conn is not None:
        with contextlib.suppress(Exception):  # already broken: closing is best effort
            conn.close()


def close_cached_clients() -> None:
    """Drop this process's HBase connections and producers (for processes that outlive their servers)."""
    for key in list(_CONNECTIONS):
        with contextlib.suppress(Exception):
            _CONNECTIONS.pop(key).close()
    while _PRODUCERS:
        _PRODUCERS.popitem()[1].flush(1)


def _producer(bootstrap: str) -> RecordProducer:
    """The dead-letter producer, through the same small interface as the simulator's (one place to
    switch Kafka clients)."""
    producer = _PRODUCERS.get(bootstrap)
    if producer is None:
        producer = _PRODUCERS[bootstrap] = open_producer(bootstrap, {"client.id": "ingest-deadletter"})
    return producer


def write_puts(puts: list[tables.Put], settings: WriterSettings) -> None:
    """Write rows grouped per table with mutateRows; retried on a fresh connection (writes are idempotent)."""
    by_table: dict[str, list[tuple[bytes, tables.Cells]]] = defaultdict(list)
    for table, key, cells in puts:
        by_table[table].append((key, cells))
    for attempt in range(settings.retries + 1):
        try:
            conn = _connection(settings)
            for table, rows in by_table.items():
                # One mutateRows per table and chunk (happybase's batch_size counts cells, not rows).
                with conn.table(table).batch() as batch:
                    for key, cells in rows:
                        batch.put(key, cells)
            return
        except Exception as exc:
            _drop_connection(settings)
            if attempt == settings.retries:
                raise
            delay = min(0.2 * 2**attempt, 5.0)
            log.warning("HBase write failed (%s); retrying in %.1fs", exc, delay)
            time.sleep(delay)


def send_deadletters(letters: list[tuple[str, bytes]], settings: WriterSettings) -> None:
    """Produce dead letters (key = source topic) and wait for every acknowledgement before returning."""
    if not letters:
        return
    producer = _producer(settings.bootstrap)
    failures: list[str] = []

    def done(error: str | None) -> None:
        if error is not None:
            failures.append(error)

    for topic, value in letters:
        producer.produce(settings.deadletter_topic, topic.encode(), value, done)
    remaining = producer.flush(60)
    if remaining or failures:
        raise RuntimeError(f"dead letters not acknowledged: {remaining} pending, errors {failures[:3]}")


def deadletter(topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None, reason: str) -> bytes:
    """The dead-letter record: where it came from, why it was refused, and the exact bytes (base64)."""
    return encode({
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "reason": reason,
        "key": None if key is None else key.decode(errors="replace"),
        "value_base64": None if value is None else base64.b64encode(value).decode(),
        "failed_at": now_time(),
    })


def _rows(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[bytes | None, bytes | None, str, int, int]]:
    for batch in batches:
        columns = batch.to_pydict()
        yield from zip(columns["key"], columns["value"], columns["topic"], columns["partition"], columns["offset"],
                       strict=True)


def process_records(rows: Iterable[tuple[bytes | None, bytes | None, str, int, int]],
                    settings: WriterSettings) -> dict[str, TopicTally]:
    """Validate and write every record; returns the counts and latencies per topic."""
    tally: dict[str, TopicTally] = defaultdict(TopicTally)
    pending: list[tuple[str, Kind, Any]] = []
    letters: list[tuple[str, bytes]] = []

    def flush() -> None:
        stamp = now_time()
        stamp_ms = epoch_ms(stamp)
        puts: list[tables.Put] = []
        for topic, kind, checked in pending:
            if checked.status is Status.VALID:
                puts.extend(tables.rows_for_valid(kind, checked.record, stamp))
                samples = tally[topic].latencies_ms
                if len(samples) < MAX_LATENCY_SAMPLES:
                    samples.append(stamp_ms - epoch_ms(checked.record["capture_time"]))
            else:
                puts.append(tables.row_for_unrecognized(topic, checked.record, checked.unrecognized, stamp))
        write_puts(puts, settings)
        pending.clear()

    for key, value, topic, partition, offset in rows:
        kind = settings.kind_of(topic)
        if kind is None:
            tally[topic].invalid += 1
            letters.append((topic, deadletter(topic, partition, offset, key, value, "not a capture topic")))
            continue
        checked = parse(kind, value)
        if checked.status is Status.INVALID:
            tally[topic].invalid += 1
            letters.append((topic, deadletter(topic, partition, offset, key, value, checked.reason)))
            continue
        if checked.status is Status.VALID:
            tally[topic].valid += 1
        else:
            tally[topic].unrecognized += 1
        pending.append((topic, kind, checked))
        if len(pending) >= settings.chunk_rows:
            flush()
    if pending:
        flush()
    send_deadletters(letters, settings)
    return dict(tally)


def process_partition(batches: Iterator[pa.RecordBatch], settings: WriterSettings) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` body: one result row per topic seen in this partition."""
    tally = process_records(_rows(batches), settings)
    if not tally:
        return
    topics = sorted(tally)
    yield pa.RecordBatch.from_pydict({
        "topic": topics,
        "valid": [tally[t].valid for t in topics],
        "unrecognized": [tally[t].unrecognized for t in topics],
        "invalid": [tally[t].invalid for t in topics],
        "latencies_ms": [tally[t].latencies_ms for t in topics],
    }, schema=pa.schema([("topic", pa.string()), ("valid", pa.int64()), ("unrecognized", pa.int64()),
                         ("invalid", pa.int64()), ("latencies_ms", pa.list_(pa.int64()))]))


def warm_up(batches: Iterator[pa.RecordBatch], settings: WriterSettings) -> Iterator[pa.RecordBatch]:
    """A no-op task run at start: forks and fills the Python workers (imports, HBase connection,
    producer) before the first real batch, which otherwise pays several seconds for them."""
    import spark_jobs.kafka_source  # noqa: F401 - the source's read() runs in these same workers

    for _ in batches:
        pass
    _connection(settings)
    _producer(settings.bootstrap)
    yield pa.RecordBatch.from_pydict({"id": [0]}, schema=pa.schema([("id", pa.int64())]))


def summarize(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Fold the per-partition result rows (as dicts) into one batch summary."""
    out: dict[str, Any] = {"valid": {}, "unrecognized": {}, "invalid": {}, "latencies_ms": []}
    for row in rows:
        for name in ("valid", "unrecognized", "invalid"):
            out[name][row["topic"]] = out[name].get(row["topic"], 0) + row[name]
        out["latencies_ms"].extend(row["latencies_ms"] or [])
    return out

