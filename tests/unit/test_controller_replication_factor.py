"""Replica placement by the controller: any replication factor the registered, unfenced brokers can hold, spread
as Kafka's rack-unaware assignment spreads it; internal topics get their configured factor in a cluster (capped by
the voters when they are the brokers) once enough brokers are up, and one replica on a lone node."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from bus.controller.controller import ControllerError, QuorumController, TopicSpec
from bus.controller.metadata_log.local_file import MetadataLog


def controller_of(tmp_path: Path, brokers: int = 3, quorum_voters: int = 1) -> QuorumController:
    """The real controller over the local metadata log, node 1, with brokers 2.. registered."""
    controller = QuorumController(MetadataLog(tmp_path), node_id=1, default_partitions=1,
                                  default_replication_factor=1, quorum_voters=quorum_voters)
    controller.ensure_cluster_id(lambda: "test-cluster")
    for broker in range(2, brokers + 1):
        controller.register_broker(broker, [("PLAINTEXT", "127.0.0.1", 9000 + broker)], None)
    assert controller.live_brokers == list(range(1, brokers + 1))
    return controller


def test_rf3_six_partitions_every_broker_leads_two_and_holds_all(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    created = controller.create_topic(TopicSpec("spread", 6, 3))
    assert created is not None
    states = [created.partitions[p] for p in range(6)]
    assert all(sorted(s.replicas) == [1, 2, 3] and s.isr == s.replicas for s in states)
    assert Counter(s.leader for s in states) == {1: 2, 2: 2, 3: 2}
    assert all(s.leader == s.replicas[0] and (s.leader_epoch, s.partition_epoch) == (0, 0) for s in states)
    # Committed: the image the brokers read has it, with the same states.
    assert controller.image.topics["spread"].partitions == created.partitions


def test_leaders_of_many_single_partition_topics_spread_over_the_brokers(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    leaders: Counter[int] = Counter()
    for i in range(60):
        created = controller.create_topic(TopicSpec(f"t{i}", 1, 2))
        assert created is not None
        leaders[created.partitions[0].leader] += 1
    assert set(leaders) == {1, 2, 3}  # a random start per topic, as Kafka's placement has


def test_more_replicas_than_brokers_is_refused(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    with pytest.raises(ControllerError, match="only 3 broker") as refused:
        controller.create_topic(TopicSpec("four", 1, 4))
    assert refused.value.code == ErrorCode.invalid_replication_factor
    assert "four" not in controller.image.topics


def test_an_explicit_assignment_may_name_any_unfenced_registered_broker(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    created = controller.create_topic(TopicSpec("assigned", assignments={0: [3, 1], 1: [2, 3]}))
    assert created is not None
    assert {p: (s.replicas, s.isr, s.leader) for p, s in created.partitions.items()} == {
        0: ([3, 1], [3, 1], 3), 1: ([2, 3], [2, 3], 2)}
    with pytest.raises(ControllerError, match=r"not registered, fenced or shutting down: \[7\]") as refused:
        controller.create_topic(TopicSpec("unknown", assignments={0: [1, 7]}))
    assert refused.value.code == ErrorCode.invalid_replica_assignment


def test_new_partitions_keep_the_topics_replication_factor(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    controller.create_topic(TopicSpec("growing", 2, 3))
    controller.create_partitions("growing", 5, None)
    states = controller.image.topics["growing"].partitions
    assert sorted(states) == [0, 1, 2, 3, 4]
    assert all(sorted(s.replicas) == [1, 2, 3] and s.isr == s.replicas for s in states.values())
    assert Counter(s.leader for s in states.values()).most_common(1)[0][1] == 2  # still spread
    controller.create_partitions("growing", 6, [[2, 1, 3]])
    assert controller.image.topics["growing"].partitions[5].replicas == [2, 1, 3]
    with pytest.raises(ControllerError, match="Inconsistent replication factor") as refused:
        controller.create_partitions("growing", 7, [[2, 1]])
    assert refused.value.code == ErrorCode.invalid_replica_assignment


def test_a_lone_node_gives_internal_topics_one_replica(tmp_path: Path) -> None:
    controller = controller_of(tmp_path, brokers=3, quorum_voters=1)
    internal = controller.create_internal_topic("__consumer_offsets", 4, 3, {})
    assert all(len(s.replicas) == 1 and s.isr == s.replicas for s in internal.partitions.values())


def test_in_a_cluster_internal_topics_wait_for_enough_brokers(tmp_path: Path) -> None:
    """Configured factor 3, capped by the 3 voters: refused while two brokers are up, created with three."""
    controller = controller_of(tmp_path, brokers=2, quorum_voters=3)
    with pytest.raises(ControllerError, match="only 2 broker") as refused:
        controller.create_internal_topic("__consumer_offsets", 3, 3, {})
    assert refused.value.code == ErrorCode.invalid_replication_factor
    assert "__consumer_offsets" not in controller.image.topics
    controller.register_broker(3, [("PLAINTEXT", "127.0.0.1", 9003)], None)
    internal = controller.create_internal_topic("__consumer_offsets", 3, 5, {})  # 5 configured: capped at 3
    assert all(sorted(s.replicas) == [1, 2, 3] for s in internal.partitions.values())


def test_with_separate_roles_internal_topics_get_their_configured_factor(tmp_path: Path) -> None:
    """A lone controller-only voter says nothing about how many brokers there are: three brokers, factor 3."""
    controller = QuorumController(MetadataLog(tmp_path), node_id=1, default_partitions=1,
                                  default_replication_factor=1, quorum_voters=1, broker=False)
    controller.ensure_cluster_id(lambda: "test-cluster")
    for broker in (2, 3):
        controller.register_broker(broker, [("PLAINTEXT", "127.0.0.1", 9000 + broker)], None)
    with pytest.raises(ControllerError, match="only 2 broker"):
        controller.create_internal_topic("__consumer_offsets", 3, 3, {})
    controller.register_broker(4, [("PLAINTEXT", "127.0.0.1", 9004)], None)
    internal = controller.create_internal_topic("__consumer_offsets", 3, 3, {})
    assert all(sorted(s.replicas) == [2, 3, 4] for s in internal.partitions.values())


def test_a_node_without_a_quorum_gives_internal_topics_one_replica(tmp_path: Path) -> None:
    """No `controller.quorum.voters` at all (quorum_voters=0): still a lone node, never a factor of 0."""
    controller = controller_of(tmp_path, brokers=1, quorum_voters=0)
    internal = controller.create_internal_topic("__consumer_offsets", 2, 3, {})
    assert all(s.replicas == [1] for s in internal.partitions.values())
