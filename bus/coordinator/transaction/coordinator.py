"""The transaction coordinator: InitProducerId, AddPartitions/OffsetsToTxn, EndTxn, timeouts.

State changes are appended to `__transaction_state` before they are acknowledged; when its partition has
followers, the answer waits until the high watermark covers the change (Kafka appends with acks=-1), and a
change that never gets there is undone in memory. While one is in flight, other requests for the same id
get CONCURRENT_TRANSACTIONS (Kafka's pendingState). EndTxn is the two-phase commit Kafka runs: persist
PrepareCommit/PrepareAbort, write a commit/abort control marker into every partition of the transaction,
persist CompleteCommit/CompleteAbort. The coordinator serves the ids of the partitions this node leads,
loading a partition when it becomes its leader and dropping it when it stops (`loads`). A transaction
found in a Prepare state on load is completed, and an Ongoing one past its timeout is aborted with a bumped
epoch, so an abandoned or crashed producer never leaves records hanging.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

from kio.schema.errors import ErrorCode

from bus.coordinator.interfaces import MarkerSender, MetadataView, PartitionWriter, ProducerIdSource, TopicCreator
from bus.coordinator.internal_topic import InternalTopic
from bus.coordinator.partition_loads import PartitionLoads
from bus.coordinator.partitioning import partition_for
from bus.coordinator.transaction import records
from bus.coordinator.transaction.state import TxnMetadata, TxnState
from bus.protocol.errors import KafkaApiError

log = logging.getLogger(__name__)

TOPIC = "__transaction_state"
MAX_EPOCH = 2**15 - 2  # Kafka bumps to a new producer id before the epoch would overflow
LOAD_CHUNK = 2000  # records replayed between two turns of the loop while a partition loads
T = TypeVar("T")
Answer: TypeAlias = "T | Awaitable[T]"
"""A request's result now (a single replica), or an awaitable of it once the write is replicated."""

# Kafka's TransactionStateManager: what a failed `__transaction_state` append answers (clients retry on
# COORDINATOR_NOT_AVAILABLE, and look the coordinator up again on NOT_COORDINATOR).
_APPEND_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
}


class TxnError(KafkaApiError):
    """A transactional request the coordinator refuses (fenced, concurrent, invalid state)."""


def _now() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class TxnConfig:
    num_partitions: int = 50
    replication_factor: int = 3
    request_timeout_ms: int = 30000
    max_timeout_ms: int = 900000
    abort_check_interval_ms: int = 10000
    id_expiration_ms: int = 604800000
    id_expiration_check_interval_ms: int = 3600000

    @classmethod
    def from_broker(cls, config: Any) -> TxnConfig:
        return cls(
            num_partitions=int(config["transaction.state.log.num.partitions"]),
            replication_factor=int(config["transaction.state.log.replication.factor"]),
            request_timeout_ms=int(config["request.timeout.ms"]),
            max_timeout_ms=int(config["transaction.max.timeout.ms"]),
            abort_check_interval_ms=int(config["transaction.abort.timed.out.transaction.cleanup.interval.ms"]),
            id_expiration_ms=int(config["transactional.id.expiration.ms"]),
            id_expiration_check_interval_ms=int(config["transaction.remove.expired.transaction.cleanup.interval.ms"]),
        )


class TransactionCoordinator:
    def __init__(self, config: TxnConfig, writer: PartitionWriter, topics: TopicCreator, metadata: MetadataView,
                 producer_ids: ProducerIdSource, markers: MarkerSender | None = None) -> None:
        """`markers`: sends markers for the partitions other nodes lead (a node of a cluster); None: every partition
        is led here."""
        self.writer = writer
        self.metadata = metadata
        self.producer_ids = producer_ids
        self.topic = InternalTopic(writer, topics, TOPIC, config.num_partitions, config.replication_factor,
                                   {"min.insync.replicas": "1", "segment.bytes": str(100 * 1024 * 1024)},
                                   write_timeout_ms=config.request_timeout_ms)
        self.config = config
        self.max_timeout_ms = config.max_timeout_ms
        self.txns: dict[str, TxnMetadata] = {}
        # Called with (producer id, commit) once a transaction's markers are written: the group
        # coordinator makes that producer's transactional offsets visible or drops them.
        self.completion_listeners: list[Callable[[int, bool], None]] = []
        self.loads = PartitionLoads(TOPIC, self._load_partition, self._unload_partition)
        self._writing: set[str] = set()  # ids whose state change waits for its followers
        self._background: dict[str, asyncio.Task[None]] = {}  # completions and aborts still running, by id
        self._tasks: list[asyncio.Task[None]] = []
        self.markers = markers

    # -- life cycle ----------------------------------------------------------------------------

    def load(self) -> None:
        """Create the topic if needed and load every partition led here now; from then on partitions load and
        unload as leadership moves (`loads.on_leadership`)."""
        self.topic.ensure()
        self.loads.load_now(p for p in range(self.topic.partitions) if self.topic.is_local(p))
        log.info("loaded %d transactional ids from %s", len(self.txns), TOPIC)

    def _partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.topic.partitions)

    def coordinator_error(self, transactional_id: str) -> ErrorCode | None:
        """None when this node coordinates the id (its partition is led and loaded here)."""
        return self.loads.error(self._partition_of(transactional_id))

    def _load_partition(self, partition: int) -> Iterator[None]:
        """Replay one partition (latest record per id wins), install it, and complete what was being completed."""
        found: dict[str, TxnMetadata | None] = {}
        for count, (_offset, key, value) in enumerate(self.topic.replay(partition), 1):
            if key is not None:
                txn_id = records.decode_key(key)
                found[txn_id] = None if value is None else records.decode_value(txn_id, value)
            if count % LOAD_CHUNK == 0:
                yield
        self._unload_partition(partition)  # a reload starts from the log alone
        loaded = [md for md in found.values() if md is not None]
        for md in loaded:
            self.txns[md.transactional_id] = md
        for md in loaded:
            if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self._complete(md, commit=md.state is TxnState.PREPARE_COMMIT)
        if found:
            log.info("loaded %d transactional ids from %s-%d", len(loaded), TOPIC, partition)

    def _unload_partition(self, partition: int) -> None:
        """Another node coordinates these ids now: forget them, and stop completing their transactions (the new
        coordinator completes them from the Prepare state it loads)."""
        for txn_id in [t for t in self.txns if self._partition_of(t) == partition]:
            del self.txns[txn_id]
            task = self._background.pop(txn_id, None)
            if task is not None:
                task.cancel()

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._every(self.config.abort_check_interval_ms, self.abort_expired)),
            asyncio.create_task(self._every(self.config.id_expiration_check_interval_ms,
                                            self.expire_transactional_ids)),
        ]

    def stop(self) -> None:
        self.loads.close()
        for task in [*self._tasks, *self._background.values()]:
            task.cancel()

    @staticmethod
    async def _every(interval_ms: int, work: Callable[[int], list[str]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                work(_now())
            except Exception:
                log.exception("transaction coordinator task %s failed", work.__name__)

    def abort_expired(self, now_ms: int) -> list[str]:
        """Abort Ongoing transactions past their timeout, fencing the producer with a bumped epoch."""
        aborted = []
        for md in list(self.txns.values()):
            if (md.state is TxnState.ONGOING and md.start_ms + md.timeout_ms < now_ms
                    and md.transactional_id not in self._writing):
                log.info("aborting transaction %s (producer %d) after its %d ms timeout",
                         md.transactional_id, md.producer_id, md.timeout_ms)
                try:
                    self._fence_and_abort(md)
                except TxnError as exc:  # left Ongoing as it was: the next pass tries again
                    log.warning("could not abort transaction %s: %s", md.transactional_id, exc.code.name)
                    continue
                aborted.append(md.transactional_id)
        return aborted

    def expire_transactional_ids(self, now_ms: int) -> list[str]:
        """Forget ids idle for `transactional.id.expiration.ms` with no transaction in progress (Kafka's
        removeExpiredTransactionalIds): a tombstone in `__transaction_state`, then out of memory, so
        neither this broker nor a reload remembers them; their next InitProducerId starts afresh."""
        expired = []
        for md in list(self.txns.values()):
            if (md.completed and md.last_update_ms <= now_ms - self.config.id_expiration_ms
                    and md.transactional_id not in self._writing):
                try:
                    self.topic.append(self._partition_of(md.transactional_id),
                                      [(records.encode_key(md.transactional_id), None)])
                except KafkaApiError as exc:
                    log.warning("could not expire transactional id %s: %s", md.transactional_id, exc.code.name)
                    continue
                del self.txns[md.transactional_id]
                expired.append(md.transactional_id)
        if expired:
            log.info("removed %d expired transactional ids", len(expired))
        return expired

    # -- persistence -------------------------------------------------------------------------------

    def _persist(self, md: TxnMetadata) -> int:
        """Append the id's state and keep it; returns the offset after it (for `topic.written`)."""
        md.last_update_ms = _now()
        end = self.topic.append(self._partition_of(md.transactional_id),
                                [(records.encode_key(md.transactional_id), records.encode_value(md))])
        self.txns[md.transactional_id] = md
        return end

    def _transition(self, md: TxnMetadata, before: TxnMetadata | None, then: Callable[[], T]) -> Answer[T]:
        """Persist `md` as changed in place from `before` (None: a new id), answering `then()` once the change
        is committed. A change that fails is undone in memory and answered with Kafka's error for it."""
        try:
            pending = self.topic.written(self._partition_of(md.transactional_id), self._persist(md))
        except KafkaApiError as exc:
            self._undo(md, before)
            raise TxnError(_APPEND_ERRORS.get(exc.code, exc.code), exc.message) from None
        if pending is None:
            return then()
        self._writing.add(md.transactional_id)
        return self._replicated(md, before, pending, then)

    async def _replicated(self, md: TxnMetadata, before: TxnMetadata | None, pending: Awaitable[None],
                          then: Callable[[], T]) -> T:
        try:
            await pending
        except KafkaApiError as exc:
            self._undo(md, before)
            raise TxnError(_APPEND_ERRORS.get(exc.code, exc.code), exc.message) from None
        finally:
            self._writing.discard(md.transactional_id)
        if self.txns.get(md.transactional_id) is not md:  # its partition moved away meanwhile
            raise TxnError(ErrorCode.not_coordinator)
        return then()

    def _undo(self, md: TxnMetadata, before: TxnMetadata | None) -> None:
        if self.txns.get(md.transactional_id) is not md:
            return  # unloaded meanwhile: nothing here to undo
        if before is None:
            del self.txns[md.transactional_id]
            return
        for field in dataclasses.fields(TxnMetadata):
            setattr(md, field.name, getattr(before, field.name))

    @staticmethod
    def _snapshot(md: TxnMetadata) -> TxnMetadata:
        return dataclasses.replace(md, partitions=set(md.partitions))

    def _write_markers(self, md: TxnMetadata, commit: bool) -> list[Awaitable[None]]:
        """Write the markers of the partitions led here, and send the others to their leaders; returns what is
        still to be written or replicated."""
        waiting: list[Awaitable[None]] = []
        for topic, index in sorted(md.partitions):
            try:
                offset = self.writer.write_marker(topic, index, md.producer_id, md.producer_epoch, commit)
                future = self.writer.committed(topic, index, offset + 1)
            except KafkaApiError:
                if self.markers is not None:
                    waiting.append(self.markers.write(topic, index, md.producer_id, md.producer_epoch, commit))
                else:
                    log.warning("transaction %s: partition %s-%d is gone; no marker written",
                                md.transactional_id, topic, index)
                continue
            if future is not None:
                waiting.append(self._replicated_marker(future, md, topic, index, commit))
        return waiting

    async def _replicated_marker(self, future: asyncio.Future[None], md: TxnMetadata, topic: str, index: int,
                                 commit: bool) -> None:
        """A marker written here, once replicated; if this node lost the partition first, written again by its
        new leader (the marker may not have reached it)."""
        try:
            await future
        except KafkaApiError:
            if self.markers is None:
                raise
            await self.markers.write(topic, index, md.producer_id, md.producer_epoch, commit)

    def _complete(self, md: TxnMetadata, commit: bool) -> None:
        """Write the markers and then the Complete state; once the markers are replicated when they must be."""
        waiting = self._write_markers(md, commit)
        if not waiting:
            self._completed(md, commit)
            return
        self._in_background(md.transactional_id, self._complete_replicated(md, commit, waiting))

    def _in_background(self, transactional_id: str, work: Awaitable[None]) -> None:
        """Run a write nobody waits for (its request was answered, or never asked), cancelled if the id's
        partition moves away."""
        task = asyncio.ensure_future(work)
        self._background[transactional_id] = task

        def done(finished: asyncio.Future[None]) -> None:
            if self._background.get(transactional_id) is finished:
                del self._background[transactional_id]
            if not finished.cancelled() and finished.exception() is not None:
                log.warning("transaction %s: a background write failed: %s", transactional_id, finished.exception())

        task.add_done_callback(done)

    async def _complete_replicated(self, md: TxnMetadata, commit: bool, waiting: list[Awaitable[None]]) -> None:
        results = await asyncio.gather(*waiting, return_exceptions=True)
        for failure in (r for r in results if isinstance(r, BaseException)):
            log.warning("transaction %s: a marker was not replicated (%s)", md.transactional_id, failure)
        if self.txns.get(md.transactional_id) is md:
            self._completed(md, commit)

    def _completed(self, md: TxnMetadata, commit: bool) -> None:
        for listener in self.completion_listeners:
            listener(md.producer_id, commit)
        md.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        md.partitions = set()
        md.start_ms = -1
        try:
            self._persist(md)  # if lost, the next coordinator finds Prepare and completes it again
        except KafkaApiError as exc:
            log.warning("transaction %s: its Complete state was not written: %s", md.transactional_id, exc.code.name)

    def _end(self, md: TxnMetadata, commit: bool, before: TxnMetadata | None = None) -> Answer[None]:
        """Persist the decision (Prepare); once it is committed, complete the transaction. `before`: the state to
        restore should the write fail, if `md` was changed already."""
        before = before or self._snapshot(md)
        md.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        return self._transition(md, before, lambda: self._complete(md, commit))

    def _fence_and_abort(self, md: TxnMetadata) -> None:
        """Abort with a bumped epoch the producer never received (Kafka's prepareFenceProducerEpoch).

        The previous epoch is not remembered as `last_producer_epoch`: that slot is for an
        InitProducerId retry, and it would let the fenced (timed-out or replaced) producer re-init
        with its old epoch and carry on as if nothing happened. Nobody waits for the answer: a write that
        must be replicated finishes in the background.
        """
        before = self._snapshot(md)
        md.last_producer_epoch = -1
        md.producer_epoch += 1
        result = self._end(md, commit=False, before=before)
        if inspect.isawaitable(result):
            self._in_background(md.transactional_id, result)

    # -- request handling --------------------------------------------------------------------------

    def _check_coordinator(self, transactional_id: str) -> None:
        error = self.coordinator_error(transactional_id)
        if error is not None:
            raise TxnError(error)
        if transactional_id in self._writing:
            raise TxnError(ErrorCode.concurrent_transactions)

    def _validate(self, transactional_id: str, producer_id: int, epoch: int, fenced: ErrorCode) -> TxnMetadata:
        self._check_coordinator(transactional_id)
        md = self.txns.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            raise TxnError(ErrorCode.invalid_producer_id_mapping,
                           "The producer attempted to use a producer id which is not currently assigned "
                           "to its transactional id.")
        if md.producer_epoch != epoch:
            raise TxnError(fenced, "There is a newer producer with the same transactionalId which fences the "
                                   "current one.")
        if md.in_prepare:
            raise TxnError(ErrorCode.concurrent_transactions)
        return md

    def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int = -1,
                         epoch: int = -1) -> Answer[tuple[int, int]]:
        if not transactional_id:
            raise TxnError(ErrorCode.invalid_request, "empty transactional id")
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            raise TxnError(ErrorCode.invalid_transaction_timeout,
                           f"transaction timeout {timeout_ms} is outside (0, {self.max_timeout_ms}]")
        self._check_coordinator(transactional_id)
        md = self.txns.get(transactional_id)
        if md is None:
            md = TxnMetadata(transactional_id, self.producer_ids.next_id(), 0, timeout_ms)
            return self._transition(md, None, lambda: (md.producer_id, md.producer_epoch))
        if producer_id >= 0 and not (
            producer_id == md.producer_id and epoch in (md.producer_epoch, md.last_producer_epoch)
        ):
            raise TxnError(ErrorCode.producer_fenced, "producer id/epoch do not match the transactional id")
        if md.in_prepare:
            raise TxnError(ErrorCode.concurrent_transactions)
        if md.state is TxnState.ONGOING:
            self._fence_and_abort(md)
            raise TxnError(ErrorCode.concurrent_transactions)
        if producer_id >= 0 and 0 <= md.last_producer_epoch == epoch != md.producer_epoch:
            # A retry of a bump whose response was lost: answer the epoch it already got (as Kafka).
            return md.producer_id, md.producer_epoch
        before = self._snapshot(md)
        md.last_producer_epoch = md.producer_epoch
        if md.producer_epoch >= MAX_EPOCH:
            md.producer_id = self.producer_ids.next_id()
            md.producer_epoch = 0
        else:
            md.producer_epoch += 1
        md.timeout_ms = timeout_ms
        md.state = TxnState.EMPTY
        md.partitions = set()
        return self._transition(md, before, lambda: (md.producer_id, md.producer_epoch))

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int, partitions: Iterable[tuple[str, int]],
                       fenced: ErrorCode) -> Answer[dict[tuple[str, int], ErrorCode]]:
        """AddPartitionsToTxn: per-partition result; unknown partitions fail the whole request's rest."""
        wanted = list(partitions)
        try:
            md = self._validate(transactional_id, producer_id, epoch, fenced)
        except TxnError as exc:
            return dict.fromkeys(wanted, exc.code)
        unknown = {tp for tp in wanted if not self._exists(*tp)}
        if unknown:
            return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                    for tp in wanted}
        done = dict.fromkeys(wanted, ErrorCode.none)
        if set(wanted) <= md.partitions and md.state is TxnState.ONGOING:
            return done
        before = self._snapshot(md)
        if md.state is not TxnState.ONGOING:
            md.start_ms = _now()
        md.state = TxnState.ONGOING
        md.partitions |= set(wanted)
        try:
            result = self._transition(md, before, lambda: done)
        except TxnError as exc:
            return dict.fromkeys(wanted, exc.code)
        return self._per_partition(result, wanted) if inspect.isawaitable(result) else result

    @staticmethod
    async def _per_partition(result: Awaitable[dict[tuple[str, int], ErrorCode]],
                             wanted: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        try:
            return await result
        except TxnError as exc:
            return dict.fromkeys(wanted, exc.code)

    def _exists(self, topic: str, partition: int) -> bool:
        image = self.metadata.topics.get(topic)
        return image is not None and partition in image.partitions

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                fenced: ErrorCode) -> Answer[None]:
        """Answered once the decision (Prepare) is committed; the markers and the Complete state follow."""
        self._check_coordinator(transactional_id)
        md = self.txns.get(transactional_id)
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if md is not None and md.producer_id == producer_id and md.producer_epoch == epoch and md.state is done:
            return None  # a retried EndTxn after success
        md = self._validate(transactional_id, producer_id, epoch, fenced)
        if md.state is not TxnState.ONGOING:
            if md.state is TxnState.EMPTY and not commit:
                return None
            raise TxnError(ErrorCode.invalid_txn_state,
                           f"EndTxn({'commit' if commit else 'abort'}) in state {md.state.label}")
        return self._end(md, commit)

