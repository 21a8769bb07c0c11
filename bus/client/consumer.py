"""KafkaConsumer: the Java consumer's API and config names, in Python.

    consumer = KafkaConsumer({"bootstrap.servers": "127.0.0.1:9092", "group.id": "ingest",
                              "auto.offset.reset": "earliest"})
    consumer.subscribe(["capture.vehicle"], listener=MyListener())
    while running:
        for record in consumer.poll(1.0):      # at most max.poll.records
            handle(record)
    consumer.close()                            # commits (auto-commit), revokes, leaves the group

Like Java's, a consumer is used from one thread (the heartbeat thread is internal). `poll()` drives
everything visible: rebalances and listener calls, position look-ups (committed offset, else
auto.offset.reset), fetching, auto-commit every auto.commit.interval.ms and the callbacks of
`commit_async`. Timeouts are in seconds.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from bus.client.assignors import make_assignors
from bus.client.cluster import Metadata
from bus.client.config import Config, consumer_config, instantiate, serde_function
from bus.client.errors import IllegalStateError, KafkaError, KafkaTimeoutError
from bus.client.fetcher import EARLIEST, LATEST, ConsumerRecord, Fetcher
from bus.client.group_coordinator import CommitCallback, ConsumerCoordinator
from bus.client.subscription import (
    ConsumerRebalanceListener,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    SubscriptionState,
    TopicPartition,
)

__all__ = ["ConsumerRebalanceListener", "ConsumerRecord", "ConsumerRecords", "KafkaConsumer",
           "OffsetAndMetadata", "OffsetAndTimestamp", "TopicPartition"]

log = logging.getLogger(__name__)


class ConsumerRecords:
    """What poll() returns: iterable over every record, and by partition (Java's ConsumerRecords)."""

    __slots__ = ("_by_partition",)

    def __init__(self, by_partition: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        self._by_partition = by_partition

    def __iter__(self) -> Iterator[ConsumerRecord]:
        for records in self._by_partition.values():
            yield from records

    def __len__(self) -> int:
        return sum(len(r) for r in self._by_partition.values())

    def __bool__(self) -> bool:
        return bool(self._by_partition)

    def count(self) -> int:
        return len(self)

    def partitions(self) -> set[TopicPartition]:
        return set(self._by_partition)

    def records(self, tp: TopicPartition) -> list[ConsumerRecord]:
        return self._by_partition.get(tp, [])

    def by_partition(self) -> dict[TopicPartition, list[ConsumerRecord]]:
        return self._by_partition


class KafkaConsumer:
    """A consumer of records from one or more partitions, alone or as a member of a group."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.config: Config = consumer_config(config, **kwargs)
        cfg = self.config
        self.client_id = cfg["client.id"] or f"consumer-{cfg['group.id'] or ''}-{id(self):x}"
        self._subscriptions = SubscriptionState(cfg["auto.offset.reset"])
        self.metadata = Metadata.from_config(cfg, self.client_id, allow_auto_create=cfg["allow.auto.create.topics"])
        self._fetcher = Fetcher(
            metadata=self.metadata, subscriptions=self._subscriptions, client_id=self.client_id,
            fetch_min_bytes=cfg["fetch.min.bytes"], fetch_max_bytes=cfg["fetch.max.bytes"],
            fetch_max_wait_ms=cfg["fetch.max.wait.ms"], max_partition_fetch_bytes=cfg["max.partition.fetch.bytes"],
            isolation_level=cfg["isolation.level"], check_crcs=cfg["check.crcs"],
            request_timeout_ms=cfg["request.timeout.ms"], retry_backoff_ms=cfg["retry.backoff.ms"],
            key_deserializer=serde_function(cfg["key.deserializer"], "deserialize"),
            value_deserializer=serde_function(cfg["value.deserializer"], "deserialize"))
        self._interceptors = [instantiate(spec) for spec in cfg["interceptor.classes"]]
        self._max_poll_records = cfg["max.poll.records"]
        self._api_timeout = cfg["default.api.timeout.ms"] / 1000.0
        self._auto_commit = bool(cfg["enable.auto.commit"] and cfg["group.id"])
        self._auto_commit_interval = cfg["auto.commit.interval.ms"] / 1000.0
        self._next_auto_commit = time.monotonic() + self._auto_commit_interval
        self._coordinator: ConsumerCoordinator | None = None
        if cfg["group.id"]:
            self._coordinator = ConsumerCoordinator(
                group_id=cfg["group.id"], group_instance_id=cfg["group.instance.id"], metadata=self.metadata,
                subscriptions=self._subscriptions, assignors=make_assignors(cfg["partition.assignment.strategy"]),
                client_id=self.client_id, session_timeout_ms=cfg["session.timeout.ms"],
                rebalance_timeout_ms=cfg["max.poll.interval.ms"], heartbeat_interval_ms=cfg["heartbeat.interval.ms"],
                request_timeout_ms=cfg["request.timeout.ms"], retry_backoff_ms=cfg["retry.backoff.ms"],
                rack=cfg["client.rack"] or None, exclude_internal_topics=cfg["exclude.internal.topics"])
            self._coordinator.before_rebalance = self._maybe_auto_commit_sync
        self._closed = False

    # -- subscription ---------------------------------------------------------------------------

    def _group(self) -> ConsumerCoordinator:
        if self._coordinator is None:
            raise KafkaError("this needs a group.id (consumer configured without one)")
        return self._coordinator

    def subscribe(self, topics: Iterable[str] | str | re.Pattern[str] | None = None, listener: Any = None,
                  *, pattern: str | re.Pattern[str] | None = None) -> None:
        """Join the group for a list of topics or a regex (a compiled pattern, or `pattern=`)."""
        self._check_open()
        coordinator = self._group()
        if isinstance(topics, re.Pattern) or pattern is not None:
            compiled = topics if isinstance(topics, re.Pattern) else re.compile(pattern or "")
            self._subscriptions.subscribe_pattern(compiled, listener)
            coordinator.request_rejoin()
            return
        if isinstance(topics, str):
            topics = [topics]
        names = list(topics or [])
        if not names:
            self.unsubscribe()
            return
        if any(not t or not t.strip() for t in names):
            raise ValueError("topic names must be non-empty")
        if self._subscriptions.subscribe(names, listener):
            coordinator.request_rejoin()
        self.metadata.add_topics(names)

    def subscription(self) -> set[str]:
        return set(self._subscriptions.topics) if self._subscriptions.group_managed else set()

    def unsubscribe(self) -> None:
        """Revoke, leave the group and forget the subscription (or the manual assignment)."""
        if self._coordinator is not None and self._subscriptions.group_managed:
            owned = set(self._subscriptions.assignment)
            if owned:
                self._maybe_auto_commit_sync()
                self._subscriptions.listener.on_partitions_revoked(owned)
            self._coordinator.leave_group(self._api_timeout)
        self._subscriptions.unsubscribe()
        self._fetcher.clear_buffered()

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions, without group management."""
        self._check_open()
        wanted = [TopicPartition(*tp) for tp in partitions]
        self._subscriptions.assign_from_user(wanted)
        self.metadata.add_topics({tp.topic for tp in wanted})
        self._fetcher.clear_buffered(set(self._fetcher._buffered()) - set(wanted))

    def assignment(self) -> set[TopicPartition]:
        return set(self._subscriptions.assignment)

    # -- polling --------------------------------------------------------------------------------

    def poll(self, timeout: float = 0.0, max_records: int | None = None) -> ConsumerRecords:
        """Records from the assigned partitions, at most max.poll.records; waits up to `timeout` seconds."""
        self._check_open()
        subscriptions = self._subscriptions
        if subscriptions.kind == SubscriptionState.NONE:
            raise IllegalStateError("consumer is not subscribed to any topics or assigned any partitions")
        limit = max_records or self._max_poll_records
        deadline = time.monotonic() + timeout
        fetcher = self._fetcher
        while True:
            if self._coordinator is not None:
                if subscriptions.group_managed:
                    self._coordinator.poll(max(deadline, time.monotonic() + self._api_timeout))
                else:
                    self._coordinator.last_poll = time.monotonic()
                    self._coordinator.invoke_completed_commits()
                self._maybe_auto_commit_async()
            self.metadata.maybe_refresh()
            self._update_positions(max(0.5, deadline - time.monotonic()))
            records = fetcher.fetched_records(limit)
            if records:
                fetcher.send_fetches()  # pipelining: the next responses arrive while the caller works
                return self._intercepted(records)
            fetcher.send_fetches()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                fetcher.raise_error()
                return ConsumerRecords({})
            wait = min(remaining, self._coordinator.heartbeat_interval if self._coordinator else remaining)
            fetcher.poll(wait)
            fetcher.raise_error()
            records = fetcher.fetched_records(limit)
            if records:
                fetcher.send_fetches()
                return self._intercepted(records)
            if time.monotonic() >= deadline:
                return ConsumerRecords({})

    def _intercepted(self, records: dict[TopicPartition, list[ConsumerRecord]]) -> ConsumerRecords:
        result = ConsumerRecords(records)
        for interceptor in self._interceptors:
            try:
                result = interceptor.on_consume(result) or result
            except Exception as exc:
                log.warning("interceptor %r on_consume failed: %r", interceptor, exc)
        return result

    def _update_positions(self, timeout: float) -> None:
        """Partitions without a position start from the committed offset, else auto.offset.reset."""
        subscriptions = self._subscriptions
        missing = subscriptions.needs_position()
        if missing:
            committed: dict[TopicPartition, OffsetAndMetadata | None] = {}
            if self._coordinator is not None:
                committed = self._coordinator.fetch_committed(missing, max(timeout, self._api_timeout))
            for tp in missing:
                found = committed.get(tp)
                state = subscriptions.assignment.get(tp)
                if state is None:
                    continue
                if found is not None:
                    state.position = found.offset
                    state.leader_epoch = found.leader_epoch
                else:
                    state.reset = subscriptions.default_reset
        if subscriptions.needs_reset():
            self._fetcher.reset_positions(max(timeout, self._api_timeout))

    # -- commits --------------------------------------------------------------------------------

    def _consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(pos, "", -1) for tp, pos in self._subscriptions.positions().items()}

    @staticmethod
    def _normalise(offsets: Mapping[Any, Any]) -> dict[TopicPartition, OffsetAndMetadata]:
        out = {}
        for tp, value in offsets.items():
            if isinstance(value, OffsetAndMetadata):
                out[TopicPartition(*tp)] = value
            elif isinstance(value, int):
                out[TopicPartition(*tp)] = OffsetAndMetadata(value)
            else:
                out[TopicPartition(*tp)] = OffsetAndMetadata(*value)
        return out

    def commit_sync(self, offsets: Mapping[Any, Any] | None = None, timeout: float | None = None) -> None:
        """Commit (by default every consumed position) and wait; raises CommitFailedError after a rebalance."""
        coordinator = self._group()
        coordinator.invoke_completed_commits()
        wanted = self._consumed() if offsets is None else self._normalise(offsets)
        coordinator.commit_sync(wanted, self._api_timeout if timeout is None else timeout)
        self._commit_interceptors(wanted)

    def commit_async(self, offsets: Mapping[Any, Any] | None = None, callback: CommitCallback | None = None) -> None:
        """Commit without waiting; `callback(offsets, exception)` runs during a later poll()/commit/close."""
        coordinator = self._group()
        wanted = self._consumed() if offsets is None else self._normalise(offsets)
        if not wanted:
            return
        interceptors = self._interceptors

        def done(committed: dict[TopicPartition, OffsetAndMetadata], error: Exception | None) -> None:
            if error is None and interceptors:
                self._commit_interceptors(committed)
            if callback is not None:
                callback(committed, error)

        coordinator.commit_async(wanted, done)

    def _commit_interceptors(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        for interceptor in self._interceptors:
            try:
                interceptor.on_commit(offsets)
            except Exception as exc:
                log.warning("interceptor %r on_commit failed: %r", interceptor, exc)

    def _maybe_auto_commit_async(self) -> None:
        if self._auto_commit and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self._auto_commit_interval
            offsets = self._consumed()
            if offsets and self._coordinator is not None and (
                    not self._subscriptions.group_managed or self._coordinator.generation >= 0):
                self.commit_async(offsets)

    def _maybe_auto_commit_sync(self) -> None:
        if self._auto_commit and self._coordinator is not None:
            offsets = self._consumed()
            try:
                if offsets and (not self._subscriptions.group_managed or self._coordinator.generation >= 0):
                    self._coordinator.commit_sync(offsets, self._api_timeout)
            except KafkaError as exc:
                log.warning("auto-commit of %s failed: %s", offsets, exc)

    def committed(self, partitions: Iterable[TopicPartition | tuple[str, int]], timeout: float | None = None
                  ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        wanted = [TopicPartition(*tp) for tp in partitions]
        return self._group().fetch_committed(wanted, self._api_timeout if timeout is None else timeout)

    # -- positions ------------------------------------------------------------------------------

    def position(self, tp: TopicPartition | tuple[str, int], timeout: float | None = None) -> int:
        """The offset of the next record poll() will return (looked up now if unknown)."""
        tp = TopicPartition(*tp)
        state = self._subscriptions.state(tp)
        if state.position is None or state.reset is not None:
            self._update_positions(self._api_timeout if timeout is None else timeout)
        state = self._subscriptions.state(tp)
        if state.position is None:
            raise KafkaTimeoutError(f"position of {tp} not known")
        return state.position

    def seek(self, tp: TopicPartition | tuple[str, int], offset: int | OffsetAndMetadata) -> None:
        if isinstance(offset, OffsetAndMetadata):
            self._subscriptions.seek(TopicPartition(*tp), offset.offset, offset.leader_epoch)
        else:
            if offset < 0:
                raise ValueError(f"seek offset must not be negative, got {offset}")
            self._subscriptions.seek(TopicPartition(*tp), offset)
        self._fetcher.clear_buffered([TopicPartition(*tp)])

    def _seek_to(self, partitions: Iterable[Any] | None, strategy: str) -> None:
        targets = [TopicPartition(*tp) for tp in partitions] if partitions is not None else \
            list(self._subscriptions.assignment)
        for tp in targets:
            self._subscriptions.request_reset(tp, strategy)
        self._fetcher.clear_buffered(targets)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition | tuple[str, int]] | None = None) -> None:
        self._seek_to(partitions, "earliest")

    def seek_to_end(self, partitions: Iterable[TopicPartition | tuple[str, int]] | None = None) -> None:
        self._seek_to(partitions, "latest")

    def pause(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        for tp in partitions:
            self._subscriptions.state(TopicPartition(*tp)).paused = True

    def resume(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        for tp in partitions:
            self._subscriptions.state(TopicPartition(*tp)).paused = False

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, state in self._subscriptions.assignment.items() if state.paused}

    def offsets_for_times(self, timestamps: Mapping[Any, int], timeout: float | None = None
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The earliest offset whose timestamp is >= the given one, per partition (None if none)."""
        wanted = {TopicPartition(*tp): int(ts) for tp, ts in timestamps.items()}
        for tp, ts in wanted.items():
            if ts < 0:
                raise ValueError(f"negative timestamp {ts} for {tp}")
        found = self._fetcher.list_offsets(wanted, self._api_timeout if timeout is None else timeout)
        return {tp: None if r is None else OffsetAndTimestamp(r[0], r[1]) for tp, r in found.items()}

    def beginning_offsets(self, partitions: Iterable[TopicPartition | tuple[str, int]],
                          timeout: float | None = None) -> dict[TopicPartition, int]:
        return self._edge_offsets(partitions, EARLIEST, timeout)

    def end_offsets(self, partitions: Iterable[TopicPartition | tuple[str, int]],
                    timeout: float | None = None) -> dict[TopicPartition, int]:
        """The offset after the last record (the last stable offset under read_committed)."""
        return self._edge_offsets(partitions, LATEST, timeout)

    def _edge_offsets(self, partitions: Iterable[Any], which: int, timeout: float | None) -> dict[TopicPartition, int]:
        wanted = {TopicPartition(*tp): which for tp in partitions}
        found = self._fetcher.list_offsets(wanted, self._api_timeout if timeout is None else timeout)
        return {tp: (r[0] if r is not None else -1) for tp, r in found.items()}

    # -- metadata --------------------------------------------------------------------------------

    def partitions_for_topic(self, topic: str) -> set[int]:
        info = self.metadata.wait_for_topic(topic, time.monotonic() + self._api_timeout)
        return set(info.partitions)

    def topics(self) -> dict[str, set[int]]:
        """Every topic the cluster has, with its partitions (Java's listTopics)."""
        previous = self.metadata.all_topics
        self.metadata.all_topics = True
        try:
            view = self.metadata.refresh()
        finally:
            self.metadata.all_topics = previous
        return {name: set(t.partitions) for name, t in view.topics.items() if not t.internal}

    def metrics(self) -> dict[str, Any]:
        return {"assigned-partitions": len(self._subscriptions.assignment),
                "buffered-fetches": len(self._fetcher.completed),
                "generation": self._coordinator.generation if self._coordinator else -1}

    # -- closing --------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalStateError("this consumer has already been closed")

    def close(self, timeout: float | None = None, autocommit: bool = True) -> None:
        """Commit (if auto-commit), revoke, leave the group and release connections."""
        if self._closed:
            return
        timeout = 30.0 if timeout is None else timeout
        try:
            if autocommit:
                # The final commit: queued auto-commits (older offsets) go out before it, never after.
                self._maybe_auto_commit_sync()
            if self._coordinator is not None:
                self._coordinator.close(timeout)
        finally:
            self._closed = True
            self._fetcher.close()
            self.metadata.close()
            for interceptor in self._interceptors:
                try:
                    interceptor.close()
                except Exception as exc:
                    log.warning("interceptor %r close failed: %r", interceptor, exc)

    def __enter__(self) -> KafkaConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
