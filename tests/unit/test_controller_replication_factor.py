"""Until partitions are replicated across brokers, the controller places one replica per partition and
refuses more, instead of listing in-sync replicas that hold nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from bus.controller.controller import ControllerError, QuorumController, TopicSpec
from bus.controller.metadata_log import MetadataLog


def _three_brokers(tmp_path: Path) -> QuorumController:
    controller = QuorumController(MetadataLog(tmp_path), node_id=1, default_partitions=1,
                                  default_replication_factor=1)
    controller.ensure_cluster_id(lambda: "test-cluster")
    for broker in (2, 3):
        controller.register_broker(broker, [("PLAINTEXT", "127.0.0.1", 9000 + broker)], None)
    assert controller.live_brokers == [1, 2, 3]
    return controller


def test_more_than_one_replica_is_refused_not_pretended(tmp_path: Path) -> None:
    controller = _three_brokers(tmp_path)
    for spec in (TopicSpec("three", 3, 3), TopicSpec("assigned", assignments={0: [1, 2], 1: [2, 3]})):
        with pytest.raises(ControllerError, match="not supported yet") as refused:
            controller.create_topic(spec)
        assert refused.value.code == ErrorCode.invalid_replication_factor
        assert spec.name not in controller.image.topics


def test_one_replica_per_partition_round_robin_and_internal_topics_get_one(tmp_path: Path) -> None:
    controller = _three_brokers(tmp_path)
    created = controller.create_topic(TopicSpec("spread", 3, 1))
    assert created is not None
    assert {p: s.replicas for p, s in created.partitions.items()} == {0: [1], 1: [2], 2: [3]}
    internal = controller.create_internal_topic("__consumer_offsets", 2, 3, {})
    assert all(len(s.replicas) == 1 and s.isr == s.replicas for s in internal.partitions.values())
