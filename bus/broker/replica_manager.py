"""The partitions this broker hosts, kept in line with the metadata.

Named after Kafka's ReplicaManager: it owns the `Partition` objects (partition.py) and applies metadata
changes published by the controller (create or delete logs, new leader epochs and configs). A partition this
node is no longer a replica of (a reassignment moved it away) stops being served and followed, and its log is
deleted, as KRaft removes stray replicas.

Nothing here waits for the disk on the event loop: producer snapshots are written, and deleted topics'
files removed, in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from bus.broker.fetch_sessions import FetchSessionCache
from bus.broker.partition import (
    CODECS,
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    Partition,
    PartitionError,
)
from bus.broker.replication_quota import ReplicationQuotas
from bus.config.topic import effective_topic_configs
from bus.controller.controller_channel import ControllerUnavailable
from bus.controller.image import BROKER_RESOURCE, MetadataImage, PartitionState, TopicImage
from bus.log.config import LogConfig
from bus.log.manager import LogManager
from bus.log.producer_state import delete_snapshots_after, write_snapshot_file
from bus.protocol.errors import KafkaApiError
from bus.protocol.topic_partition import TopicPartition

log = logging.getLogger(__name__)

HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"  # per log dir, as Kafka names it



class Fetchers(Protocol):
    """The follower side (replica_fetcher.py): copies partitions this node follows from their leaders."""

    def add(self, leader_id: int, partition: Partition) -> None: ...

    def remove(self, partition: Partition) -> None: ...


# AlterPartition through the active controller: (topic id, partition, leader epoch, partition epoch, new ISR) ->
# the committed state; raises KafkaApiError when refused, ControllerUnavailable when no controller answered.
AlterIsr = Callable[[uuid.UUID, int, int, int, list[int]], Awaitable[PartitionState]]


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class ReplicaManager:
    def __init__(self, node_id: int, logs: LogManager, broker_static: dict[str, str], *,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 fetch_session_slots: int = 1000, replica_lag_time_max_ms: int = 30_000,
                 quotas: ReplicationQuotas | None = None, alter_isr: AlterIsr | None = None, held: bool = False,
                 checkpointed_high_watermarks: dict[TopicPartition, int] | None = None) -> None:
        """`quotas`: the replication throttles, kept in line with the metadata here (default: unthrottled);
        `alter_isr`: how a leader asks the active controller to change a partition's ISR (None: a node without a
        quorum, whose partitions have no followers); `held`: see the attribute; `checkpointed_high_watermarks`: what
        the last run checkpointed, used as the logs open."""
        self.node_id = node_id
        self.quotas = quotas or ReplicationQuotas(node_id, 11, 1.0, {})
        self.logs = logs
        self.broker_static = broker_static
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.fetch_sessions = FetchSessionCache(fetch_session_slots)
        self.partitions: dict[TopicPartition, Partition] = {}
        self.isr_shrinks = 0  # ISR changes this leader made (Kafka's IsrShrinksPerSec / IsrExpandsPerSec)
        self.isr_expands = 0
        self.partitions_by_id: dict[uuid.UUID, list[Partition]] = {}
        self._background: set[asyncio.Future[None]] = set()
        self._image: MetadataImage | None = None
        self._opening: dict[TopicPartition, asyncio.Future[list[Partition]]] = {}  # new logs being created in a worker
        self.serving = False
        """Set once the broker takes connections: from then on new logs are created off the loop."""
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.fetchers: Fetchers | None = None  # set by `start_fetching`; None: nothing is followed yet
        self.alter_isr = alter_isr
        self.checkpointed_high_watermarks = dict(checkpointed_high_watermarks or {})
        # Told (partition, now leading?) when this node starts or stops leading a partition (a new leader epoch
        # either way): coordinators load and unload their internal topics' partitions on it.
        self.leadership_listeners: list[Callable[[Partition, bool], None]] = []
        self._isr_updates: set[asyncio.Task[None]] = set()
        self.held = held
        """True on a broker of a quorum until its registration is committed and applied (`release`): the image
        is kept, but no partition is opened, led or followed before, as Kafka's brokers publish no metadata to
        their replica manager before their first registration and catch-up. A restarted broker would otherwise
        lead its old partitions at once with what its disk holds, an empty one included."""

    def release(self) -> None:
        """The registration is in: open, lead and follow what the current image says (once per process)."""
        if self.held:
            self.held = False
            if self._image is not None:
                self.load(self._image)

    def effective_configs(self, topic: TopicImage) -> dict[str, str]:
        return effective_topic_configs(topic.configs, self.broker_static)

    def load(self, image: MetadataImage) -> None:
        """Open the logs of every partition this broker leads (start-up, after log recovery)."""
        self._image = image
        if self.held:
            return
        self.quotas.load(((topic.name, topic.configs) for topic in image.topics.values()), image.broker_configs)
        for topic in image.topics.values():
            self._sync_topic(topic)

    def apply(self, image: MetadataImage, records: Iterable[dict[str, Any]]) -> None:
        """Metadata publisher: bring hosted partitions in line with the committed records."""
        self._image = image
        if self.held:
            return
        touched: set[str] = set()
        for record in records:
            kind = record["type"]
            if kind == "remove_topic":
                self._drop_topic(uuid.UUID(record["topic_id"]))
            elif kind == "config" and record.get("resource_type") == BROKER_RESOURCE:
                self.quotas.update_rates(image.broker_configs)
            elif kind in ("topic", "config"):
                touched.add(record["name"])
            elif kind == "partition":
                topic = image.topics_by_id.get(uuid.UUID(record["topic_id"]))
                if topic is not None:
                    touched.add(topic.name)
        for name in touched:
            topic = image.topics.get(name)
            if topic is not None:
                self.quotas.update_topic(name, topic.configs)
                self._sync_topic(topic)

    def _sync_topic(self, topic: TopicImage) -> None:
        effective = self.effective_configs(topic)
        config = LogConfig.from_properties(effective)
        hosted = self.partitions_by_id.setdefault(topic.topic_id, [])
        missing: list[int] = []
        for index, state in sorted(topic.partitions.items()):
            tp = TopicPartition(topic.name, index)
            partition = self.partitions.get(tp)
            if state.leader != self.node_id and self.node_id not in state.replicas:
                if partition is not None:
                    self._stray(partition)
                elif tp not in self._opening:
                    self._delete_log(tp)  # left here by a move that completed while this node was down
                continue
            if partition is None:
                if tp in self._opening:  # its worker makes the Partition: a second one here would share the log
                    continue
                log_ = self.logs.get(tp)
                if log_ is None:
                    missing.append(index)
                    continue
                partition = Partition(topic, index, log_, config, state.leader_epoch, self.producer_id_expiration_ms)
                self._restore_high_watermark(tp, partition, state)
                self.partitions[tp] = partition
                hosted.append(partition)
            elif partition.config != config:
                partition.config = config
                partition.log.update_config(config)
            self._apply_state(partition, state)
            partition.min_insync_replicas = int(effective["min.insync.replicas"])
            partition.target_codec = CODECS.get(effective["compression.type"])
        if missing:
            self._create_logs(topic, config, missing)

    def _restore_high_watermark(self, tp: TopicPartition, partition: Partition, state: PartitionState) -> None:
        """An existing log's high watermark as last checkpointed (never past its end). A replicated partition
        without one starts at its log start, as Kafka does, and learns the rest from the ISR; a single replica's
        is its log end (it was alone in its ISR, and logs from before replication have no checkpoint)."""
        checkpointed = self.checkpointed_high_watermarks.pop(tp, None)
        end = partition.log.log_end_offset
        if checkpointed is not None:
            partition.high_watermark = max(min(checkpointed, end), partition.log.log_start_offset)
        elif len(state.replicas) > 1:
            partition.high_watermark = partition.log.log_start_offset

    def start_fetching(self, fetchers: Fetchers) -> None:
        """From now on followers fetch (the broker serves and has a loop): start with every partition followed."""
        self.fetchers = fetchers
        for partition in self.partitions.values():
            if not partition.is_leader and partition.leader_id >= 0:
                fetchers.add(partition.leader_id, partition)

    def under_replicated(self) -> int:
        """Partitions led here whose ISR lacks some replica (Kafka's UnderReplicatedPartitions)."""
        return sum(1 for p in self.partitions.values() if p.is_leader and len(p.isr) < len(p.replicas))

    def _apply_state(self, partition: Partition, state: PartitionState) -> None:
        """Leader or follower as the metadata says: a follower fetches from its leader, a leader stops fetching."""
        if (partition.isr and partition.is_leader and state.leader == self.node_id
                and state.leader_epoch == partition.leader_epoch):  # while leading (not a partition just loaded)
            self._count_isr_change(partition, state.isr)  # e.g. the controller dropped a fenced follower
        role = partition.apply_state(state, self.node_id, _now_ms())
        if role is None:
            return
        for listener in self.leadership_listeners:
            listener(partition, role == "leader")
        if self.fetchers is None:
            return
        self.fetchers.remove(partition)
        if role == "follower" and state.leader >= 0:
            self.fetchers.add(state.leader, partition)

    # -- the ISR, kept by each partition's leader (Kafka's Partition.maybeExpandIsr / maybeShrinkIsr) --------

    def follower_fetched(self, partition: Partition, replica_id: int, fetch_offset: int) -> None:
        """A follower's fetch: its progress moves the high watermark, and once caught up it joins the ISR."""
        if partition.update_follower(replica_id, fetch_offset, _now_ms()):
            self._change_isr(partition, tuple(sorted({*partition.isr, replica_id})))

    def shrink_isrs(self) -> None:
        """Drop followers that fell behind for `replica.lag.time.max.ms` from the ISRs this node leads."""
        now = _now_ms()
        for partition in self.partitions.values():
            if partition.is_leader and len(partition.isr) > 1 and partition.isr_pending is None:
                lagging = partition.out_of_sync(now, self.replica_lag_time_max_ms)
                if lagging:
                    log.info("shrinking the ISR of %s-%d: %s not caught up for %d ms", partition.topic,
                             partition.index, lagging, self.replica_lag_time_max_ms)
                    self._change_isr(partition, tuple(r for r in partition.isr if r not in lagging))

    def _change_isr(self, partition: Partition, new_isr: tuple[int, ...]) -> None:
        """Ask the controller for a new ISR; one change per partition at a time (Kafka's AlterPartitionManager)."""
        if self.alter_isr is None or partition.isr_pending is not None:
            return
        partition.isr_pending = new_isr
        task = asyncio.create_task(self._send_isr(partition, new_isr))
        self._isr_updates.add(task)
        task.add_done_callback(self._isr_updates.discard)

    async def _send_isr(self, partition: Partition, new_isr: tuple[int, ...]) -> None:
        assert self.alter_isr is not None
        epoch = partition.leader_epoch
        try:
            state = await self.alter_isr(partition.topic_id, partition.index, epoch, partition.partition_epoch,
                                         list(new_isr))
        except (KafkaApiError, ControllerUnavailable) as exc:
            # Refused (a newer epoch is on its way in the metadata) or no controller: the next fetch or shrink
            # check asks again.
            log.info("ISR change of %s-%d to %s not made: %s", partition.topic, partition.index, list(new_isr),
                     getattr(exc, "message", None) or exc)
        else:
            # The controller's answer is the new state; the metadata brings the same record later. One under a
            # new leader epoch (a completed reassignment moved the leadership, or dropped a replica) waits for it.
            if (partition.leader_epoch == epoch == state.leader_epoch
                    and state.partition_epoch > partition.partition_epoch):
                self._count_isr_change(partition, state.isr)
                partition.isr = tuple(state.isr)
                partition.partition_epoch = state.partition_epoch
        finally:
            if partition.isr_pending == new_isr:
                partition.isr_pending = None
        if partition.is_leader:
            partition.maybe_advance_high_watermark()

    def _count_isr_change(self, partition: Partition, new_isr: Sequence[int]) -> None:
        """Kafka's IsrShrinksPerSec / IsrExpandsPerSec: an ISR of a partition this node leads got smaller or larger,
        by its own AlterPartition or by the controller (which drops fenced brokers)."""
        if len(new_isr) < len(partition.isr):
            self.isr_shrinks += 1
        elif len(new_isr) > len(partition.isr):
            self.isr_expands += 1

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
            self._forget(partition)

    def _stray(self, partition: Partition) -> None:
        """This node is no longer a replica of `partition` (a reassignment moved it away): it stops serving and
        fetching it, and its log is deleted (KRaft's stray replica removal). A leadership it held ends first, so
        coordinators unload what they read from it."""
        log.info("%s-%d is no longer assigned to this node: deleting its replica", partition.topic, partition.index)
        if partition.is_leader:
            for listener in self.leadership_listeners:
                listener(partition, False)
        hosted = self.partitions_by_id.get(partition.topic_id, [])
        if partition in hosted:
            hosted.remove(partition)
        self._forget(partition)

    def _forget(self, partition: Partition) -> None:
        """Stop serving and following `partition`, answer what waits on it, and delete its files off the loop."""
        del self.partitions[TopicPartition(partition.topic, partition.index)]
        partition.watchers.complete_all()
        partition.fail_acks(ErrorCode.not_leader_or_follower)
        if self.fetchers is not None:
            self.fetchers.remove(partition)
        self._delete_log(TopicPartition(partition.topic, partition.index))

    def _delete_log(self, tp: TopicPartition) -> None:
        remove = self.logs.delete(tp.topic, tp.partition)
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
            state = partition.producers
            snapshot = partition.producer_snapshot(force)
            if snapshot is None:
                continue
            try:
                await asyncio.to_thread(write_snapshot_file, partition.log.directory, *snapshot)
                if partition.producers is not state:
                    # A follower truncated meanwhile (a new state was rebuilt, and snapshots past the cut deleted):
                    # this one may describe batches that are gone, and must not be loaded after a restart.
                    await asyncio.to_thread(delete_snapshots_after, partition.log.directory, snapshot[0] - 1)
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
        """The partition if this node leads it: what clients and coordinators read and write."""
        found = self.partitions.get((topic, partition))  # type: ignore[call-overload]  # TopicPartition is a tuple
        if found is not None:
            if found.leader_id != found.local_id:  # not `is_leader`
                raise PartitionError(ErrorCode.not_leader_or_follower)
            return found
        # Created a moment ago (not led here until its log exists), or led by another broker of the cluster.
        known = self._image is not None and partition in getattr(self._image.topics.get(topic), "partitions", ())
        if TopicPartition(topic, partition) in self._opening or known:
            raise PartitionError(ErrorCode.not_leader_or_follower)
        raise PartitionError(ErrorCode.unknown_topic_or_partition)
