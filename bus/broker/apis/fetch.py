"""Fetch (1): whole batches from partition logs, with long polling and incremental fetch sessions.

Consumers read up to the high watermark (or the last stable offset); a follower's fetch (`replica_id` >= 0)
reads up to the log end, and its fetch offset tells the leader how far that follower has copied, which moves
the high watermark and the ISR (`ReplicaManager.follower_fetched`). A fetch naming `last_fetched_epoch` (v12+)
whose epoch ends below its fetch offset on the leader is answered `diverging_epoch` (KIP-320): the fetcher
truncates to there before going on. A follower out of the ISR of a partition this broker throttles as leader
gets no records for it while the leader replication quota is exceeded (replication_quota.py).

A fetch that finds fewer than `min_bytes` waits in the fetch purgatory (see fetch_purgatory.py) until its
partitions receive enough bytes, one of them fails, or `max_wait` passes, then reads once more. It answers
at once, as Kafka does, when a partition read fails. v7+ fetches may use KIP-227 sessions (see
fetch_sessions.py): the broker remembers the partitions and answers only those with news.

Authorization (Kafka's handleFetchRequest): a follower needs CLUSTER_ACTION on the cluster, a consumer READ on each
topic; a partition it may not read is answered TOPIC_AUTHORIZATION_FAILED and not read.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker import fetch_purgatory
from bus.broker.apis._common import topic_name_for
from bus.broker.context import RequestContext
from bus.broker.fetch_sessions import (
    FINAL_EPOCH,
    CachedPartition,
    FetchContext,
    PartitionKey,
    ReadResult,
    new_context,
)
from bus.broker.partition import Partition, PartitionError
from bus.log.errors import OffsetOutOfRangeError
from bus.protocol import records as rb
from bus.protocol.topic_partition import TopicPartition
from bus.security.acls import AclOperation, ResourceType

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 16

READ_COMMITTED = 1
TOPIC_IDS_VERSION = 13


def _aborted_in(partition: Partition, start: int, stable: int, records: bytes) -> list[Any]:
    """The aborted transactions overlapping the records sent (Kafka bounds them by the fetched data,
    not the LSO, so a consumer far behind does not get every later abort in every response)."""
    if not records:
        return []
    end = rb.scan_batches_prefix(records, verify_crc=False)[0][-1].next_offset
    return partition.aborted_transactions(start, min(end, stable))


def _requested(ctx: RequestContext, request: Any) -> list[CachedPartition]:
    out = []
    for topic in request.topics:
        topic_id = getattr(topic, "topic_id", None) if ctx.api_version >= TOPIC_IDS_VERSION else None
        name = topic_name_for(ctx, getattr(topic, "topic", None), topic_id)
        for wanted in topic.partitions:
            out.append(CachedPartition(name, topic_id, wanted.partition, wanted.fetch_offset,
                                       wanted.partition_max_bytes, getattr(wanted, "current_leader_epoch", -1),
                                       getattr(wanted, "last_fetched_epoch", -1)))
    return out


def _forgotten(request: Any, uses_topic_ids: bool) -> list[PartitionKey]:
    return [((topic.topic_id if uses_topic_ids else topic.topic), index)
            for topic in getattr(request, "forgotten_topics_data", None) or () for index in topic.partitions]


def replica_id(ctx: RequestContext, request: Any) -> int:
    """The fetching follower's broker id, -1 for a consumer (in `replica_state` from v15)."""
    if ctx.api_version >= 15:
        return int(request.replica_state.replica_id)
    return int(getattr(request, "replica_id", -1))


def _diverging(partition: Partition, want: CachedPartition) -> tuple[int, int] | None:
    """(epoch, end offset) where the fetcher's log leaves ours, or None (Kafka's Partition.fetchRecords). An
    epoch this leader cannot place (newer than any it knows) is OFFSET_OUT_OF_RANGE, as in Kafka: the fetcher
    then compares log ends (ListOffsets) instead of fetching on without progress."""
    if want.last_fetched_epoch < 0:
        return None
    epoch, end = partition.end_offset_for_epoch(want.last_fetched_epoch)
    if epoch < 0 or end < 0:
        raise OffsetOutOfRangeError(f"leader epoch {want.last_fetched_epoch} is unknown to the leader")
    if end < want.fetch_offset or epoch < want.last_fetched_epoch:
        return epoch, end
    return None


def _visible_end(partition: Partition, replica: int, committed: bool) -> int:
    """Where a fetch may read to: a follower to the log end, a consumer to the high watermark or, read_committed,
    the last stable offset."""
    if replica >= 0:
        return partition.log.log_end_offset
    return partition.last_stable_offset if committed else partition.high_watermark


class _Read:
    """One pass over a fetch's partitions: what each has (bytes read, error, offsets) and the totals.

    Response entries are built only for the partitions a response carries (`_entry`): an incremental session
    reads every partition it holds, and most have no news."""

    def __init__(self, ctx: RequestContext, request: Any, wanted: list[CachedPartition], denied: frozenset[str],
                 replica: int = -1, *, first: bool = False) -> None:
        """`denied`: the topics the fetcher may not read; `replica`: the fetching follower, -1 for a consumer;
        `first`: the pass that reports the follower's position to the leader (a long poll reads again later with
        the same offsets)."""
        replicas = ctx.replicas
        self.replica = replica
        self.committed = committed = request.isolation_level == READ_COMMITTED
        budget = request.max_bytes
        self.total = 0
        self.failed = False
        self.partitions: list[Partition] = []
        self.results: list[ReadResult] = []
        self.ends: list[int] = []  # each partition's readable end as this read found it
        for want in wanted:
            try:
                name = topic_name_for(ctx, want.topic, want.topic_id)
                if name is None:
                    raise PartitionError(ErrorCode.unknown_topic_id)
                if name in denied:
                    raise PartitionError(ErrorCode.topic_authorization_failed)
                partition = replicas.get(name, want.partition)
            except PartitionError as exc:
                self._add(ReadResult(want, b"", exc.code, -1, -1, -1))
                continue
            self.partitions.append(partition)
            end = _visible_end(partition, replica, committed)
            self.ends.append(end)
            code = ErrorCode.none
            records = b""
            diverging = None
            try:
                partition.check_leader_epoch(want.leader_epoch)
                diverging = _diverging(partition, want)
                if replica >= 0 and first and diverging is None:
                    replicas.follower_fetched(partition, replica, want.fetch_offset)
                limit = min(want.max_bytes, budget)
                # At the end there is nothing to read (most of a session's partitions, most of the time).
                if (diverging is None and want.fetch_offset != end and (limit > 0 or self.total == 0)
                        and not (replica >= 0 and _leader_throttles(ctx, partition, replica))):
                    result = partition.read(want.fetch_offset, max(limit, 0), max_offset=end,
                                            min_one_batch=self.total == 0)
                    records = bytes(result.data)
            except OffsetOutOfRangeError:
                code = ErrorCode.offset_out_of_range
            except PartitionError as exc:
                code = exc.code
            stable = partition.last_stable_offset
            aborted = None
            if committed:
                aborted = [ctx.make("AbortedTransaction", producer_id=t.producer_id, first_offset=t.first_offset)
                           for t in _aborted_in(partition, want.fetch_offset, stable, records)]
            self.total += len(records)
            budget -= len(records)
            self._add(ReadResult(want, records, code, partition.high_watermark, stable, partition.log_start_offset,
                                 aborted, diverging))

    def _add(self, result: ReadResult) -> None:
        self.failed |= result.error != ErrorCode.none or result.diverging is not None
        self.results.append(result)

    def visible_ends(self) -> list[int]:
        """Where each partition read may read to now: unchanged since the read, a new read finds nothing new."""
        return [_visible_end(partition, self.replica, self.committed) for partition in self.partitions]


def _leader_throttles(ctx: RequestContext, partition: Partition, replica: int) -> bool:
    """Kafka's ReplicaManager.shouldLeaderThrottle: a follower out of the ISR of a partition this leader throttles
    gets no data for it while the leader quota is exceeded; an in-sync follower, which acks=all waits for, always
    does."""
    quota = ctx.replicas.quotas.leader
    return (replica not in partition.isr and quota.is_throttled(TopicPartition(partition.topic, partition.index))
            and quota.is_quota_exceeded())


def _record_throttled(ctx: RequestContext, results: list[ReadResult]) -> None:
    """The bytes a follower's response carries for throttled partitions count against the leader quota (Kafka's
    sizeOfThrottledPartitions), in sync or not."""
    quota = ctx.replicas.quotas.leader
    sent = sum(len(r.records) for r in results
               if r.records and quota.is_throttled(TopicPartition(r.partition.topic or "", r.partition.partition)))
    if sent:
        quota.record(sent)


def _entry(ctx: RequestContext, result: ReadResult) -> Any:
    """The response's PartitionData for one partition read."""
    extra = {}
    if result.diverging is not None:
        epoch, end_offset = result.diverging
        extra["diverging_epoch"] = ctx.make("EpochEndOffset", epoch=epoch, end_offset=end_offset)
    return ctx.make("PartitionData", partition_index=result.partition.partition, error_code=result.error,
                    high_watermark=result.high_watermark, last_stable_offset=result.last_stable_offset,
                    log_start_offset=result.log_start_offset, aborted_transactions=result.aborted,
                    preferred_read_replica=-1, records=result.records, **extra)


def _response(ctx: RequestContext, context: FetchContext, read: _Read | None) -> Any:
    if context.error != ErrorCode.none or read is None:
        return ctx.make("FetchResponse", throttle_time=0, error_code=context.error, session_id=0, responses=[])
    topics: dict[tuple[str | None, uuid.UUID | None], list[Any]] = {}
    selected = list(context.select(read.results))
    if read.replica >= 0:
        _record_throttled(ctx, selected)
    else:  # BytesOut counts what consumers are sent (replication is counted apart, as in Kafka)
        metrics = ctx.services.topic_metrics
        for result in selected:
            if result.records:
                part = result.partition
                metrics.fetched(topic_name_for(ctx, part.topic, part.topic_id) or "", len(result.records))
    for result in selected:
        part = result.partition
        topics.setdefault((part.topic, part.topic_id), []).append(_entry(ctx, result))
    responses = [ctx.make("FetchableTopicResponse", topic=name or "", topic_id=topic_id, partitions=parts)
                 for (name, topic_id), parts in topics.items()]
    return ctx.make("FetchResponse", throttle_time=0, error_code=ErrorCode.none, session_id=context.session_id,
                    responses=responses)


def _denied(ctx: RequestContext, wanted: list[CachedPartition], replica: int) -> frozenset[str]:
    """The topics of `wanted` this fetch may not read: all of them for a follower without CLUSTER_ACTION, else those
    a consumer lacks READ on."""
    if ctx.authorizer is None:  # the common case, on every fetch of a session of many partitions: no walk over them
        return frozenset()
    names = {name for want in wanted if (name := topic_name_for(ctx, want.topic, want.topic_id)) is not None}
    if replica >= 0:
        return frozenset() if ctx.authorize_cluster(AclOperation.CLUSTER_ACTION) else frozenset(names)
    return frozenset(names - ctx.authorized(AclOperation.READ, ResourceType.TOPIC, names))


def handle(ctx: RequestContext, request: Any) -> Any:
    uses_topic_ids = ctx.api_version >= TOPIC_IDS_VERSION
    replica = replica_id(ctx, request)
    context = new_context(ctx.replicas.fetch_sessions, getattr(request, "session_id", 0),
                          getattr(request, "session_epoch", FINAL_EPOCH), uses_topic_ids,
                          _requested(ctx, request), _forgotten(request, uses_topic_ids), from_follower=replica >= 0)
    if context.error != ErrorCode.none:
        return _response(ctx, context, None)
    denied = _denied(ctx, context.partitions, replica)
    read = _Read(ctx, request, context.partitions, denied, replica, first=True)
    max_wait = request.max_wait.total_seconds()
    if read.total >= request.min_bytes or max_wait <= 0 or not read.partitions or read.failed:
        return _response(ctx, context, read)
    return _long_poll(ctx, request, context, read, denied, replica, time.monotonic() + max_wait)


async def _long_poll(ctx: RequestContext, request: Any, context: FetchContext, read: _Read, denied: frozenset[str],
                     replica: int, deadline: float) -> Any:
    delayed = fetch_purgatory.DelayedFetch(request.min_bytes, read.total, request.isolation_level == READ_COMMITTED,
                                           replica=replica >= 0)
    await fetch_purgatory.wait(delayed, [p.watchers for p in read.partitions], deadline - time.monotonic(),
                               lambda: _recheck(ctx, request, context, read, denied))
    return _response(ctx, context, _Read(ctx, request, context.partitions, denied, replica))


def _recheck(ctx: RequestContext, request: Any, context: FetchContext, read: _Read, denied: frozenset[str]) -> int:
    """The bytes a fetch finds once parked (see fetch_purgatory.wait): read again only if a partition's
    readable end moved since the first read, which in a session of many quiet partitions is rare."""
    if read.visible_ends() == read.ends:
        return read.total
    return _Read(ctx, request, context.partitions, denied, read.replica).total
