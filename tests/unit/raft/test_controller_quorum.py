"""QuorumControllers over RaftMetadataLogs on three real RaftDrivers (localhost sockets, one event loop).

The order KRaft keeps: the active controller validates against what is committed plus what it has appended, the
brokers' image changes only when an entry commits, every node applies the same records in offset order, and a
change the leader cannot commit answers NOT_CONTROLLER rather than a false success.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from bus.broker.broker import Broker
from bus.broker.broker_quorum import quorum_cluster_id
from bus.config.broker import load_broker_config
from bus.config.definitions import ConfigError
from bus.controller.controller import ControllerError, QuorumController, TopicSpec
from bus.controller.metadata_log.local_file import MetadataLog
from bus.controller.metadata_log.quorum import RaftMetadataLog, decode_entry
from bus.controller.metadata_log.record_log import MetadataRecord
from tests.unit.raft.test_raft_driver import Cluster, in_loop


class Nodes:
    """A controller per driver of a raft test cluster, with the records each node's listeners were given."""

    def __init__(self, raft: Cluster) -> None:
        self.raft = raft
        self.controllers: dict[int, QuorumController] = {}
        self.applied: dict[int, list[MetadataRecord]] = {}
        for node_id, driver in raft.drivers.items():
            controller = QuorumController(RaftMetadataLog(driver, commit_timeout_s=5), node_id, 1, 1)
            self.applied[node_id] = []
            controller.listeners.append(self.applied[node_id].extend)
            self.controllers[node_id] = controller

    async def active(self, timeout_s: float = 5.0) -> QuorumController:
        leader = await self.raft.wait_for_leader(timeout_s)
        await until(lambda: self.controllers[leader.node_id].active or None, timeout_s)
        return self.controllers[leader.node_id]


async def until(check: Callable[[], object], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


@asynccontextmanager
async def controllers() -> AsyncIterator[Nodes]:
    raft = Cluster(3)
    await raft.start()  # the drivers' start commits nothing with three voters: no record is missed below
    try:
        yield Nodes(raft)
    finally:
        await raft.stop()


@in_loop
async def test_the_image_changes_on_commit_and_every_node_applies_the_same_records_in_order() -> None:
    async with controllers() as nodes:
        active = await nodes.active()
        for other in nodes.controllers.values():
            if other is not active:
                assert not other.active
                with pytest.raises(ControllerError) as refused:
                    other.create_topic(TopicSpec("elsewhere", 1, 1))
                assert refused.value.code is ErrorCode.not_controller

        created = active.create_topic(TopicSpec("a", 2, 1))
        assert created is not None and sorted(created.partitions) == [0, 1]
        # Appended, not committed: the brokers' image does not have it yet, the controller's working view does.
        assert "a" in active.working.topics and "a" not in active.image.topics
        with pytest.raises(ControllerError) as duplicate:
            active.create_topic(TopicSpec("a", 1, 1))  # validated against what is pending
        assert duplicate.value.code is ErrorCode.topic_already_exists
        active.create_topic(TopicSpec("b", 1, 1))
        active.alter_topic_configs("a", {"retention.ms": "1000"}, replace=False)
        await active.log.sync()

        assert active.image.topics["a"].configs == {"retention.ms": "1000"} and "b" in active.image.topics
        for node_id, controller in nodes.controllers.items():
            await until(lambda c=controller: "b" in c.image.topics and c.image.topics["a"].configs, 5)
            assert [(r["type"], r.get("name")) for r in nodes.applied[node_id]] == [
                ("topic", "a"), ("partition", None), ("partition", None), ("topic", "b"), ("partition", None),
                ("config", "a")]
            assert controller.image.topics["a"].topic_id == active.image.topics["a"].topic_id


@in_loop
async def test_a_change_the_leader_cannot_commit_answers_not_controller_and_is_dropped() -> None:
    async with controllers() as nodes:
        active = await nodes.active()
        for node_id, driver in nodes.raft.drivers.items():
            if node_id != active.node_id:
                await driver.stop()  # the leader is cut off from its majority
        active.create_topic(TopicSpec("lost", 1, 1))  # still active: appended, never committed
        with pytest.raises(ControllerError) as failed:
            await active.log.sync()  # the leader resigns once it has not heard from a majority for 1.5 fetch timeouts
        assert failed.value.code is ErrorCode.not_controller
        assert not active.active
        assert "lost" not in active.image.topics and "lost" not in active.working.topics
        assert not any(r.get("name") == "lost" for r in nodes.applied[active.node_id])


@in_loop
async def test_a_new_active_controller_has_every_committed_change_and_validates_against_it() -> None:
    async with controllers() as nodes:
        first = await nodes.active()
        first.create_topic(TopicSpec("kept", 1, 1))
        await first.log.sync()
        await nodes.raft.drivers[first.node_id].stop()  # resigns: another voter takes over
        await until(lambda: any(c.active for c in nodes.controllers.values() if c is not first), 5)
        second = next(c for c in nodes.controllers.values() if c is not first and c.active)
        assert "kept" in second.image.topics and "kept" in second.working.topics
        with pytest.raises(ControllerError) as duplicate:
            second.create_topic(TopicSpec("kept", 1, 1))
        assert duplicate.value.code is ErrorCode.topic_already_exists
        second.create_topic(TopicSpec("after", 1, 1))
        await second.log.sync()
        assert sorted(second.image.topics) == ["after", "kept"]


def test_a_cluster_of_several_voters_requires_its_cluster_id(tmp_path: Path) -> None:
    settings = {"node.id": "1", "process.roles": "broker,controller", "controller.listener.names": "CONTROLLER",
                "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0", "log.dirs": str(tmp_path),
                "controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095"}
    with pytest.raises(ConfigError, match=r"cluster\.id is required when controller\.quorum\.voters names more than"):
        quorum_cluster_id(load_broker_config(settings))
    assert quorum_cluster_id(load_broker_config({**settings, "cluster.id": "MkU3OEVBNTcwNTJENDM2Qg"})) == \
        "MkU3OEVBNTcwNTJENDM2Qg"
    # A lone voter keeps the id its storage was formatted with, as a single node always did.
    lone = {**settings, "controller.quorum.voters": "1@127.0.0.1:9093"}
    (tmp_path / "meta.properties").write_text("cluster.id=kept-id\nnode.id=1\nversion=1\n")
    assert quorum_cluster_id(load_broker_config(lone)) == "kept-id"


def test_a_lone_voter_imports_the_metadata_log_it_kept_before_the_quorum_carried_it(tmp_path: Path) -> None:
    """Upgrading a single node: the topics in `__cluster_metadata-0/metadata.log` move into the quorum's log once."""
    data = tmp_path / "data"
    legacy = MetadataLog(data)
    topic_id = str(uuid.uuid4())
    legacy.append([{"type": "cluster", "cluster_id": "legacy-cluster"},
                   {"type": "topic", "name": "legacy", "topic_id": topic_id},
                   {"type": "partition", "topic_id": topic_id, "partition": 0, "replicas": [1], "isr": [1],
                    "leader": 1, "leader_epoch": 0}])
    legacy.close()
    (data / "meta.properties").write_text("cluster.id=legacy-cluster\nnode.id=1\nversion=1\n")
    config = load_broker_config({
        "node.id": "1", "process.roles": "broker,controller", "controller.listener.names": "CONTROLLER",
        "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0", "log.dirs": str(data),
        "controller.quorum.voters": "1@127.0.0.1:1", "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1"})
    for _ in range(2):  # the second start reads it from the quorum's log and imports nothing again
        broker = Broker(config)
        try:
            assert broker.cluster_id == "legacy-cluster"
            assert str(broker.controller.image.topics["legacy"].topic_id) == topic_id
            assert broker.raft is not None
            stored = [record for entry in broker.raft.node.log.read(0, 1 << 20) if isinstance(entry.record, bytes)
                      for record in decode_entry(entry.record)]
            assert [r["type"] for r in stored].count("cluster") == 1
            assert [r.get("name") for r in stored].count("legacy") == 1
        finally:
            broker.logs.close()
            broker.metadata_log.close()
    assert not (data / "__cluster_metadata-0" / "metadata.log").exists()
    assert (data / "__cluster_metadata-0" / "metadata.log.imported").exists()
