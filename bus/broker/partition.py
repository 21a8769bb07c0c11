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
from bus.controller.image import PartitionState, TopicImage
from bus.log.config import LogConfig
from bus.log.errors import RecordBatchTooLargeError
from bus.log.log import AppendResult, Log, ReadResult
from bus.log.log_validator import validate_batches
from bus.log.producer_state import (
    NO_PRODUCER_ID,
    ProducerStateError,
    ProducerStateManager,
    delete_snapshots_after,
    load_snapshot,
    snapshot_payload,
)
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
_DATA, _OPEN_TXN, _MARKER = 0, 1, 2  # what a leader append holds, for waiting fetches (see fetch_purgatory)


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
        "leader_epoch", "leader_epoch_start", "leader_id", "local_id", "log", "min_insync_replicas",
        "partition_epoch", "producers", "replicas", "snapshotted", "target_codec", "topic", "topic_id",
        "uncommitted", "watchers",
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
        self.leader_epoch_start = 0  # the log end when this node became leader: a follower joins the ISR past it
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
        payload, batches = self._prepare(payload, from_coordinator)
        return self._append_checked(payload, batches, from_coordinator)

    def prepare(self, payload: bytes, *, from_coordinator: bool = False) -> PreparedAppend:
        """Everything about an append that depends on the payload alone: batch scan, LogValidator's rules
        (which decode the records of compacted topics) and re-encoding to the topic's compression.type.
        It reads no mutable state, so a worker thread can run it for a large batch (`must_prepare_off_loop`)."""
        return PreparedAppend(*self._prepare(payload, from_coordinator))

    def _prepare(self, payload: bytes, from_coordinator: bool) -> tuple[bytes, list[rb.BatchInfo]]:
        try:
            batches = rb.scan_batches(payload, max_batch_bytes=self.config.max_message_bytes)
            if not batches:
                raise rb.CorruptRecordError("produce request carried no record batch")
            validate_batches(payload, batches, self.config, self, from_client=not from_coordinator)
            target = self.target_codec
            if target is not None and any(b.compression != target for b in batches):
                payload = _recompress(payload, batches, target)
                batches = rb.scan_batches(payload, max_batch_bytes=self.config.max_message_bytes)
        except tuple(_RECORD_ERRORS) as exc:
            raise PartitionError(_RECORD_ERRORS[type(exc)], str(exc)) from None
        if len(batches) > 1 and any(b.producer_id >= 0 for b in batches):
            # Kafka refuses every v3+ produce with more than one batch per partition; for producer
            # batches it matters: a leading retry would answer for (and drop) the batches after it.
            raise PartitionError(ErrorCode.invalid_record,
                                 "Produce requests are only allowed to contain exactly one record batch per partition")
        return payload, batches

    def __str__(self) -> str:
        """topic-index, as Kafka names a topic partition in its messages."""
        return f"{self.topic}-{self.index}"

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
        return self._append_checked(prepared.payload, prepared.batches, from_coordinator)

    def _append_checked(self, payload: bytes, batches: list[rb.BatchInfo], from_coordinator: bool) -> AppendResult:
        producers = self.producers
        if not from_coordinator:
            for batch in batches:
                # `check` answers None at once for a batch of no producer that is not transactional: skip the call.
                if batch.producer_id == NO_PRODUCER_ID and not batch.attributes & rb.TRANSACTIONAL_FLAG:
                    continue
                try:
                    duplicate = producers.check(batch)
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
                producers.update(dataclasses.replace(batch, base_offset=offset))
            offset += batch.last_offset_delta + 1
        producers.applied_up_to = result.last_offset + 1  # the log end
        self._leader_appended(len(payload), _OPEN_TXN if producers.ongoing else _DATA)
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
        self._leader_appended(len(payload), _MARKER)
        return result.base_offset

    def read(self, offset: int, max_bytes: int, *, max_offset: int, min_one_batch: bool) -> ReadResult:
        return self.log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)

    # -- leader ---------------------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the high watermark waits for: while an ISR change is with the controller, the larger of the
        two (KIP-497: a shrink counts only once committed, an expansion at once), as Kafka's `maximalIsr`."""
        if self.isr_pending is None:
            return self.isr
        return tuple(sorted({*self.isr, *self.isr_pending}))

    def _alone(self) -> bool:
        """Alone in the (maximal) ISR: every append is committed as it lands. Checked on every append."""
        return len(self.isr) <= 1 and (self.isr_pending is None or len(self.isr_pending) <= 1)

    def _leader_appended(self, size: int, kind: int) -> None:
        """After a leader append: alone in the ISR, the bytes are committed at once (the single-node path, kept
        to one comparison); with followers they are committed when the high watermark passes them."""
        end = self.log.log_end_offset
        if len(self.isr) <= 1 and (self.isr_pending is None or len(self.isr_pending) <= 1):  # `_alone`, inlined
            self.high_watermark = end
            if not self.watchers.waiting:  # nobody to tell
                return
            if kind == _MARKER:
                self.watchers.marker_appended(size)
            else:
                self.watchers.appended(size, kind == _DATA)
            return
        self.uncommitted.append((end, size, kind))
        self.watchers.replicated(size)
        self.maybe_advance_high_watermark()

    def maybe_advance_high_watermark(self) -> bool:
        """Kafka's maybeIncrementLeaderHW: the smallest log end among the leader and the (maximal) ISR."""
        new = self.log.log_end_offset
        for replica in self.maximal_isr:
            if replica != self.local_id:
                follower = self.followers.get(replica)
                new = min(new, follower.log_end_offset if follower is not None else -1)
        if new <= self.high_watermark:
            return False
        self.high_watermark = new
        self._notify_committed(new)
        return True

    def _notify_committed(self, high_watermark: int) -> None:
        """Consumers' waiting fetches learn of the bytes the high watermark passed; acks=all appends it covers
        are answered."""
        count = invisible = markers = 0
        uncommitted = self.uncommitted
        while uncommitted and uncommitted[0][0] <= high_watermark:
            _end, size, kind = uncommitted.popleft()
            count += size
            invisible += size if kind == _OPEN_TXN else 0
            markers += kind == _MARKER
        if count:
            self.watchers.committed(count, invisible, markers)
        waiting = self.acks_waiting
        while waiting and waiting[0][0] <= high_watermark:
            _offset, future = waiting.pop(0)
            if not future.done():
                future.set_result(None)

    def committed(self, next_offset: int) -> asyncio.Future[None] | None:
        """None when the high watermark already covers offsets below `next_offset` (an acks=all append is
        answered at once), else a future set when it does (or failed when this node stops leading)."""
        if self.high_watermark >= next_offset:
            return None
        future = asyncio.get_running_loop().create_future()
        self.acks_waiting.append((next_offset, future))  # appends arrive in offset order
        return future

    def update_follower(self, replica_id: int, fetch_offset: int, now_ms: int) -> bool:
        """A follower fetched from `fetch_offset`: everything below it is on that follower (Kafka's
        updateFollowerFetchState). True when the follower should join the ISR (it has caught up with the
        high watermark and this leader's first offset)."""
        follower = self.followers.get(replica_id)
        if follower is None:
            raise PartitionError(ErrorCode.not_leader_or_follower,
                                 f"Broker {replica_id} is not a replica of {self.topic}-{self.index}")
        end = self.log.log_end_offset
        if fetch_offset >= end:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, now_ms)
        elif fetch_offset >= follower.last_fetch_leader_end:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.log_end_offset = fetch_offset
        follower.last_fetch_ms = now_ms
        follower.last_fetch_leader_end = end
        self.maybe_advance_high_watermark()
        return (replica_id not in self.maximal_isr and fetch_offset >= self.high_watermark
                and fetch_offset >= self.leader_epoch_start)

    def out_of_sync(self, now_ms: int, lag_max_ms: int) -> list[int]:
        """ISR followers that have not caught up within `replica.lag.time.max.ms` (Kafka's getOutOfSyncReplicas)."""
        return [replica for replica in self.isr
                if replica != self.local_id and now_ms - self.followers[replica].last_caught_up_ms > lag_max_ms]

    def apply_state(self, state: PartitionState, local_id: int, now_ms: int) -> str | None:
        """Bring the partition in line with its metadata. Returns "leader" or "follower" when this node's role
        or the leader epoch changed (the caller starts or stops fetching), None otherwise."""
        self.local_id = local_id
        role_changed = state.leader_epoch != self.leader_epoch or state.leader != self.leader_id
        self.replicas = tuple(state.replicas)
        if state.partition_epoch >= self.partition_epoch or role_changed:
            self.isr = tuple(state.isr)
            self.partition_epoch = state.partition_epoch
            self.isr_pending = None
        if not role_changed:
            if self.is_leader:
                self._track_followers(now_ms)
                self.maybe_advance_high_watermark()
            return None
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.watchers.complete_all()  # waiting fetches answer with the new epoch's error (or data) at once
        if self.is_leader:
            self.followers = {}
            self._track_followers(now_ms)
            self.leader_epoch_start = self.log.log_end_offset
            if self.log.latest_epoch < self.leader_epoch:
                self.log.assign_epoch_start(self.leader_epoch)
            self.uncommitted.clear()  # nothing waits on bytes from an earlier term
            if self._alone():
                self.high_watermark = self.log.log_end_offset
            self.maybe_advance_high_watermark()
            return "leader"
        self.followers = {}
        self.uncommitted.clear()
        self.fail_acks(ErrorCode.not_leader_or_follower)
        return "follower"

    def _track_followers(self, now_ms: int) -> None:
        """A follower state per replica; one new to this leader counts as caught up now (Kafka resets them so,
        so a new leader does not shrink its ISR before the followers had a chance to fetch)."""
        for replica in self.replicas:
            if replica != self.local_id and replica not in self.followers:
                self.followers[replica] = FollowerState(last_caught_up_ms=now_ms)
        for gone in [r for r in self.followers if r not in self.replicas]:
            del self.followers[gone]

    def fail_acks(self, code: ErrorCode) -> None:
        """This node stopped leading: acks=all appends waiting for followers fail (the client retries with
        the new leader; an idempotent retry is recognised there if the record made it)."""
        waiting, self.acks_waiting = self.acks_waiting, []
        for _offset, future in waiting:
            if not future.done():
                future.set_exception(PartitionError(code))


    # -- follower -------------------------------------------------------------------------------------------

    def append_as_follower(self, payload: bytes) -> AppendResult | None:
        """Append batches copied from the leader with the offsets and epochs it gave them (Kafka's
        appendRecordsToFollowerOrFutureReplica). Every batch's CRC is checked before anything is written, so a
        damaged payload appends nothing. The producer state folds them as the replay at load does: sequences
        were the leader's to check, and a follower that becomes leader must know them to recognise retries.
        None for an empty payload."""
        batches = self._fetched_batches(payload)
        if not batches:
            return None
        first, end = batches[0], self.log.log_end_offset
        if first.base_offset < end <= first.last_offset and end == self.log.log_start_offset:
            # An empty log started at the leader's log start, which DeleteRecords put inside this batch: start at
            # the batch instead, as Kafka's follower does; the fetch's log start offset moves ours up again.
            self.truncate_fully_and_start_at(first.base_offset)
        result = self.log.append_as_is(payload, batches)
        for batch in batches:
            self._fold(self.producers, payload, batch)
        self.producers.applied_up_to = self.log.log_end_offset
        return result

    @staticmethod
    def _fetched_batches(payload: bytes) -> list[rb.BatchInfo]:
        """The batches of a fetched payload. Our leader sends whole batches only, so bytes that do not scan
        as one (a bad CRC, magic or length, a torn tail) are CORRUPT_MESSAGE. Cleaned batches hold fewer
        records than their offset span, which the prefix scan allows."""
        batches, end = rb.scan_batches_prefix(payload)
        if end != len(payload):
            raise PartitionError(ErrorCode.corrupt_message,
                                 f"fetched records are damaged at byte {end} of {len(payload)}: nothing appended")
        return batches

    def truncate_to(self, offset: int) -> None:
        """Kafka's follower truncation: the log loses everything at and past `offset`; the producer state is
        rebuilt from the newest snapshot at or below the new end, replaying the log past it (which rebuilds the
        aborted-transaction index too), and snapshots past the end are deleted (they describe batches that are
        gone). Producers are not expired here: that stays the periodic job's. The high watermark cannot stay
        past the log end."""
        if offset >= self.log.log_end_offset:
            self.log.truncate_to(offset)  # no batch goes; an epoch started at the end without a batch does
            return
        self.log.truncate_to(offset)
        end = self.log.log_end_offset
        delete_snapshots_after(self.log.directory, end)
        self.producers = self._load_producer_state(_LONG_MAX)
        self.snapshotted = -1  # the next snapshot pass writes one at the new end
        self.high_watermark = min(self.high_watermark, end)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """The leader's log starts past everything we hold (OFFSET_OUT_OF_RANGE below its log start): an empty
        log at `offset`, no producer state and no snapshot, and the high watermark there (Kafka's
        truncateFullyAndStartAt)."""
        self.log.truncate_fully_and_start_at(offset)
        delete_snapshots_after(self.log.directory, -1)
        self.producers = ProducerStateManager()
        self.producers.applied_up_to = offset
        self.snapshotted = -1
        self.high_watermark = offset

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        """The leader's high watermark, as far as this log reaches (Kafka's maybeUpdateHighWatermark on a
        follower). It never moves back here: only truncation lowers it."""
        new = min(leader_high_watermark, self.log.log_end_offset)
        if new > self.high_watermark:
            self.high_watermark = new


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
