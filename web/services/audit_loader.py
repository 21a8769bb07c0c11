"""The audit loader: the ``audit`` topic (and a site's own ``<site>.audit``) into HBase's ``console_audit``, where
the audit page reads it.

A thread of the console process, started and stopped with the app. It consumes the topic in its own group
(``audit-loader``), writes each batch of events in one HBase batch under keys made from the events
themselves, and commits the batch's offsets only after HBase took them: a crash or an HBase outage replays
events, which rewrite their own rows, and loses none. A record that is not an audit event (anyone may write to a
topic) is set aside, counted in ``console_bus_records_skipped_total{reader="audit-loader"}`` and logged; the
loader goes on.

The loader also makes the topic when it is missing, appended only (``cleanup.policy=delete``, kept
``AUDIT_RETENTION_MS``), with the cluster's default replication factor.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client import CollectorRegistry, Counter

from contracts import audit as events
from contracts.tables import console as tables
from web.auth.table import Connect, ConsoleTable
from web.metrics import skipped
from web.services.background import BackgroundThread

log = logging.getLogger(__name__)

GROUP_ID = "audit-loader"
AUDIT_RETENTION_MS = 3 * 365 * 24 * 3600 * 1000
"""Three years, the audit table's time to live."""
BATCH = 500
RETRY_S = 1.0


class AuditLoader:
    def __init__(self, connect: Connect, bus: dict[str, str], topics: list[str], timeout_s: float, ttl_s: int,
                 group_id: str = GROUP_ID) -> None:
        """``bus``: the console's bus client settings (``ConsoleSettings.bus``): the loader runs in its process;
        ``topics``: ``audit`` and, at a site, the audit of its console's standing-by time (`web.site`)."""
        self._table = ConsoleTable(connect, tables.AUDIT_TABLE, ttl_s)
        self._bus = bus
        self._topics = topics
        self._group_id = group_id
        self._timeout_s = timeout_s
        self._thread = BackgroundThread("audit-loader", self._run)
        self.loaded = Counter("console_audit_events_loaded", "Audit events the loader wrote to HBase",
                              registry=None)

    def register_metrics(self, registry: CollectorRegistry) -> None:
        registry.register(self.loaded)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop(self._timeout_s + 10)

    def ensure_topic(self) -> None:
        """Create the audit topics unless they exist (KafkaException when the bus refuses or does not answer). One
        this console may not create is the mirror's to make (``audit`` at a standing-by site): it is left to it."""
        admin = AdminClient({**self._bus, "logger": log})
        for name in self._topics:
            topic = NewTopic(name, 1, -1, config={"cleanup.policy": "delete", "retention.ms": str(AUDIT_RETENTION_MS)})
            try:
                admin.create_topics([topic], request_timeout=self._timeout_s)[name].result(self._timeout_s + 5)
            except KafkaException as exc:
                code = exc.args[0].code()
                if code == KafkaError.TOPIC_AUTHORIZATION_FAILED and name != self._topics[-1]:
                    log.info("audit loader: %s is not this console's to create here; the mirror makes it", name)
                elif code != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise

    def _run(self) -> None:
        while not self._thread.stopping:
            try:
                self.ensure_topic()
                break
            except (KafkaException, TimeoutError) as exc:
                log.warning("audit loader: cannot make topics %s yet: %s", ", ".join(self._topics), exc)
                self._thread.wait(RETRY_S)
        consumer = Consumer({**self._bus, "group.id": self._group_id,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "logger": log})
        consumer.subscribe(self._topics)
        try:
            while not self._thread.stopping:
                batch = consumer.consume(BATCH, 0.2)
                if batch and not self._load(consumer, batch):
                    self._thread.wait(RETRY_S)
        finally:
            consumer.close()

    def _load(self, consumer: Consumer, batch: Sequence[Message]) -> bool:
        """Write one batch and commit it; on an HBase failure rewind to the batch's start and say False."""
        records = [m for m in batch if m.error() is None]
        good: list[events.AuditEvent] = []
        for message in records:
            try:
                good.append(events.decode(message.value()))
            except events.InvalidAuditEvent as exc:
                skipped("audit-loader", message.topic() or self._topics[0], "invalid event", exc,
                        (message.partition(), message.offset()))
        try:
            with self._table.open() as table, table.batch() as rows:
                for event in good:
                    rows.put(tables.audit_row_key(event), tables.audit_row(event))
        except Exception as exc:  # HBase down or refusing (any error of its client): keep the events, try again
            log.warning("audit loader: HBase did not take %d events (%s); trying again", len(good), exc)
            firsts: dict[tuple[str, int], int] = {}
            for message in records:
                firsts.setdefault((message.topic() or "", message.partition() or 0), message.offset() or 0)
            for (topic, partition), offset in firsts.items():
                consumer.seek(TopicPartition(topic, partition, offset))
            return False
        self.loaded.inc(len(good))
        if records:
            last: dict[tuple[str, int], int] = {}
            for message in records:
                last[(message.topic() or "", message.partition() or 0)] = (message.offset() or 0) + 1
            consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in last.items()], asynchronous=False)
        return True
