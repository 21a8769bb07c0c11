"""Partitions this broker hosts, and the produce/fetch semantics on top of their logs.

Named after Kafka's ReplicaManager: it owns the `Partition` objects, applies metadata changes
published by the controller (create or delete logs), validates and appends produced batches, and
tells waiting fetches (the fetch purgatory) how many bytes arrived.

Nothing here waits for the disk on the event loop: producer snapshots are written, and deleted topics'
files removed, in worker threads.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.fetch_purgatory import Watchers
from bus.broker.fetch_sessions import FetchSessionCache
from bus.broker.log_validator import validate_batches
from bus.broker.producer_state import (
    ProducerStateError,
    ProducerStateManager,
    load_snapshot,
    snapshot_payload,
    write_snapshot_file,
)
from bus.config.topic import effective_topic_configs
from bus.controller.image import MetadataImage, TopicImage
from bus.log.config import LogConfig
from bus.log.errors import RecordBatchTooLargeError
from bus.log.log import AppendResult, Log, ReadResult
from bus.log.manager import LogManager
from bus.log.txn_index import AbortedTxn
from bus.protocol import records as rb
from bus.protocol.control_records import marker_batch, read_marker
from bus.protocol.errors import KafkaApiError
from bus.protocol.topic_partition import TopicPartition

log = logging.getLogger(__name__)


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


class Partition:
    __slots__ = (
        "appending", "config", "index", "leader_epoch", "log", "min_insync_replicas", "producers", "snapshotted",
        "target_codec", "topic", "topic_id", "watchers",
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
    def high_watermark(self) -> int:
        # Single replica: the ISR is the leader alone, so everything appended is committed.
        return self.log.log_end_offset

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


class ReplicaManager:
    def __init__(self, node_id: int, logs: LogManager, broker_static: dict[str, str], *,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 fetch_session_slots: int = 1000) -> None:
        self.node_id = node_id
        self.logs = logs
        self.broker_static = broker_static
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.fetch_sessions = FetchSessionCache(fetch_session_slots)
        self.partitions: dict[TopicPartition, Partition] = {}
        self.partitions_by_id: dict[uuid.UUID, list[Partition]] = {}
        self._background: set[asyncio.Future[None]] = set()
        self._image: MetadataImage | None = None
        self._opening: dict[TopicPartition, asyncio.Future[list[Partition]]] = {}  # new logs being created in a worker
        self.serving = False
        """Set once the broker takes connections: from then on new logs are created off the loop."""

    def effective_configs(self, topic: TopicImage) -> dict[str, str]:
        return effective_topic_configs(topic.configs, self.broker_static)

    def load(self, image: MetadataImage) -> None:
        """Open the logs of every partition this broker leads (start-up, after log recovery)."""
        self._image = image
        for topic in image.topics.values():
            self._sync_topic(topic)

    def apply(self, image: MetadataImage, records: Iterable[dict[str, Any]]) -> None:
        """Metadata publisher: bring hosted partitions in line with the committed records."""
        self._image = image
        touched: set[str] = set()
        for record in records:
            kind = record["type"]
            if kind == "remove_topic":
                self._drop_topic(uuid.UUID(record["topic_id"]))
            elif kind in ("topic", "config"):
                touched.add(record["name"])
            elif kind == "partition":
                topic = image.topics_by_id.get(uuid.UUID(record["topic_id"]))
                if topic is not None:
                    touched.add(topic.name)
        for name in touched:
            topic = image.topics.get(name)
            if topic is not None:
                self._sync_topic(topic)

    def _sync_topic(self, topic: TopicImage) -> None:
        effective = self.effective_configs(topic)
        config = LogConfig.from_properties(effective)
        hosted = self.partitions_by_id.setdefault(topic.topic_id, [])
        missing: list[int] = []
        for index, state in sorted(topic.partitions.items()):
            tp = TopicPartition(topic.name, index)
            partition = self.partitions.get(tp)
            if partition is None:
                if state.leader != self.node_id and self.node_id not in state.replicas:
                    continue
                if tp in self._opening:  # its worker makes the Partition: a second one here would share the log
                    continue
                log_ = self.logs.get(tp)
                if log_ is None:
                    missing.append(index)
                    continue
                partition = Partition(topic, index, log_, config, state.leader_epoch, self.producer_id_expiration_ms)
                self.partitions[tp] = partition
                hosted.append(partition)
            elif partition.config != config:
                partition.config = config
                partition.log.update_config(config)
            if partition.leader_epoch != state.leader_epoch:
                partition.leader_epoch = state.leader_epoch
                partition.watchers.complete_all()  # waiting fetches answer with the new epoch's error at once
            partition.min_insync_replicas = int(effective["min.insync.replicas"])
            partition.target_codec = CODECS.get(effective["compression.type"])
        if missing:
            self._create_logs(topic, config, missing)

    def _create_logs(self, topic: TopicImage, config: LogConfig, indexes: list[int]) -> None:
        """Create new partitions' logs (directories, segment and index files) in a worker thread.

        A topic of a thousand partitions takes seconds of file system calls to create, which on the loop
        stalled every connection (Kafka creates logs on its controller-event thread, not a network thread).
        Meanwhile those partitions answer NOT_LEADER_OR_FOLLOWER, which clients retry, and requests that
        created them await `settled` before answering. Once created, the topic is synced again from the
        image of that moment, so a deletion or config change meanwhile is honoured.
        """
        wanted = [i for i in indexes if TopicPartition(topic.name, i) not in self._opening]
        if not wanted:
            return

        def create() -> list[Partition]:  # the log's files and its (empty) producer state, read from disk
            return [Partition(topic, i, self.logs.get_or_create(topic.name, i, config), config,
                              topic.partitions[i].leader_epoch, self.producer_id_expiration_ms) for i in wanted]

        if not self.serving:  # start-up (internal topics): nobody to keep waiting, and coordinators read them next
            self._register(topic, create())
            return
        future = asyncio.get_running_loop().run_in_executor(None, create)
        for index in wanted:
            self._opening[TopicPartition(topic.name, index)] = future
        future.add_done_callback(lambda done: self._logs_created(topic, wanted, done))

    def _logs_created(self, topic: TopicImage, indexes: list[int], future: asyncio.Future[list[Partition]]) -> None:
        for index in indexes:
            self._opening.pop(TopicPartition(topic.name, index), None)
        current = self._image.topics.get(topic.name) if self._image is not None else None
        if future.cancelled():  # only a bug cancels it now (see `settled`); never leave the partitions unserved
            log.error("creating the logs of %s was cancelled; creating them again", topic.name)
            if current is not None and current.topic_id == topic.topic_id:
                self._sync_topic(current)
            return
        if future.exception() is not None:
            log.error("cannot create the logs of %s", topic.name, exc_info=future.exception())
            return
        if current is not None and current.topic_id == topic.topic_id:
            self._register(current, future.result())
            return
        for index in indexes:  # deleted while its logs were being created
            if TopicPartition(topic.name, index) not in self.partitions:
                remove = self.logs.delete(topic.name, index)
                if remove is not None:
                    self._off_loop(remove)
        if current is not None:  # and created again under a new id: that topic gets logs of its own
            self._sync_topic(current)

    def _register(self, topic: TopicImage, created: list[Partition]) -> None:
        hosted = self.partitions_by_id.setdefault(topic.topic_id, [])
        for partition in created:
            tp = TopicPartition(partition.topic, partition.index)
            if tp not in self.partitions:  # one Partition per log, ever: two would assign the same offsets
                self.partitions[tp] = partition
                hosted.append(partition)
        self._sync_topic(topic)  # epochs and configs as they are now

    async def settled(self) -> None:
        """Wait until the logs being created when called exist (the answer to a request that created them).

        Only those: creations other requests start meanwhile do not hold this answer up (waiting until none
        is pending kept a CreateTopics response waiting for as long as anybody kept creating topics)."""
        pending = set(self._opening.values())
        if pending:
            # Shielded: a waiter that goes away (its client disconnected, its request was cancelled) must not
            # cancel the creation itself, which other requests and the topic's partitions depend on.
            await asyncio.gather(*(asyncio.shield(f) for f in pending), return_exceptions=True)
            await asyncio.sleep(0)  # let the done callbacks register the partitions

    def _drop_topic(self, topic_id: uuid.UUID) -> None:
        """Forget a deleted topic's partitions at once; their files are removed in a worker thread."""
        for partition in self.partitions_by_id.pop(topic_id, []):
            del self.partitions[TopicPartition(partition.topic, partition.index)]
            partition.watchers.complete_all()
            remove = self.logs.delete(partition.topic, partition.index)
            if remove is not None:
                self._off_loop(remove)

    def _off_loop(self, work: Callable[[], None]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # start-up and tests without a loop: nothing to keep free
            work()
            return
        future = loop.run_in_executor(None, work)
        self._background.add(future)
        future.add_done_callback(self._background_done)

    def _background_done(self, future: asyncio.Future[None]) -> None:
        self._background.discard(future)
        if not future.cancelled() and future.exception() is not None:
            log.error("background log work failed", exc_info=future.exception())

    async def drain_background(self) -> None:
        """Wait for file removals still running (shutdown)."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    async def snapshot_producers(self, force: bool = False) -> None:
        """Snapshot every partition's producer state: each is taken on the loop (cheap, in memory) and written
        with its fsync in a worker thread, one partition at a time so the loop keeps serving meanwhile."""
        for partition in list(self.partitions.values()):
            snapshot = partition.producer_snapshot(force)
            if snapshot is None:
                continue
            try:
                await asyncio.to_thread(write_snapshot_file, partition.log.directory, *snapshot)
            except OSError:
                # A partition deleted meanwhile, or a failing disk: the next pass (or the replay) covers it.
                partition.snapshotted = -1
                log.warning("cannot snapshot producer state of %s-%d", partition.topic, partition.index,
                            exc_info=True)

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """producer.id.expiration.ms: forget idle producers without open transactions on every partition."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return sum(p.producers.remove_expired(now, self.producer_id_expiration_ms) for p in self.partitions.values())

    def get(self, topic: str, partition: int) -> Partition:
        tp = TopicPartition(topic, partition)
        found = self.partitions.get(tp)
        if found is None:
            # Created a moment ago (not led here until its log exists), or led by another broker of the cluster.
            known = self._image is not None and partition in getattr(self._image.topics.get(topic), "partitions", ())
            if tp in self._opening or known:
                raise PartitionError(ErrorCode.not_leader_or_follower)
            raise PartitionError(ErrorCode.unknown_topic_or_partition)
        return found
