"""One hosted partition: its log, producer state and the produce/fetch semantics on top of them.

Named after Kafka's Partition: it validates and appends produced batches (leader), keeps the producer
state that idempotence and transactions need, and tells waiting fetches (the fetch purgatory) how many
bytes arrived. The ReplicaManager owns the Partition objects and brings them in line with the metadata.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time

from kio.schema.errors import ErrorCode

from bus.broker.fetch_purgatory import Watchers
from bus.broker.log_validator import validate_batches
from bus.broker.producer_state import (
    ProducerStateError,
    ProducerStateManager,
    load_snapshot,
    snapshot_payload,
)
from bus.controller.image import TopicImage
from bus.log.config import LogConfig
from bus.log.errors import RecordBatchTooLargeError
from bus.log.log import AppendResult, Log, ReadResult
from bus.log.txn_index import AbortedTxn
from bus.protocol import records as rb
from bus.protocol.control_records import marker_batch, read_marker
from bus.protocol.errors import KafkaApiError


class PartitionError(KafkaApiError):
    """A per-partition failure carried to the response as an error code and message."""


_RECORD_ERRORS: dict[type[Exception], ErrorCode] = {
    rb.RecordTooLargeError: ErrorCode.message_too_large,
    rb.CorruptRecordError: ErrorCode.corrupt_message,
    rb.UnsupportedMagicError: ErrorCode.unsupported_for_message_format,
    rb.UnsupportedCompressionError: ErrorCode.unsupported_compression_type,
}


REPLAY_CHUNK = 1 << 20
OFF_LOOP_PREPARE_BYTES = 64 << 10  # a payload past this whose records must be decoded is prepared off the loop
_LONG_MAX = 2**63 - 1
NO_PARTITION_LEADER_EPOCH = -1  # Kafka's RecordBatch.NO_PARTITION_LEADER_EPOCH: a requester that knows no epoch


@dataclasses.dataclass(frozen=True, slots=True)
class PreparedAppend:
    """A payload checked (and perhaps re-encoded) by `Partition.prepare`, with its batches."""

    payload: bytes
    batches: list[rb.BatchInfo]

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000


@dataclasses.dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's Replica state): from its fetches."""

    log_end_offset: int = -1  # unknown until it fetches
    last_caught_up_ms: int = 0  # last time it had everything the leader had (replica.lag.time.max.ms counts from it)
    last_fetch_ms: int = 0
    last_fetch_leader_end: int = -1  # the leader's log end when it last fetched


class Partition:
    __slots__ = (
        "acks_waiting", "appending", "config", "followers", "high_watermark", "index", "isr", "isr_pending",
        "leader_epoch", "leader_id", "local_id", "log", "min_insync_replicas", "partition_epoch", "producers",
        "replicas", "snapshotted", "target_codec", "topic", "topic_id", "uncommitted", "watchers",
    )

    def __init__(self, topic: TopicImage, index: int, log_: Log, config: LogConfig, leader_epoch: int,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> None:
        self.topic = topic.name
        self.topic_id = topic.topic_id
        self.index = index
        self.log = log_
        self.config = config
        self.leader_epoch = leader_epoch
        self.min_insync_replicas = 1
        self.target_codec: int | None = None  # topic compression.type; None keeps the producer's codec
        self.appending: asyncio.Task[AppendResult] | None = None  # the last append queued by `append_in_order`
        self.watchers = Watchers()
        self.producers = self._load_producer_state(producer_id_expiration_ms)
        self.snapshotted = self.producers.applied_up_to
        # Replication: the partition's assignment as the metadata has it, and the leader's view of its followers.
        self.local_id = -1
        self.leader_id = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.partition_epoch = -1
        self.isr_pending: tuple[int, ...] | None = None  # an ISR change sent to the controller, not yet answered
        self.followers: dict[int, FollowerState] = {}
        # Committed through here (Kafka's high watermark): what consumers may read and acks=all waits for.
        # The ReplicaManager sets it from the replication-offset-checkpoint; alone in its ISR it is the log end.
        self.high_watermark = self.log.log_end_offset
        self.acks_waiting: list[tuple[int, asyncio.Future[None]]] = []  # acks=all appends: (offset needed, future)
        self.uncommitted: collections.deque[tuple[int, int, int]] = collections.deque()  # see `_notify_committed`

    # -- producer state ------------------------------------------------------------------------------

    def _load_producer_state(self, expiration_ms: int) -> ProducerStateManager:
        """The last snapshot (less expired producers), brought up to the log end by replaying batch headers
        and control records. The replay also rebuilds the transaction index past the snapshot, dropping
        entries a crash left beyond the log's (possibly cut) end."""
        now = int(time.time() * 1000)
        state = load_snapshot(self.log.directory, self.log.log_end_offset, now, expiration_ms) or ProducerStateManager()
        offset = max(state.applied_up_to, self.log.log_start_offset)
        self.log.truncate_aborted_txns(offset)
        end = self.log.log_end_offset
        while offset < end:
            data = bytes(self.log.read(offset, REPLAY_CHUNK, min_one_batch=True).data)
            batches, _valid = rb.scan_batches_prefix(data)
            if not batches:
                break
            for batch in batches:
                if batch.next_offset > offset:
                    self._fold(state, data, batch)
            offset = batches[-1].next_offset
        state.applied_up_to = end
        state.remove_expired(now, expiration_ms)
        return state

    def _fold(self, state: ProducerStateManager, data: bytes, batch: rb.BatchInfo) -> None:
        if not batch.is_control:
            state.update(batch)
            return
        marker = read_marker(data, batch)
        if marker is not None:  # other control records (leader change, snapshots) close no transaction
            aborted = state.complete_txn(batch.producer_id, batch.producer_epoch, batch.base_offset,
                                         not marker.commit, marker.coordinator_epoch, batch.max_timestamp)
            if aborted is not None:
                self.log.add_aborted_txn(aborted)

    def producer_snapshot(self, force: bool = False) -> tuple[int, bytes] | None:
        """(offset, bytes) of a producer-state snapshot if one is due (Kafka's .snapshot files), taken on the
        event loop where the state changes; write_snapshot_file writes it elsewhere."""
        state = self.producers
        if not state.producers or not (force or state.applied_up_to != self.snapshotted):
            return None
        self.snapshotted = state.applied_up_to
        return state.applied_up_to, snapshot_payload(state)

    @property
    def last_stable_offset(self) -> int:
        unstable = self.producers.first_unstable_offset()
        high_watermark = self.high_watermark
        return high_watermark if unstable is None else min(unstable, high_watermark)

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """A request's `current_leader_epoch` against ours (Kafka's Partition.checkCurrentLeaderEpoch): -1 means
        the client does not know it; an older one is fenced, a newer one means our metadata lags."""
        if current_leader_epoch == NO_PARTITION_LEADER_EPOCH or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise PartitionError(ErrorCode.fenced_leader_epoch)
        raise PartitionError(ErrorCode.unknown_leader_epoch)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch on the leader. Kafka records the leader's own epoch at
        the log end when it becomes leader; here that happens on the first append or on this first question,
        so creating thousands of partitions does not write thousands of checkpoints on the event loop."""
        if self.log.latest_epoch < self.leader_epoch:
            self.log.assign_epoch_start(self.leader_epoch)
        return self.log.end_offset_for_epoch(epoch)

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        return self.log.collect_aborted_txns(start, end)

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def append(self, payload: bytes, *, from_coordinator: bool = False) -> AppendResult:
        """Validate and append a produce payload; a retried idempotent batch returns its original offsets.

        `from_coordinator`: a coordinator's own transactional write (TxnOffsetCommit records carry the
        producer's id and epoch but no sequence), which Kafka appends without sequence checks.
        """
        return self.append_prepared(self.prepare(payload, from_coordinator=from_coordinator),
                                    from_coordinator=from_coordinator)

    def prepare(self, payload: bytes, *, from_coordinator: bool = False) -> PreparedAppend:
        """Everything about an append that depends on the payload alone: batch scan, LogValidator's rules
        (which decode the records of compacted topics) and re-encoding to the topic's compression.type.
        It reads no mutable state, so a worker thread can run it for a large batch (`must_prepare_off_loop`)."""
        try:
            batches = rb.scan_batches(payload, max_batch_bytes=self.config.max_message_bytes)
            if not batches:
                raise rb.CorruptRecordError("produce request carried no record batch")
            validate_batches(payload, batches, self.config, f"{self.topic}-{self.index}",
                             from_client=not from_coordinator)
            if self.target_codec is not None and any(b.compression != self.target_codec for b in batches):
                payload = _recompress(payload, batches, self.target_codec)
                batches = rb.scan_batches(payload, max_batch_bytes=self.config.max_message_bytes)
        except tuple(_RECORD_ERRORS) as exc:
            raise PartitionError(_RECORD_ERRORS[type(exc)], str(exc)) from None
        if len(batches) > 1 and any(b.producer_id >= 0 for b in batches):
            # Kafka refuses every v3+ produce with more than one batch per partition; for producer
            # batches it matters: a leading retry would answer for (and drop) the batches after it.
            raise PartitionError(ErrorCode.invalid_record,
                                 "Produce requests are only allowed to contain exactly one record batch per partition")
        return PreparedAppend(payload, batches)

    def must_prepare_off_loop(self, payload: bytes) -> bool:
        """A large payload whose records `prepare` would decode (compacted topic, a finite timestamp window, a
        compression.type to re-encode to): inflating it could keep every other connection waiting."""
        config = self.config
        return len(payload) > OFF_LOOP_PREPARE_BYTES and (
            config.compact or self.target_codec is not None
            or config.message_timestamp_before_max_ms < _LONG_MAX or config.message_timestamp_after_max_ms < _LONG_MAX)

    def append_in_order(self, payload: bytes, *, off_loop: bool) -> asyncio.Task[AppendResult]:
        """Append once every append to this partition that went this way before it is done, preparing in a
        worker thread if `off_loop`: appends stay in the order their requests arrived. While one is pending the
        produce handler sends every later append of the partition here too (`appending` is set). The append is
        a task of its own, started now, so the line holds even if the request that asked for it goes away."""
        task = asyncio.ensure_future(self._append_after(self.appending, payload, off_loop))
        self.appending = task
        task.add_done_callback(self._appended)
        return task

    def _appended(self, task: asyncio.Task[AppendResult]) -> None:
        if self.appending is task:
            self.appending = None

    async def _append_after(self, previous: asyncio.Task[AppendResult] | None, payload: bytes,
                            off_loop: bool) -> AppendResult:
        prepared = await asyncio.to_thread(self.prepare, payload) if off_loop else None
        if previous is not None:
            await asyncio.wait([previous])  # its outcome belongs to its own request; only its place in line counts
        return self.append_prepared(prepared if prepared is not None else self.prepare(payload))

    def append_prepared(self, prepared: PreparedAppend, *, from_coordinator: bool = False) -> AppendResult:
        """The part of an append that reads and changes the partition: producer state, then the log."""
        payload, batches = prepared.payload, prepared.batches
        for batch in [] if from_coordinator else batches:
            try:
                duplicate = self.producers.check(batch)
            except ProducerStateError as exc:
                raise PartitionError(exc.code, exc.message) from None
            if duplicate is not None:
                return AppendResult(duplicate.first_offset, duplicate.last_offset, -1, self.log.log_start_offset)
        try:
            result = self.log.append(bytearray(payload), batches, partition_leader_epoch=self.leader_epoch)
        except RecordBatchTooLargeError as exc:
            raise PartitionError(ErrorCode.record_list_too_large, str(exc)) from None
        offset = result.base_offset
        for batch in batches:
            if batch.producer_id >= 0:
                self.producers.update(dataclasses.replace(batch, base_offset=offset))
            offset += batch.last_offset_delta + 1
        self.producers.applied_up_to = self.log.log_end_offset
        self.watchers.appended(len(payload), self.producers.first_unstable_offset() is None)
        return result

    def append_marker(self, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int = 0) -> int:
        """Write a transaction's commit/abort control record (WriteTxnMarkers in Kafka); returns its offset."""
        timestamp = int(time.time() * 1000)
        payload = bytearray(marker_batch(producer_id, epoch, commit, coordinator_epoch, timestamp))
        result = self.log.append(payload, rb.scan_batches(payload), partition_leader_epoch=self.leader_epoch)
        aborted = self.producers.complete_txn(producer_id, epoch, result.base_offset, not commit, coordinator_epoch,
                                              timestamp)
        if aborted is not None:
            self.log.add_aborted_txn(aborted)
        self.watchers.marker_appended(len(payload))
        return result.base_offset

    def read(self, offset: int, max_bytes: int, *, max_offset: int, min_one_batch: bool) -> ReadResult:
        return self.log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)


CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _recompress(payload: bytes, batches: list[rb.BatchInfo], codec: int) -> bytes:
    """Re-encode batches with the topic's compression.type, keeping producer fields and timestamps (as Kafka)."""
    out = bytearray()
    for batch in batches:
        if batch.compression == codec:
            out += payload[batch.position : batch.position + batch.size]
            continue
        out += rb.build_batch(
            list(rb.iter_records(payload, batch)),
            base_offset=batch.base_offset,
            compression=codec,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            is_transactional=batch.is_transactional,
            timestamp_type=batch.timestamp_type,
            partition_leader_epoch=batch.partition_leader_epoch,
            last_offset_delta=batch.last_offset_delta,
            max_timestamp=batch.max_timestamp,
        )
    return bytes(out)
