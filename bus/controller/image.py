"""The metadata image: the current state obtained by replaying the metadata log."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class PartitionState:
    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0


@dataclass(slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionState] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name.startswith("__")


class MetadataImage:
    """Topics by name and id plus the cluster id; `apply` is the only way it changes."""

    def __init__(self) -> None:
        self.cluster_id: str | None = None
        self.topics: dict[str, TopicImage] = {}
        self.topics_by_id: dict[uuid.UUID, TopicImage] = {}
        self.offset = 0  # records applied, the image's metadata offset
        self.next_producer_id = 0

    def apply(self, record: dict[str, Any]) -> None:
        kind = record["type"]
        if kind == "cluster":
            self.cluster_id = record["cluster_id"]
        elif kind == "topic":
            topic = TopicImage(record["name"], uuid.UUID(record["topic_id"]))
            self.topics[topic.name] = topic
            self.topics_by_id[topic.topic_id] = topic
        elif kind == "partition":
            topic = self.topics_by_id[uuid.UUID(record["topic_id"])]
            topic.partitions[record["partition"]] = PartitionState(
                partition=record["partition"],
                replicas=list(record["replicas"]),
                isr=list(record["isr"]),
                leader=record["leader"],
                leader_epoch=record.get("leader_epoch", 0),
                partition_epoch=record.get("partition_epoch", 0),
            )
        elif kind == "config":
            topic = self.topics[record["name"]]
            if record["value"] is None:
                topic.configs.pop(record["key"], None)
            else:
                topic.configs[record["key"]] = record["value"]
        elif kind == "producer_ids":
            self.next_producer_id = record["next"]
        elif kind == "remove_topic":
            removed = self.topics_by_id.pop(uuid.UUID(record["topic_id"]))
            del self.topics[removed.name]
        else:
            raise ValueError(f"unknown metadata record type {kind!r}")
        self.offset += 1
