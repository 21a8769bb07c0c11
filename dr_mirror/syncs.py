"""The offset-syncs topic (`mm2-offset-syncs.<target>.internal`): written before a new run is produced,
read back whole at start-up so translation and resumption stay exact across restarts.

Kept with cleanup.policy=delete and no retention rather than MM2's compaction: compaction would keep
only the newest sync per partition and translation of older group offsets would become approximate,
which is what this mirror exists to avoid. One 24-byte record per gap is cheap.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict

from bus.client.consumer import KafkaConsumer
from bus.client.producer import KafkaProducer
from dr_mirror.formats import FormatError, OffsetSync

log = logging.getLogger(__name__)


class SyncStore:
    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self._producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                                        "client.id": "dr-mirror-offset-syncs", "delivery.timeout.ms": 2**31 - 1})

    def load(self) -> dict[tuple[str, int], list[tuple[int, int]]]:
        """Every sync in the topic, in write order, by (source topic, partition)."""
        out: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
        consumer = KafkaConsumer({"bootstrap.servers": self.bootstrap, "enable.auto.commit": False,
                                  "client.id": "dr-mirror-offset-syncs-reader"})
        try:
            partitions = [(self.topic, p) for p in sorted(consumer.partitions_for_topic(self.topic))]
            consumer.assign(partitions)
            consumer.seek_to_beginning(partitions)
            ends = consumer.end_offsets(partitions)
            while any(consumer.position(tp) < end for tp, end in ends.items()):
                for record in consumer.poll(1.0):
                    try:
                        sync = OffsetSync.decode(record.key or b"", record.value or b"")
                    except FormatError as exc:
                        log.warning("skipping a malformed record at offset %s of %s: %s", record.offset,
                                    self.topic, exc)
                        continue
                    out[(sync.topic, sync.partition)].append((sync.upstream_offset, sync.downstream_offset))
        finally:
            consumer.close()
        return dict(out)

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
