"""The admin client's transaction calls: list and describe transactions, the producers a partition remembers, and
aborting a hanging transaction.

Java's `Admin.listTransactions`, `describeTransactions`, `describeProducers` and `abortTransaction`, which
kafka-transactions is built on. Requests go where Java's admin sends them: ListTransactions to every broker (each
coordinates some ids), DescribeTransactions to the id's transaction coordinator (FindCoordinator with key type 1),
DescribeProducers and the abort's WriteTxnMarkers to the partition's leader.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from bus.client.admin.common import AdminCalls, AdminError, Retry, check_error
from bus.protocol.topic_partition import TopicPartition

WRITE_TXN_MARKERS, FIND_COORDINATOR = 27, 10
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66

_TRANSACTION_KEY = 1  # FindCoordinator's key type for a transactional id
_COORDINATOR_RETRY = frozenset(int(e) for e in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                                                ErrorCode.coordinator_load_in_progress))


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
    coordinator: int  # the broker that listed it: its coordinator


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionDescription:
    coordinator: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int | None  # None when no transaction is ongoing
    partitions: list[TopicPartition]


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerState:
    """A producer a partition remembers (Java's `ProducerState`); None where the broker knows nothing."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int | None
    current_transaction_start_offset: int | None


def _millis(value: Any) -> int:
    """kio decodes some int64 times as datetimes and int32 durations as timedeltas; back to milliseconds."""
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return -1 if value is None else int(value)


def _transaction_coordinator(admin: AdminCalls, transactional_id: str) -> int:
    """The broker coordinating `transactional_id` (FindCoordinator, key type 1)."""
    response = admin._send(admin._any_node(), FIND_COORDINATOR, lambda s: s.make(
        "FindCoordinatorRequest", key=transactional_id, key_type=_TRANSACTION_KEY,
        coordinator_keys=[transactional_id]))
    found = response.coordinators[0] if getattr(response, "coordinators", None) else response
    code = int(found.error_code)
    if code in _COORDINATOR_RETRY:
        raise Retry(AdminError(code, getattr(found, "error_message", None)))
    check_error(code, getattr(found, "error_message", None))
    node = int(found.node_id)
    if node not in admin._metadata.view.brokers:
        raise Retry(AdminError(ErrorCode.coordinator_not_available, f"coordinator {node} is not in the metadata"))
    return node


class TransactionAdmin:
    """The transaction calls `AdminClient` inherits."""

    def list_transactions(self: AdminCalls, *, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                          min_duration_ms: int = -1) -> list[TransactionListing]:
        """The transactional ids every broker coordinates, filtered as ListTransactions filters them."""
        wanted_states, wanted_producers = list(states), [int(p) for p in producer_ids]

        def build(s: Any) -> Any:
            return s.make("ListTransactionsRequest", state_filters=wanted_states, producer_id_filters=wanted_producers,
                          duration_filter=min_duration_ms)

        def attempt() -> list[TransactionListing]:
            self._refresh_brokers()
            listed = []
            for broker in sorted(self._metadata.view.brokers):
                response = self._send(broker, LIST_TRANSACTIONS, build)
                code = int(response.error_code)
                if code in _COORDINATOR_RETRY:
                    raise Retry(AdminError(code), refresh=False)
                check_error(code)
                listed += [TransactionListing(t.transactional_id, int(t.producer_id), t.transaction_state, broker)
                           for t in response.transaction_states]
            return listed

        return self._call(attempt, "list transactions")

    def describe_transaction(self: AdminCalls, transactional_id: str) -> TransactionDescription:
        """State, producer and partitions of one transactional id, from its coordinator;
        TRANSACTIONAL_ID_NOT_FOUND if it has none."""

        def attempt() -> TransactionDescription:
            coordinator = _transaction_coordinator(self, transactional_id)
            response = self._send(coordinator, DESCRIBE_TRANSACTIONS, lambda s: s.make(
                "DescribeTransactionsRequest", transactional_ids=[transactional_id]))
            state = response.transaction_states[0]
            code = int(state.error_code)
            if code in _COORDINATOR_RETRY:
                raise Retry(AdminError(code))
            if code == int(ErrorCode.transactional_id_not_found):
                raise AdminError(code, f"The transactionalId {transactional_id} could not be found.")
            check_error(code)
            start = _millis(state.transaction_start_time)
            return TransactionDescription(
                coordinator, state.transaction_state, int(state.producer_id), int(state.producer_epoch),
                _millis(state.transaction_timeout), None if start < 0 else start,
                [TopicPartition(t.topic, int(p)) for t in state.topics for p in t.partitions])

        return self._call(attempt, "describe transactions")

    def describe_producers(self: AdminCalls, partition: TopicPartition,
                           broker_id: int | None = None) -> list[ProducerState]:
        """The producers `partition` remembers, asked of its leader (or of `broker_id`, a replica)."""
        tp = TopicPartition(partition.topic, int(partition.partition))

        def build(s: Any) -> Any:
            return s.make("DescribeProducersRequest", topics=[
                s.make("TopicRequest", name=tp.topic, partition_indexes=[tp.partition])])

        def attempt() -> list[ProducerState]:
            node = self._leaders([tp])[tp] if broker_id is None else broker_id
            response = self._send(node, DESCRIBE_PRODUCERS, build)
            answer = response.topics[0].partitions[0]
            code = int(answer.error_code)
            if broker_id is None and code in (int(ErrorCode.not_leader_or_follower),
                                              int(ErrorCode.leader_not_available)):
                raise Retry(AdminError(code))
            check_error(code, getattr(answer, "error_message", None))
            return [ProducerState(int(p.producer_id), int(p.producer_epoch), int(p.last_sequence),
                                  _millis(p.last_timestamp),
                                  None if int(p.coordinator_epoch) < 0 else int(p.coordinator_epoch),
                                  None if int(p.current_txn_start_offset) < 0 else int(p.current_txn_start_offset))
                    for p in answer.active_producers]

        return self._call(attempt, "describe producers")

    def abort_transaction(self: AdminCalls, partition: TopicPartition, producer_id: int, producer_epoch: int,
                          coordinator_epoch: int) -> None:
        """Write an ABORT marker for the producer's open transaction into `partition` (Java's `abortTransaction`:
        WriteTxnMarkers to the leader, which a hanging transaction's lost coordinator never sent)."""
        tp = TopicPartition(partition.topic, int(partition.partition))

        def build(s: Any) -> Any:
            return s.make("WriteTxnMarkersRequest", markers=[s.make(
                "WritableTxnMarker", producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=False,
                coordinator_epoch=coordinator_epoch,
                topics=[s.make("WritableTxnMarkerTopic", name=tp.topic, partition_indexes=[tp.partition])])])

        def attempt() -> None:
            response = self._send(self._leaders([tp])[tp], WRITE_TXN_MARKERS, build)
            code = int(response.markers[0].topics[0].partitions[0].error_code)
            if code in (int(ErrorCode.not_leader_or_follower), int(ErrorCode.leader_not_available)):
                raise Retry(AdminError(code))
            check_error(code)

        self._call(attempt, "abort transaction")
