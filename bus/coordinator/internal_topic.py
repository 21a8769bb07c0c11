"""A compacted internal topic used as a coordinator's durable state (`__transaction_state`, ...).

Coordinators write their state changes as keyed records and acknowledge a request only after the
append, then rebuild their state at start-up by replaying the topic (latest record per key wins;
a null value deletes). This is how Kafka keeps coordinator state, and it means kill -9 loses
nothing acknowledged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence

from bus.coordinator.interfaces import PartitionWriter, TopicCreator
from bus.protocol.control_records import read_marker
from bus.protocol.records import Record, build_batch, iter_records, scan_batches_prefix

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 20


class InternalTopic:
    def __init__(self, writer: PartitionWriter, topics: TopicCreator, name: str, partitions: int,
                 replication_factor: int, configs: dict[str, str]) -> None:
        self.writer = writer
        self.topics = topics
        self.name = name
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.configs = {"cleanup.policy": "compact", **configs}

    def ensure(self) -> None:
        """Create the topic on first start (Kafka creates it on first use; we need it to load state).

        An existing topic keeps its partition count, which then decides where keys live.
        """
        topic = self.topics.create_internal_topic(self.name, self.partitions, self.replication_factor,
                                                  self.configs)
        self.partitions = len(topic.partitions)

    def append(self, partition: int, entries: Sequence[tuple[bytes, bytes | None]], *,
               producer_id: int = -1, producer_epoch: int = -1) -> int:
        """Append keyed records (value None = tombstone) as one batch; returns the base offset.

        With a producer id the batch is transactional (TxnOffsetCommit): it only takes effect when that
        producer's commit marker follows it, and is dropped on abort, in the log as on replay.
        """
        now = int(time.time() * 1000)
        records = [Record(offset=i, timestamp=now, key=k, value=v, headers=()) for i, (k, v) in enumerate(entries)]
        transactional = producer_id >= 0
        payload = build_batch(records, base_offset=0, producer_id=producer_id, producer_epoch=producer_epoch,
                              is_transactional=transactional)
        return self.writer.append(self.name, partition, payload, transactional=transactional)

    def is_local(self, partition: int) -> bool:
        return self.writer.is_local(self.name, partition)

    def replay(self, partition: int, open_transactions: dict[int, list[Entry]] | None = None) -> Iterator[Entry]:
        """Every committed (offset, key, value) of one partition in the order it took effect.

        Transactional records are held back until their producer's marker: a commit releases them (at
        the marker's position, as Kafka applies them), an abort drops them. Those of transactions still
        open at the end are left in `open_transactions` (producer id -> records) for the caller to keep
        pending until the transaction coordinator completes them.
        """
        pending: dict[int, list[Entry]] = {} if open_transactions is None else open_transactions
        offset, end = self.writer.bounds(self.name, partition)
        while offset < end:
            data = self.writer.read(self.name, partition, offset, READ_CHUNK, end)
            batches, _valid = scan_batches_prefix(data)
            if not batches:
                break
            for batch in batches:
                if batch.is_control:
                    held = pending.pop(batch.producer_id, [])
                    marker = read_marker(data, batch) if held else None
                    if marker is not None and marker.commit:
                        yield from held
                    continue
                records = [(r.offset, r.key, r.value) for r in iter_records(data, batch) if r.offset >= offset]
                if batch.is_transactional:
                    pending.setdefault(batch.producer_id, []).extend(records)
                else:
                    yield from records
            offset = batches[-1].next_offset


Entry = tuple[int, bytes | None, bytes | None]
