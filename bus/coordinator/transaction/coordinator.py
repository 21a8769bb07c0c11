"""The transaction coordinator (single broker): InitProducerId, AddPartitions/OffsetsToTxn, EndTxn, timeouts.

State changes are appended to `__transaction_state` before they are acknowledged. EndTxn is the
two-phase commit Kafka runs: persist PrepareCommit/PrepareAbort, write a commit/abort control
marker into every partition of the transaction, persist CompleteCommit/CompleteAbort. On start-up a
transaction found in a Prepare state is completed, and an Ongoing one past its timeout is aborted
with a bumped epoch, so an abandoned or crashed producer never leaves records hanging.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from bus.coordinator.interfaces import MetadataView, PartitionWriter, ProducerIdSource, TopicCreator
from bus.coordinator.internal_topic import InternalTopic
from bus.coordinator.partitioning import partition_for
from bus.coordinator.transaction import records
from bus.coordinator.transaction.state import TxnMetadata, TxnState
from bus.protocol.errors import KafkaApiError

log = logging.getLogger(__name__)

TOPIC = "__transaction_state"
MAX_EPOCH = 2**15 - 2  # Kafka bumps to a new producer id before the epoch would overflow


class TxnError(KafkaApiError):
    """A transactional request the coordinator refuses (fenced, concurrent, invalid state)."""


def _now() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class TxnConfig:
    num_partitions: int = 50
    replication_factor: int = 3
    max_timeout_ms: int = 900000
    abort_check_interval_ms: int = 10000
    id_expiration_ms: int = 604800000
    id_expiration_check_interval_ms: int = 3600000

    @classmethod
    def from_broker(cls, config: Any) -> TxnConfig:
        return cls(
            num_partitions=int(config["transaction.state.log.num.partitions"]),
            replication_factor=int(config["transaction.state.log.replication.factor"]),
            max_timeout_ms=int(config["transaction.max.timeout.ms"]),
            abort_check_interval_ms=int(config["transaction.abort.timed.out.transaction.cleanup.interval.ms"]),
            id_expiration_ms=int(config["transactional.id.expiration.ms"]),
            id_expiration_check_interval_ms=int(config["transaction.remove.expired.transaction.cleanup.interval.ms"]),
        )


class TransactionCoordinator:
    def __init__(self, config: TxnConfig, writer: PartitionWriter, topics: TopicCreator, metadata: MetadataView,
                 producer_ids: ProducerIdSource) -> None:
        self.writer = writer
        self.metadata = metadata
        self.producer_ids = producer_ids
        self.topic = InternalTopic(writer, topics, TOPIC, config.num_partitions, config.replication_factor,
                                   {"min.insync.replicas": "1", "segment.bytes": str(100 * 1024 * 1024)})
        self.config = config
        self.max_timeout_ms = config.max_timeout_ms
        self.txns: dict[str, TxnMetadata] = {}
        # Called with (producer id, commit) once a transaction's markers are written: the group
        # coordinator makes that producer's transactional offsets visible or drops them.
        self.completion_listeners: list[Callable[[int, bool], None]] = []
        self._tasks: list[asyncio.Task[None]] = []

    # -- life cycle ----------------------------------------------------------------------------

    def load(self) -> None:
        self.topic.ensure()
        for partition in range(self.topic.partitions):
            if not self.topic.is_local(partition):  # in a cluster, another node leads it
                continue
            for _offset, key, value in self.topic.replay(partition):
                if key is None:
                    continue
                txn_id = records.decode_key(key)
                if value is None:
                    self.txns.pop(txn_id, None)
                else:
                    self.txns[txn_id] = records.decode_value(txn_id, value)
        for md in list(self.txns.values()):
            if md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self._complete(md, commit=md.state is TxnState.PREPARE_COMMIT)
        log.info("loaded %d transactional ids from %s", len(self.txns), TOPIC)

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._every(self.config.abort_check_interval_ms, self.abort_expired)),
            asyncio.create_task(self._every(self.config.id_expiration_check_interval_ms,
                                            self.expire_transactional_ids)),
        ]

    def stop(self) -> None:
        for task in self._tasks:
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
            if md.state is TxnState.ONGOING and md.start_ms + md.timeout_ms < now_ms:
                log.info("aborting transaction %s (producer %d) after its %d ms timeout",
                         md.transactional_id, md.producer_id, md.timeout_ms)
                self._fence_and_abort(md)
                aborted.append(md.transactional_id)
        return aborted

    def expire_transactional_ids(self, now_ms: int) -> list[str]:
        """Forget ids idle for `transactional.id.expiration.ms` with no transaction in progress (Kafka's
        removeExpiredTransactionalIds): a tombstone in `__transaction_state`, then out of memory, so
        neither this broker nor a reload remembers them; their next InitProducerId starts afresh."""
        expired = []
        for md in list(self.txns.values()):
            if md.completed and md.last_update_ms <= now_ms - self.config.id_expiration_ms:
                partition = partition_for(md.transactional_id, self.topic.partitions)
                try:
                    self.topic.append(partition, [(records.encode_key(md.transactional_id), None)])
                except KafkaApiError as exc:
                    log.warning("could not expire transactional id %s: %s", md.transactional_id, exc.code.name)
                    continue
                del self.txns[md.transactional_id]
                expired.append(md.transactional_id)
        if expired:
            log.info("removed %d expired transactional ids", len(expired))
        return expired

    # -- persistence -------------------------------------------------------------------------------

    def _persist(self, md: TxnMetadata) -> None:
        md.last_update_ms = _now()
        partition = partition_for(md.transactional_id, self.topic.partitions)
        self.topic.append(partition, [(records.encode_key(md.transactional_id), records.encode_value(md))])
        self.txns[md.transactional_id] = md

    def _write_markers(self, md: TxnMetadata, commit: bool) -> None:
        for topic, index in sorted(md.partitions):
            try:
                self.writer.write_marker(topic, index, md.producer_id, md.producer_epoch, commit)
            except KafkaApiError:
                log.warning("transaction %s: partition %s-%d is gone; no marker written",
                            md.transactional_id, topic, index)
        for listener in self.completion_listeners:
            listener(md.producer_id, commit)

    def _complete(self, md: TxnMetadata, commit: bool) -> None:
        self._write_markers(md, commit)
        md.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        md.partitions = set()
        md.start_ms = -1
        self._persist(md)

    def _end(self, md: TxnMetadata, commit: bool) -> None:
        md.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        self._persist(md)
        self._complete(md, commit)

    def _fence_and_abort(self, md: TxnMetadata) -> None:
        """Abort with a bumped epoch the producer never received (Kafka's prepareFenceProducerEpoch).

        The previous epoch is not remembered as `last_producer_epoch`: that slot is for an
        InitProducerId retry, and it would let the fenced (timed-out or replaced) producer re-init
        with its old epoch and carry on as if nothing happened.
        """
        md.last_producer_epoch = -1
        md.producer_epoch += 1
        self._end(md, commit=False)

    # -- request handling --------------------------------------------------------------------------

    def _validate(self, transactional_id: str, producer_id: int, epoch: int, fenced: ErrorCode) -> TxnMetadata:
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
                         epoch: int = -1) -> tuple[int, int]:
        if not transactional_id:
            raise TxnError(ErrorCode.invalid_request, "empty transactional id")
        if timeout_ms <= 0 or timeout_ms > self.max_timeout_ms:
            raise TxnError(ErrorCode.invalid_transaction_timeout,
                           f"transaction timeout {timeout_ms} is outside (0, {self.max_timeout_ms}]")
        md = self.txns.get(transactional_id)
        if md is None:
            md = TxnMetadata(transactional_id, self.producer_ids.next_id(), 0, timeout_ms)
            self._persist(md)
            return md.producer_id, md.producer_epoch
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
        md.last_producer_epoch = md.producer_epoch
        if md.producer_epoch >= MAX_EPOCH:
            md.producer_id = self.producer_ids.next_id()
            md.producer_epoch = 0
        else:
            md.producer_epoch += 1
        md.timeout_ms = timeout_ms
        md.state = TxnState.EMPTY
        md.partitions = set()
        self._persist(md)
        return md.producer_id, md.producer_epoch

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: Iterable[tuple[str, int]], fenced: ErrorCode) -> dict[tuple[str, int], ErrorCode]:
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
        if not set(wanted) <= md.partitions or md.state is not TxnState.ONGOING:
            if md.state is not TxnState.ONGOING:
                md.start_ms = _now()
            md.state = TxnState.ONGOING
            md.partitions |= set(wanted)
            self._persist(md)
        return dict.fromkeys(wanted, ErrorCode.none)

    def _exists(self, topic: str, partition: int) -> bool:
        image = self.metadata.topics.get(topic)
        return image is not None and partition in image.partitions

    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool, fenced: ErrorCode) -> None:
        md = self.txns.get(transactional_id)
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if md is not None and md.producer_id == producer_id and md.producer_epoch == epoch and md.state is done:
            return  # a retried EndTxn after success
        md = self._validate(transactional_id, producer_id, epoch, fenced)
        if md.state is not TxnState.ONGOING:
            if md.state is TxnState.EMPTY and not commit:
                return
            raise TxnError(ErrorCode.invalid_txn_state,
                           f"EndTxn({'commit' if commit else 'abort'}) in state {md.state.label}")
        self._end(md, commit)
