"""What each Spark task of the ingest job does with its slice of the bus: validate, stamp, write.

:func:`process_partition` is the ``mapInArrow`` function: it takes the source's Arrow batches
(key, value, topic, partition, offset, ...) and sorts each record with the shared schema code
(:mod:`contracts.records`) into valid rows (main + index tables), unrecognized rows (their own table,
counted) and dead letters (``capture.deadletter`` with the reason). ``ingest_time`` is stamped
per chunk right before that chunk's write, so it is the time the row reached HBase's door.

It yields one small row per task with what ``ingest.stats`` reports (per-device counts, per-stage
latency counters: :mod:`contracts.ingest_stats`), which is all the driver collects: the job's only
action per micro-batch, and the batch's offsets are committed by Spark only after every task (hence
every HBase write and dead letter) has finished.

HBase rows are idempotent (deterministic keys), so a replayed batch changes nothing there; dead
letters are at-least-once: a batch replayed after a crash may send its dead letters again (their
topic/partition/offset fields identify duplicates).

Nothing here imports pyspark, so it is tested with plain Arrow batches, a gateway and a broker.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from contracts.hbase import HBaseClient
from contracts.ingest_stats import STAGES, BatchTally
from contracts.records import Kind, Status, encode, epoch_ms, now_time, parse
from contracts.tables import captures as tables
from contracts.topics import Topics
from ingest.producer import BusSettings, RecordProducer, librdkafka_settings, open_producer

log = logging.getLogger("spark_jobs.capture_writer")

UNKNOWN = "unknown"

MAX_ROW_KEY = 32767
"""HBase's longest row key (``Short.MAX_VALUE``): a record that would need a longer one cannot be stored."""
LETTER_VALUE_BYTES = 256 * 1024
LETTER_KEY_BYTES = 1024
"""How much of a refused record's value and key its dead letter carries (see :func:`deadletter`)."""
DEVICE_CHARS = 64
"""The longest device or checkpoint name a refused record is counted under (see :func:`_device_of`)."""

RESULT_SCHEMA = "tally string"
"""One row per task: its :class:`BatchTally` as JSON (per-device counts, per-stage latency counters)."""
CHUNK_ROWS = 1000

Row = tuple[bytes | None, bytes | None, str, int, int, int | None]
"""key, value, topic, partition, offset, bus timestamp (ms since the epoch; None when the record has none)."""


@dataclass(frozen=True)
class WriterSettings:
    """Everything a task needs, pickled into it: endpoints, the job's bus settings, topic names, batch size, retries."""

    hbase: HBaseClient
    bus: BusSettings = field(repr=False)
    topic_kinds: Mapping[str, str]
    deadletter_topic: str = Topics.deadletter
    chunk_rows: int = CHUNK_ROWS
    retries: int = 5

    def kind_of(self, topic: str) -> Kind | None:
        value = self.topic_kinds.get(topic)
        return Kind(value) if value else None


# One connection per Python worker and endpoint: Spark reuses workers between tasks and batches.
_CONNECTIONS: dict[HBaseClient, Any] = {}
_PRODUCERS: dict[tuple[tuple[str, str], ...], RecordProducer] = {}


def _connection(settings: WriterSettings) -> Any:
    conn = _CONNECTIONS.get(settings.hbase)
    if conn is None:
        conn = _CONNECTIONS[settings.hbase] = settings.hbase.connect()
    return conn


def _drop_connection(settings: WriterSettings) -> None:
    conn = _CONNECTIONS.pop(settings.hbase, None)
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


def _producer(bus: BusSettings) -> RecordProducer:
    """The dead-letter producer, through the same small interface as the simulator's (one place to
    switch Kafka clients)."""
    key = tuple(sorted(librdkafka_settings(bus).items()))
    producer = _PRODUCERS.get(key)
    if producer is None:
        producer = _PRODUCERS[key] = open_producer(bus, {"client.id": "ingest-deadletter"})
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
    producer = _producer(settings.bus)
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
    """The dead-letter record: where it came from, why it was refused, and its bytes (base64).

    The bytes are cut to :data:`LETTER_VALUE_BYTES` (``value_bytes`` keeps the original length; topic, partition
    and offset find the whole record): base64 adds a third, so the letter of a record near the bus's size
    limit would be over it, could not be produced, and would fail the batch, and its replay again."""
    return encode({
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "reason": reason,
        "key": None if key is None else key[:LETTER_KEY_BYTES].decode(errors="replace"),
        "value_base64": None if value is None else base64.b64encode(value[:LETTER_VALUE_BYTES]).decode(),
        "value_bytes": None if value is None else len(value),
        "failed_at": now_time(),
    })


def _rows(batches: Iterable[pa.RecordBatch]) -> Iterator[Row]:
    for batch in batches:
        columns = batch.to_pydict()
        # Spark's timestamp column is microseconds; cast in Arrow, not per record in Python.
        stamps = batch.column("timestamp").cast(pa.int64()).to_pylist()
        yield from zip(columns["key"], columns["value"], columns["topic"], columns["partition"], columns["offset"],
                       (None if us is None else us // 1000 for us in stamps), strict=True)


def _device_of(value: bytes | None) -> tuple[str, str, str]:
    """Best effort for a record that failed validation: which device sent it, if its JSON says so. Only short
    ASCII text counts as a name: one record must not put a megabyte (or what JSON cannot carry) into the stats."""
    try:
        record = json.loads(value) if value is not None else None
    except (ValueError, RecursionError):  # as in contracts.records.parse
        record = None
    if not isinstance(record, dict):
        return UNKNOWN, UNKNOWN, UNKNOWN
    device, recognizer, checkpoint = (record.get(k) for k in ("device_ip", "recognizer_ip", "checkpoint_id"))
    return _name(device), _name(recognizer), _name(checkpoint)


def _name(value: Any) -> str:
    return value if isinstance(value, str) and 0 < len(value) <= DEVICE_CHARS and value.isascii() else UNKNOWN


def _storable(puts: list[tables.Put]) -> list[tables.Put]:
    for _table, key, _cells in puts:
        if len(key) > MAX_ROW_KEY:
            raise ValueError(f"its row key would be {len(key)} bytes, HBase takes at most {MAX_ROW_KEY}")
    return puts


def process_records(rows: Iterable[Row], settings: WriterSettings) -> BatchTally:
    """Validate and write every record; returns what ``ingest.stats`` reports (counts and latencies).

    A record is counted (valid or unrecognized, with its latencies) once its rows are built: one that passes
    validation but cannot be stored (a lone surrogate in its text, nesting too deep to encode, a row key too
    long for HBase) is refused then, like an invalid one, instead of failing the write of its whole chunk."""
    tally = BatchTally()
    capture_to_bus, bus_to_read, read_to_write, capture_to_ingest = (tally.latency[s] for s in STAGES)
    pending: list[tuple[Row, Kind, Any, int]] = []
    letters: list[tuple[str, bytes]] = []

    def refuse(row: Row, reason: str) -> None:
        key, value, topic, partition, offset, _bus_ms = row
        tally.device(topic, *_device_of(value)).invalid += 1
        letters.append((topic, deadletter(topic, partition, offset, key, value, reason)))

    def flush() -> None:
        stamp = now_time()
        stamp_ms = epoch_ms(stamp)
        puts: list[tables.Put] = []
        written = 0
        for row, kind, checked, read_ms in pending:
            topic, bus_ms, record = row[2], row[5], checked.record
            try:
                puts.extend(_storable(tables.rows_for_valid(kind, record, stamp) if checked.status is Status.VALID
                                      else [tables.row_for_unrecognized(topic, record, checked.unrecognized, stamp)]))
            except Exception as exc:  # building rows touches nothing but the record: what it raises is the record's
                refuse(row, f"cannot be stored: {type(exc).__name__}: {exc}")
                continue
            counts = tally.device(topic, record["device_ip"], record["recognizer_ip"], record["checkpoint_id"])
            if checked.status is Status.VALID:
                counts.valid += 1
            else:
                counts.unrecognized += 1
            capture_ms = epoch_ms(record["capture_time"])
            if bus_ms is not None:
                capture_to_bus[bus_ms - capture_ms] += 1
                bus_to_read[read_ms - bus_ms] += 1
            read_to_write[stamp_ms - read_ms] += 1
            capture_to_ingest[stamp_ms - capture_ms] += 1
            written += 1
        write_puts(puts, settings)
        tally.rows_written += written
        pending.clear()

    for row in rows:
        read_ms = int(time.time() * 1000)
        kind = settings.kind_of(row[2])
        if kind is None:
            refuse(row, "not a capture topic")
            continue
        checked = parse(kind, row[1])
        if checked.status is Status.INVALID:
            refuse(row, checked.reason)
            continue
        pending.append((row, kind, checked, read_ms))
        if len(pending) >= settings.chunk_rows:
            flush()
    if pending:
        flush()
    send_deadletters(letters, settings)
    return tally


def process_partition(batches: Iterator[pa.RecordBatch], settings: WriterSettings) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` body: one result row per task (nothing for an empty partition)."""
    tally = process_records(_rows(batches), settings)
    if tally.devices:
        yield pa.RecordBatch.from_pydict({"tally": [tally.to_json()]}, schema=pa.schema([("tally", pa.string())]))


def warm_up(batches: Iterator[pa.RecordBatch], settings: WriterSettings) -> Iterator[pa.RecordBatch]:
    """A no-op task run at start: forks and fills the Python workers (imports, HBase connection,
    producer) before the first real batch, which otherwise pays several seconds for them."""
    import spark_jobs.kafka_source  # noqa: F401 - the source's read() runs in these same workers

    for _ in batches:
        pass
    _connection(settings)
    _producer(settings.bus)
    yield pa.RecordBatch.from_pydict({"id": [0]}, schema=pa.schema([("id", pa.int64())]))


def summarize(tallies: Iterable[str]) -> BatchTally:
    """Fold the tasks' tallies (JSON, one per task) into the batch's."""
    merged = BatchTally()
    for text in tallies:
        merged.merge(BatchTally.from_json(text))
    return merged
