"""What coordinators need from the rest of the broker, as narrow interfaces (Kafka's coordinator-common).

Kafka's group and transaction coordinators never see "the broker": they are handed a
`PartitionWriter` (append to their internal topic's partitions, and read them back to load state;
the server plugs in one backed by the ReplicaManager), a view of the cluster metadata and a source
of producer ids. `bus.broker.broker` wires the real implementations in one place; unit tests pass
small fakes. Failures of the log surface as `KafkaApiError` (the partition's error code).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from typing import Protocol

from bus.controller.image import BrokerRegistration, TopicImage


class PartitionWriter(Protocol):
    """Appends to, and reads back, partitions this broker hosts (Kafka's PartitionWriter + CoordinatorLoader)."""

    def is_local(self, topic: str, partition: int) -> bool:
        """This broker hosts (leads) the partition, so a coordinator for its keys may run here."""
        ...

    def append(self, topic: str, partition: int, payload: bytes, *, transactional: bool = False) -> int:
        """Append one record batch and return its base offset.

        `transactional`: the batch carries a producer's id and epoch but no sequence (a coordinator's
        own transactional write, TxnOffsetCommit), so it skips the idempotence checks as in Kafka.
        """
        ...

    def write_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool) -> int:
        """Write a transaction's commit/abort control record (Kafka's WriteTxnMarkers); returns its offset."""
        ...

    def committed(self, topic: str, partition: int, next_offset: int) -> asyncio.Future[None] | None:
        """None when the partition's high watermark covers everything below `next_offset` (a single replica,
        or followers that already copied it), else a future set once it does; it fails with
        NOT_LEADER_OR_FOLLOWER when this node stops leading first. Coordinators answer a write only then,
        as Kafka's append theirs with acks=-1."""
        ...

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """(log start offset, log end offset): the range a loader replays.

        To the log end, not the high watermark, as Kafka's CoordinatorLoader reads: a newly elected leader's
        high watermark may still lag what the previous leader acknowledged, and its log is the one that wins.
        """
        ...

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, max_offset: int) -> bytes:
        """Whole record batches from `offset` (at least one), none at or past `max_offset`."""
        ...


class MarkerSender(Protocol):
    """Writes a transaction marker into a partition another node leads (Kafka's TransactionMarkerChannelManager)."""

    async def write(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """Return once the partition's leader has the marker replicated (or the partition no longer exists)."""
        ...


class MetadataView(Protocol):
    """The cluster as the controller's committed metadata describes it, seen from this node."""

    @property
    def node_id(self) -> int: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def topics(self) -> Mapping[str, TopicImage]: ...

    @property
    def topics_by_id(self) -> Mapping[uuid.UUID, TopicImage]: ...

    @property
    def live_brokers(self) -> Sequence[int]: ...

    @property
    def brokers(self) -> Mapping[int, BrokerRegistration]:
        """Brokers registered with the controller (a node of a quorum), with their client endpoints."""
        ...


class TopicCreator(Protocol):
    """Creates an internal topic on first use (Kafka's AutoTopicCreationManager, for coordinator topics)."""

    def create_internal_topic(self, name: str, partitions: int, replication_factor: int,
                              configs: Mapping[str, str]) -> TopicImage:
        """Create the topic if it does not exist; returns the topic as it exists afterwards."""
        ...


class ProducerIdSource(Protocol):
    """Hands out producer ids that are never reused (blocks committed by the controller first)."""

    def next_id(self) -> int: ...
