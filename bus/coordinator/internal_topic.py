"""A compacted internal topic used as a coordinator's durable state (`__transaction_state`, ...).

Coordinators write their state changes as keyed records and acknowledge a request only after the
append (and, when the partition has followers, once its high watermark covers it: `written`), then
rebuild their state by replaying the topic when they start leading a partition (latest record per key
wins; a null value deletes). This is how Kafka keeps coordinator state, and it means kill -9 of the
leader loses nothing acknowledged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Iterator, Sequence

from kio.schema.errors import ErrorCode

from bus.coordinator.interfaces import PartitionWriter, TopicCreator
from bus.protocol.control_records import read_marker
from bus.protocol.errors import KafkaApiError
from bus.protocol.records import Record, build_batch, iter_records, scan_batches_prefix

log = logging.getLogger(__name__)

READ_CHUNK = 1 << 20


class InternalTopic:
    def __init__(self, writer: PartitionWriter, topics: TopicCreator, name: str, partitions: int,
                 replication_factor: int, configs: dict[str, str], *, write_timeout_ms: int) -> None:
        self.writer = writer
        self.write_timeout_ms = write_timeout_ms
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
        """Append keyed records (value None = tombstone) as one batch; returns the offset after it (what
        `written` waits for).

        With a producer id the batch is transactional (TxnOffsetCommit): it only takes effect when that
        producer's commit marker follows it, and is dropped on abort, in the log as on replay.
        """
        now = int(time.time() * 1000)
        records = [Record(offset=i, timestamp=now, key=k, value=v, headers=()) for i, (k, v) in enumerate(entries)]
        transactional = producer_id >= 0
        payload = build_batch(records, base_offset=0, producer_id=producer_id, producer_epoch=producer_epoch,
                              is_transactional=transactional)
        return self.writer.append(self.name, partition, payload, transactional=transactional) + len(records)

    def written(self, partition: int, next_offset: int) -> Awaitable[None] | None:
        """None when everything below `next_offset` is committed (a single replica: always at once), else an
        awaitable of that; it raises KafkaApiError NOT_LEADER_OR_FOLLOWER when this node stops leading first,
        REQUEST_TIMED_OUT after `write_timeout_ms`."""
        future = self.writer.committed(self.name, partition, next_offset)
        return None if future is None else self._replicated(future, partition)

    async def _replicated(self, future: asyncio.Future[None], partition: int) -> None:
        try:
            async with asyncio.timeout(self.write_timeout_ms / 1000):
                await future
        except TimeoutError:
            raise KafkaApiError(ErrorCode.request_timed_out,
                                f"{self.name}-{partition} not replicated within {self.write_timeout_ms} ms") from None

    def is_local(self, partition: int) -> bool:
        return self.writer.is_local(self.name, partition)

    def replay(self, partition: int, open_transactions: dict[int, list[Entry]] | None = None) -> Iterator[Entry]:
        """Every (offset, key, value) of one partition, to its log end, in the order it took effect.

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
