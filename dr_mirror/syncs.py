"""The offset-syncs topic (`mm2-offset-syncs.<target>.internal`): written before a new run is produced,
read back whole at start-up so translation and resumption stay exact across restarts.

Kept with cleanup.policy=delete and no retention rather than MM2's compaction: compaction would keep
only the newest sync per partition and translation of older group offsets would become approximate,
which is what this mirror exists to avoid. One 24-byte record per gap is cheap.

A record in the topic that is not a well-formed sync (another tool's, or garbage), or a batch the client
cannot decode, is skipped, counted in ``dr_mirror_records_skipped`` and logged: it must not stop the mirror
from starting.

A switchover writes handover syncs (:func:`write_handover`) for the direction that starts copying after it: its target
is the site that was active, whose offsets need not be the other site's, so without them that mirror would resume
each partition at the target's log end taken as a source offset.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Mapping

from bus.client.admin import AdminClient
from bus.client.consumer import KafkaConsumer, TopicPartition
from bus.client.producer import KafkaProducer
from dr_mirror.formats import FormatError, OffsetSync
from dr_mirror.metrics import MirrorMetrics
from dr_mirror.settings import Settings
from dr_mirror.topics import create_internal

log = logging.getLogger(__name__)

TOPIC_CONFIGS = {"cleanup.policy": "delete", "retention.ms": "-1"}
"""The offset-syncs topic's configs: every sync kept (a compacted or expiring topic would lose a run's start)."""


class SyncStore:
    def __init__(self, cluster: Mapping[str, str], topic: str, metrics: MirrorMetrics) -> None:
        """`cluster`: the client settings of the cluster holding the topic (`Settings.source_cluster` or
        `target_cluster`, as `offset-syncs.topic.location` says)."""
        self.cluster = cluster
        self.topic = topic
        self.metrics = metrics
        self._producer = KafkaProducer({**cluster, "acks": "all", "linger.ms": 0,
                                        "client.id": "dr-mirror-offset-syncs", "delivery.timeout.ms": 2**31 - 1})

    def load(self) -> dict[tuple[str, int], list[tuple[int, int]]]:
        """Every sync in the topic, in write order, by (source topic, partition).

        A batch the client cannot decode (its records section does not decompress, a header name is not
        UTF-8) fails the whole poll without saying where, so partitions are read one at a time, a record per
        poll: the batch is then the one at the position, stepped past an offset at a time (the broker answers
        with the whole batch, which fails again until the position is beyond it).
        """
        out: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
        consumer = KafkaConsumer({**self.cluster, "enable.auto.commit": False,
                                  "client.id": "dr-mirror-offset-syncs-reader"})
        try:
            for partition in sorted(consumer.partitions_for_topic(self.topic)):
                tp = TopicPartition(self.topic, partition)
                consumer.assign([tp])
                consumer.seek_to_beginning([tp])
                end = consumer.end_offsets([tp])[tp]
                while (position := consumer.position(tp)) < end:
                    try:
                        records = consumer.poll(1.0, max_records=1)
                    except ValueError as exc:  # CorruptRecordError, or a header name's UnicodeDecodeError
                        self._skip(partition, position, "undecodable batch", exc)
                        consumer.seek(tp, position + 1)
                        continue
                    for record in records:
                        try:
                            sync = OffsetSync.decode(record.key or b"", record.value or b"")
                        except FormatError as exc:
                            self._skip(partition, record.offset, exc.reason, exc)
                            continue
                        out[(sync.topic, sync.partition)].append((sync.upstream_offset, sync.downstream_offset))
        finally:
            consumer.close()
        return dict(out)

    def _skip(self, partition: int, offset: int, reason: str, detail: Exception) -> None:
        self.metrics.skipped.labels(self.topic, reason).inc()
        log.warning("skipping a record that is not an offset sync at %s-%s offset %s: %s", self.topic, partition,
                    offset, detail)

    def write(self, syncs: list[OffsetSync]) -> None:
        """Write and wait for the acknowledgement: the data after a gap must not land before its sync.

        The producer retries on its own (delivery.timeout.ms is unbounded); a source cluster that stays
        away holds the partitions that need a sync, as it holds everything else.
        """
        while True:
            futures = [self._producer.send(self.topic, key=s.key(), value=s.value(), partition=0) for s in syncs]
            try:
                for future in futures:
                    future.get(timeout=60)
                return
            except Exception as exc:  # a timeout or a failed delivery: write them again
                log.warning("offset syncs not acknowledged (%s); retrying", exc)
                time.sleep(1.0)

    def close(self) -> None:
        self._producer.close(timeout=5)


def write_handover(settings: Settings, pairs: Mapping[tuple[str, int], tuple[int, int]]) -> None:
    """One sync per (topic, partition) -> (source offset, target offset) into the offset-syncs topic of ``settings``'
    direction (created where `offset-syncs.topic.location` says when missing, as the mirror does), acknowledged by
    every in-sync replica before this returns.

    A mirror of that direction started afterwards with the target partition's log end at the target offset resumes
    at the source offset (`OffsetMap.resume`): the sync is the newest at that target offset, and replaces any older
    one at or beyond it.
    """
    cluster = settings.source_cluster if settings.offset_syncs_location == "source" else settings.target_cluster
    with AdminClient({**cluster, "client.id": "dr-mirror-handover-admin"}) as admin:
        create_internal(admin, settings.offset_syncs_topic, settings.offset_syncs_replication_factor, TOPIC_CONFIGS)
    store = SyncStore(cluster, settings.offset_syncs_topic, MirrorMetrics())
    try:
        store.write([OffsetSync(topic, partition, source, target)
                     for (topic, partition), (source, target) in sorted(pairs.items())])
    finally:
        store.close()
