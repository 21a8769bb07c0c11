"""Kafka's IsrShrinksPerSec / IsrExpandsPerSec on the leader: counted whatever changed the ISR, the leader's own
AlterPartition or the controller (which drops a fenced broker from every ISR). CI found the second path uncounted:
a dead follower showed as under-replicated on the leader with no ISR shrink."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

from bus.broker.replica_manager import ReplicaManager
from bus.controller.image import MetadataImage, PartitionState, TopicImage
from bus.log.config import LogConfig
from bus.log.manager import LogManager


def test_an_isr_the_controller_shrinks_and_grows_is_counted_on_the_leader(tmp_path: Path) -> None:
    replicas = ReplicaManager(1, LogManager([tmp_path], LogConfig()), {})
    image = MetadataImage()
    state = PartitionState(0, [1, 2, 3], [1, 2, 3], 1, leader_epoch=1, partition_epoch=1)
    topic = TopicImage("hits", uuid.uuid4(), {0: state})
    image.topics["hits"] = topic
    image.topics_by_id[topic.topic_id] = topic
    replicas.load(image)
    partition = replicas.get("hits", 0)
    assert partition.is_leader and replicas.isr_shrinks == replicas.isr_expands == 0

    replicas._apply_state(partition, replace(state, isr=[1, 2], partition_epoch=2))  # broker 3 fenced
    assert (replicas.isr_shrinks, replicas.isr_expands) == (1, 0)
    replicas._apply_state(partition, replace(state, isr=[1, 2], partition_epoch=2))  # the same record again
    assert (replicas.isr_shrinks, replicas.isr_expands) == (1, 0)
    replicas._apply_state(partition, replace(state, isr=[1, 2, 3], partition_epoch=3))  # caught up again
    assert (replicas.isr_shrinks, replicas.isr_expands) == (1, 1)
