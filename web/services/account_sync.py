"""The console's users and page sessions, carried to the other site's console through the bus.

Each site's console keeps its users and sessions in its own HBase (`web/auth`). For an operator to go on at the DR
site after a switchover (same user, same session: the session cookie names a row there too), those two tables travel
as records on the compacted, mirrored ``console.accounts`` topic: key ``<table>:<row key>``, value the row's cells
(JSON, base64), a tombstone for a deleted row.

A thread of each console (:class:`AccountSync`):
- while its site acts, every ``interval_s`` it scans both tables and publishes each row that differs from what the
  topic holds (``acks=all``, idempotent), and a tombstone for each row gone. It compares with the topic as read back,
  so a restart, or a site promoted after applying the other's records, publishes only real changes. Scanning (rather
  than hooking every write) also carries the users `python -m web.auth` makes and the sessions that expire.
- while its site stands by, it applies every record the mirror brings to its HBase. It publishes nothing: there the
  mirror is the topic's one writer.
It reads the topic from its start and to its end before it publishes, so a site just promoted first applies what the
mirror drained. A record that is not such a change (anyone with WRITE may write a topic) is set aside and counted
(``console_bus_records_skipped_total{reader="account-sync"}``); the thread goes on.

What travels: password hashes (argon2) and the SHA-256 of session ids, never a password or a session id; the topic is
readable by the console and the mirror only (`contracts/bus_acls.py`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client import CollectorRegistry, Counter

from contracts.tables import console as tables
from web.auth.table import Connect, ConsoleTable
from web.metrics import skipped
from web.services.background import BackgroundThread

log = logging.getLogger(__name__)

READER = "account-sync"
TABLES = (tables.USER_TABLE, tables.SESSION_TABLE)
INTERVAL_S = 1.0
RETRY_S = 2.0


class BadChange(ValueError):
    """A record that is not a change of a console account table."""


def encode_row(cells: dict[bytes, bytes]) -> bytes:
    """A row's cells as the record's value: the same bytes for the same cells, whichever site encodes them."""
    return json.dumps({column.decode(): base64.b64encode(value).decode() for column, value in sorted(cells.items())},
                      separators=(",", ":")).encode()


def decode_change(key: bytes | None, value: bytes | None) -> tuple[str, bytes, dict[bytes, bytes] | None]:
    """(table, row key, cells or None for a deleted row); BadChange for anything else."""
    table, sep, row = (key or b"").partition(b":")
    if not sep or not row or table.decode("utf-8", "replace") not in TABLES:
        raise BadChange(f"key {key[:40] if key else key!r} names no account table row")
    if value is None:
        return table.decode(), row, None
    try:
        raw = json.loads(value)
        if not isinstance(raw, dict) or not raw:
            raise BadChange("value is not an object of cells")
        cells = {str(column).encode(): base64.b64decode(str(data), validate=True) for column, data in raw.items()}
    except (ValueError, binascii.Error) as exc:
        raise BadChange(f"value is not JSON cells: {exc}") from None
    families = {column.split(b":", 1)[0] for column in cells}
    if families != {family.encode() for family in tables.TABLES[table.decode()]}:
        raise BadChange(f"cells of families {sorted(families)} do not fit table {table.decode()}")
    return table.decode(), row, cells


class AccountSync:
    def __init__(self, connect: Connect, bus: dict[str, str], topic: str, acting: Callable[[], bool],
                 timeout_s: float, interval_s: float = INTERVAL_S) -> None:
        """``acting``: whether this console publishes (its site runs the business, or a switchover away from it
        drains: `web.site.ConsoleSite.publishing`); it applies what the topic brings otherwise."""
        self._tables = {name: ConsoleTable(connect, name) for name in TABLES}
        self._bus = bus
        self._topic = topic
        self._acting = acting
        self._timeout_s = timeout_s
        self._interval_s = interval_s
        self._held: dict[bytes, bytes] = {}
        """What the topic holds, as read back: record key -> digest of its value (absent: no row or a tombstone)."""
        self._thread = BackgroundThread(READER, self._run)
        self.published = Counter("console_account_changes_published", "User and session rows published for the "
                                 "other site's console", registry=None)
        self.applied = Counter("console_account_changes_applied", "User and session rows the other site's console "
                               "published, applied to this site's HBase", registry=None)

    def register_metrics(self, registry: CollectorRegistry) -> None:
        registry.register(self.published)
        registry.register(self.applied)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop(self._timeout_s + 10)

    # -- the loop ------------------------------------------------------------------------------------------------
    def _run(self) -> None:
        consumer: Consumer | None = None
        producer: Producer | None = None
        try:
            while not self._thread.stopping:
                try:
                    if consumer is None:
                        consumer = self._follow()
                    if consumer is None:
                        self._thread.wait(RETRY_S)
                        continue
                    if not self._read(consumer):
                        continue
                    if self._acting():
                        producer = producer or self._producer()
                        self._publish(producer)
                    self._thread.wait(self._interval_s)  # read to the end: the next round in a while
                except (KafkaException, OSError, TimeoutError) as exc:
                    log.warning("account sync: %s; trying again in %g s", exc, RETRY_S)
                    self._thread.wait(RETRY_S)
                except Exception:  # an HBase failure of any kind: the loop must go on
                    log.exception("account sync: HBase failed; trying again in %g s", RETRY_S)
                    self._thread.wait(RETRY_S)
        finally:
            if consumer is not None:
                consumer.close()
            if producer is not None:
                producer.flush(self._timeout_s)

    def _producer(self) -> Producer:
        """Idempotent, ``acks=all``: an acknowledged change is on every in-sync replica, once."""
        return Producer({**self._bus, "enable.idempotence": True, "acks": "all", "linger.ms": 5, "logger": log})

    def _follow(self) -> Consumer | None:
        """A consumer assigned every partition of the topic from its start (no group: it commits nothing), made
        first when this site acts; None while the topic is not there yet (the mirror makes it at a standing-by site)."""
        if self._acting():
            self._ensure_topic()
        consumer = Consumer({**self._bus, "group.id": f"console-{READER}", "enable.auto.commit": False,
                             "logger": log})
        metadata = consumer.list_topics(self._topic, timeout=self._timeout_s).topics.get(self._topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            consumer.close()
            return None
        consumer.assign([TopicPartition(self._topic, p, -2) for p in metadata.partitions])  # -2: OFFSET_BEGINNING
        return consumer

    def _ensure_topic(self) -> None:
        admin = AdminClient({**self._bus, "logger": log})
        topic = NewTopic(self._topic, 1, -1, config={"cleanup.policy": "compact"})
        try:
            admin.create_topics([topic], request_timeout=self._timeout_s)[self._topic].result(self._timeout_s + 5)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    def _read(self, consumer: Consumer) -> bool:
        """Take in what the topic brought (applying it while standing by); whether it was read to its end."""
        messages = consumer.consume(500, 0.2)
        for message in messages:
            if message.error() is None:
                self._take(message)
        if messages:
            return False
        for partition in consumer.assignment():
            _low, high = consumer.get_watermark_offsets(partition, timeout=self._timeout_s, cached=False)
            position = consumer.position([partition])[0].offset
            if high > 0 and position < high:
                return False
        return True

    def _take(self, message: Message) -> None:
        key, value = message.key(), message.value()
        try:
            table, row, cells = decode_change(key, value)
        except BadChange as exc:
            skipped(READER, self._topic, "not an account change", exc, (message.partition(), message.offset()))
            return
        assert key is not None
        if not self._acting():
            with self._tables[table].open() as hbase:
                if cells is None:
                    hbase.delete(row)
                else:
                    hbase.put(row, cells)
            self.applied.inc()
        if value is None:
            self._held.pop(key, None)
        else:
            self._held[key] = hashlib.sha256(value).digest()

    def _publish(self, producer: Producer) -> None:
        """Publish every row that differs from what the topic holds, and a tombstone per row gone; wait for the
        bus to acknowledge them (a failure raises KafkaException: the next round publishes them again)."""
        present: dict[bytes, bytes] = {}
        for name, table in self._tables.items():
            with table.open() as hbase:
                for row, cells in hbase.scan(batch_size=500):
                    present[name.encode() + b":" + row] = encode_row(cells)
        changes: list[tuple[bytes, bytes | None]] = [
            (key, value) for key, value in present.items() if self._held.get(key) != hashlib.sha256(value).digest()]
        changes += [(key, None) for key in self._held if key not in present]
        if not changes:
            return
        failures: list[KafkaError] = []

        def delivered(error: KafkaError | None, _message: object) -> None:
            if error is not None:
                failures.append(error)

        for key, value in changes:
            producer.produce(self._topic, value, key=key, on_delivery=delivered)
        deadline = time.monotonic() + self._timeout_s + 5
        while producer.flush(0.5) and time.monotonic() < deadline and not self._thread.stopping:
            pass
        if failures or len(producer):
            raise KafkaException(failures[0] if failures else KafkaError(KafkaError._MSG_TIMED_OUT))
        self.published.inc(len(changes))
