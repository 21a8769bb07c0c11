"""Metadata snapshots: the image as records and back, when a node snapshots, and a controller that loads one.

The round trip covers every record type `MetadataImage.apply` knows; the policy runs on a fake clock; the
snapshot written and reloaded runs a real lone-voter RaftDriver over a real FileRaftLog on disk.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import pytest

from bus.controller.controller import QuorumController, TopicSpec
from bus.controller.image import (
    BROKER_RESOURCE,
    ImageView,
    MetadataImage,
    broker_config_record,
    difference,
    snapshot_records,
)
from bus.controller.metadata_log.entry_codec import decode_entry, encode_entry
from bus.controller.metadata_log.quorum import RaftMetadataLog
from bus.controller.metadata_log.record_log import MetadataRecord
from bus.controller.snapshot_generator import SnapshotPolicy
from bus.raft.config import QuorumConfig
from bus.raft.driver import RaftDriver
from bus.raft.file_raft_log import FileRaftLog
from bus.raft.quorum_state import FileQuorumStateStore
from bus.raft.replicated_log import LogEntry
from bus.raft.snapshots import SUFFIX

TOPIC_A = str(uuid.UUID(int=1))
TOPIC_B = str(uuid.UUID(int=2))
GONE = str(uuid.UUID(int=3))

# Every record type the image applies, in an order a controller could have written them.
HISTORY: list[MetadataRecord] = [
    {"type": "cluster", "cluster_id": "MkU3OEVBNTcwNTJENDM2Qg"},
    {"type": "broker", "id": 1, "endpoints": [["PLAINTEXT", "127.0.0.1", 9092]], "rack": "r1"},
    {"type": "broker", "id": 2, "endpoints": [["PLAINTEXT", "127.0.0.1", 9093]], "rack": None},
    {"type": "broker", "id": 3, "endpoints": [["PLAINTEXT", "127.0.0.1", 9094], ["SSL", "h", 9095]], "rack": None},
    {"type": "broker_fence", "id": 2, "fenced": True},
    {"type": "broker_shutdown", "id": 3},
    {"type": "topic", "name": "a", "topic_id": TOPIC_A},
    {"type": "config", "name": "a", "key": "cleanup.policy", "value": "compact"},
    {"type": "config", "name": "a", "key": "retention.ms", "value": "1000"},
    {"type": "config", "name": "a", "key": "retention.ms", "value": None},
    {"type": "partition", "topic_id": TOPIC_A, "partition": 0, "replicas": [1, 2], "isr": [1], "leader": 1,
     "leader_epoch": 3, "partition_epoch": 7},
    {"type": "partition", "topic_id": TOPIC_A, "partition": 1, "replicas": [3, 1, 2], "isr": [1, 2], "leader": 2,
     "leader_epoch": 1, "partition_epoch": 2, "adding_replicas": [3], "removing_replicas": [2]},
    {"type": "topic", "name": "gone", "topic_id": GONE},
    {"type": "partition", "topic_id": GONE, "partition": 0, "replicas": [1], "isr": [1], "leader": 1},
    {"type": "remove_topic", "topic_id": GONE},
    {"type": "topic", "name": "b", "topic_id": TOPIC_B},
    {"type": "partition", "topic_id": TOPIC_B, "partition": 0, "replicas": [2], "isr": [], "leader": -1,
     "leader_epoch": 4, "partition_epoch": 4},
    {"type": "producer_ids", "next": 3000},
    broker_config_record("", "log.retention.ms", "60000"),
    broker_config_record("1", "log.cleaner.threads", "2"),
    broker_config_record("1", "log.retention.ms", "1000"),
    broker_config_record("1", "log.retention.ms", None),
]


def image_of(records: list[MetadataRecord]) -> MetadataImage:
    image = MetadataImage()
    for record in records:
        image.apply(record)
    return image


def state(image: MetadataImage) -> tuple[object, ...]:
    return (image.cluster_id, image.topics, image.topics_by_id, image.brokers, image.next_producer_id,
            image.broker_configs)


def test_the_history_covers_every_record_type_the_image_applies() -> None:
    with pytest.raises(ValueError, match="unknown metadata record type"):
        MetadataImage().apply({"type": "no_such_type"})
    assert {r["type"] for r in HISTORY} == {"cluster", "broker", "broker_fence", "broker_shutdown", "topic",
                                            "config", "partition", "remove_topic", "producer_ids"}
    assert any(r.get("resource_type") == BROKER_RESOURCE for r in HISTORY)  # a dynamic broker config too


def test_an_image_rebuilt_from_its_snapshot_records_is_equal() -> None:
    original = image_of(HISTORY)
    records = list(snapshot_records(original))
    rebuilt = image_of(decode_entry(encode_entry(records)))
    assert state(rebuilt) == state(original)
    assert rebuilt.brokers[2].fenced and rebuilt.brokers[3].in_controlled_shutdown
    assert rebuilt.topics["a"].partitions[1].adding_replicas == [3]
    assert "gone" not in rebuilt.topics
    assert rebuilt.broker_configs == {"": {"log.retention.ms": "60000"}, "1": {"log.cleaner.threads": "2"}}
    assert list(snapshot_records(rebuilt)) == records  # a snapshot of a loaded snapshot is the same snapshot


def test_an_empty_image_has_an_empty_snapshot() -> None:
    assert list(snapshot_records(MetadataImage())) == []


def test_a_snapshot_is_encoded_as_an_entry_is() -> None:
    records = list(snapshot_records(image_of(HISTORY)))
    assert encode_entry(records) == json.dumps(records, separators=(",", ":"), sort_keys=True).encode()


def test_a_copy_of_the_image_stays_as_it_was_while_the_image_moves_on() -> None:
    image = image_of(HISTORY)
    copy = image.copy()
    before = list(snapshot_records(copy))
    later: list[MetadataRecord] = [
        {"type": "partition", "topic_id": TOPIC_A, "partition": 0, "replicas": [1, 2], "isr": [1, 2], "leader": 2,
         "leader_epoch": 4, "partition_epoch": 8},
        {"type": "config", "name": "a", "key": "cleanup.policy", "value": None},
        {"type": "broker_fence", "id": 1, "fenced": True},
        {"type": "remove_topic", "topic_id": TOPIC_B},
        {"type": "topic", "name": "c", "topic_id": GONE},
        {"type": "producer_ids", "next": 4000},
    ]
    for record in later:
        image.apply(record)
    assert list(snapshot_records(copy)) == before
    assert state(copy) == state(image_of(HISTORY))


class FakeClock:
    def __init__(self) -> None:
        self.now_ms = 1000.0

    def __call__(self) -> float:
        return self.now_ms


def test_the_policy_is_due_after_enough_bytes() -> None:
    policy = SnapshotPolicy(max_bytes=100, max_interval_ms=0, clock=FakeClock())
    policy.committed(99)
    assert not policy.due()
    policy.committed(1)
    assert policy.due()
    policy.snapshotted()
    assert not policy.due() and policy.new_bytes == 0


def test_the_policy_is_due_after_the_interval_only_with_a_new_entry() -> None:
    clock = FakeClock()
    policy = SnapshotPolicy(max_bytes=10**9, max_interval_ms=5000, clock=clock)
    clock.now_ms += 6000
    assert not policy.due() and policy.deadline_ms() is None  # nothing new since the start
    policy.committed(10)
    assert policy.due()
    policy.snapshotted()
    policy.committed(10)
    assert policy.deadline_ms() == clock.now_ms + 5000
    clock.now_ms += 4999
    assert not policy.due()
    clock.now_ms += 1
    assert policy.due()


def test_an_interval_of_zero_disables_the_time_rule() -> None:
    clock = FakeClock()
    policy = SnapshotPolicy(max_bytes=10**9, max_interval_ms=0, clock=clock)
    policy.committed(10)
    clock.now_ms += 10**9
    assert not policy.due() and policy.deadline_ms() is None


class LoneVoter:
    """A lone voter's controller over a real FileRaftLog: it leads at once and commits every append."""

    def __init__(self, directory: Path, policy: SnapshotPolicy, retention_bytes: int = 0) -> None:
        """`retention_bytes` 0: the history goes once a newer snapshot covers it."""
        config = QuorumConfig(voters=frozenset({1}))
        self.raft_log = FileRaftLog(directory, retention_bytes=retention_bytes)
        self.driver = RaftDriver(1, config, {1: ("127.0.0.1", 1)}, self.raft_log, FileQuorumStateStore(directory),
                                 "MkU3OEVBNTcwNTJENDM2Qg")
        self.driver.stop_callbacks.append(self.raft_log.close)
        self.log = RaftMetadataLog(self.driver, commit_timeout_s=5, snapshot_policy=policy)
        self.controller = QuorumController(self.log, 1, 1, 1)
        self.seen: list[MetadataRecord] = []
        self.controller.listeners.append(self.seen.extend)


async def until(check: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def _a_snapshot_is_written_on_the_byte_threshold_and_loaded_on_restart(directory: Path) -> None:
    node = LoneVoter(directory, SnapshotPolicy(max_bytes=600, max_interval_ms=0))
    await node.driver.start()
    for i in range(12):
        node.controller.create_topic(TopicSpec(f"t{i}", 2, 1, configs={"retention.ms": str(1000 + i)}))
        await node.log.sync()
    node.controller.delete_topic("t0")
    await node.log.sync()
    assert node.log.snapshots is not None
    await until(lambda: node.log.snapshots is not None and node.log.snapshots.written >= 2)
    snapshot = node.driver.latest_snapshot()
    assert snapshot is not None
    assert node.raft_log.start_offset() == snapshot.snapshot_id.offset > 0
    assert [p.name for p in directory.iterdir() if p.name.endswith(SUFFIX)] == [
        f"{snapshot.snapshot_id.offset:020d}-{snapshot.snapshot_id.epoch:010d}{SUFFIX}"]
    before = state(node.controller.image)
    await node.driver.stop()

    again = LoneVoter(directory, SnapshotPolicy(max_bytes=10**9, max_interval_ms=0))
    await again.driver.start()
    assert state(again.controller.image) == before
    assert "t0" not in again.controller.image.topics and again.controller.image.topics["t11"].configs == {
        "retention.ms": "1011"}
    await again.driver.stop()


def test_a_snapshot_is_written_on_the_byte_threshold_and_loaded_on_restart(tmp_path: Path) -> None:
    asyncio.run(_a_snapshot_is_written_on_the_byte_threshold_and_loaded_on_restart(tmp_path))


async def _a_restart_replays_only_what_follows_the_snapshot(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With Kafka's default retention the log keeps the history behind the snapshot: a restart loads the
    snapshot and must replay only the entries after it, never the ones it already holds a second time."""
    node = LoneVoter(directory, SnapshotPolicy(max_bytes=600, max_interval_ms=0), retention_bytes=104857600)
    await node.driver.start()
    for i in range(8):
        node.controller.create_topic(TopicSpec(f"t{i}", 2, 1))
        await node.log.sync()
    await until(lambda: node.driver.latest_snapshot() is not None)
    snapshot = node.driver.latest_snapshot()
    assert snapshot is not None and node.raft_log.start_offset() == 0  # the history is still there
    node.log.snapshot_policy.max_bytes = 10**9  # no more snapshots: what follows is only in the log
    node.controller.delete_topic("t0")
    await node.log.sync()
    before = state(node.controller.image)
    end = node.driver.latest_snapshot().snapshot_id.offset  # type: ignore[union-attr]
    await node.driver.stop()

    replayed: list[int] = []  # what the controller is handed as committed, from its very first start step on
    applied = RaftMetadataLog._committed

    def spy(log: RaftMetadataLog, entries: tuple[LogEntry, ...]) -> None:
        replayed.extend(entry.offset for entry in entries)
        applied(log, entries)

    monkeypatch.setattr(RaftMetadataLog, "_committed", spy)
    again = LoneVoter(directory, SnapshotPolicy(max_bytes=10**9, max_interval_ms=0), retention_bytes=104857600)
    await again.driver.start()
    await until(lambda: state(again.controller.image) == before)
    assert replayed and min(replayed) >= end
    await again.driver.stop()


def test_a_restart_replays_only_what_follows_the_snapshot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asyncio.run(_a_restart_replays_only_what_follows_the_snapshot(tmp_path, monkeypatch))


async def _a_snapshot_is_written_after_the_interval(directory: Path) -> None:
    node = LoneVoter(directory, SnapshotPolicy(max_bytes=10**9, max_interval_ms=200))
    await node.driver.start()
    node.controller.create_topic(TopicSpec("late", 1, 1))
    await node.log.sync()
    assert node.driver.latest_snapshot() is None
    await until(lambda: node.driver.latest_snapshot() is not None, 3.0)  # the timer fires with no new commit
    snapshot = node.driver.latest_snapshot()
    assert snapshot is not None and snapshot.snapshot_id.offset == node.driver.high_watermark
    assert "late" in image_of(decode_entry(snapshot.data)).topics
    await node.driver.stop()


def test_a_snapshot_is_written_after_the_interval(tmp_path: Path) -> None:
    asyncio.run(_a_snapshot_is_written_after_the_interval(tmp_path))


def test_loading_a_snapshot_replaces_the_image_in_place_and_tells_the_listeners_what_changed(tmp_path: Path) -> None:
    node = LoneVoter(tmp_path, SnapshotPolicy())
    controller = node.controller
    view = ImageView(controller.image, 1, lambda: [1])
    controller.load_snapshot(HISTORY)
    node.seen.clear()
    # The leader's image: topic "a" deleted, "b" unchanged, "c" new, and a broker unfenced.
    replacement = image_of([r for r in HISTORY if r.get("topic_id") != TOPIC_A and r.get("name") != "a"] + [
        {"type": "topic", "name": "c", "topic_id": GONE},
        {"type": "partition", "topic_id": GONE, "partition": 0, "replicas": [1], "isr": [1], "leader": 1},
        {"type": "config", "name": "c", "key": "retention.ms", "value": "5"},
        {"type": "broker_fence", "id": 2, "fenced": False},
    ])
    controller.load_snapshot(list(snapshot_records(replacement)))
    assert state(controller.image) == state(replacement)
    assert sorted(view.topics) == ["b", "c"] and not view.brokers[2].fenced
    assert node.seen[0] == {"type": "remove_topic", "topic_id": TOPIC_A}
    announced = {(r["type"], r.get("topic_id") or r.get("name")) for r in node.seen}
    assert {("topic", GONE), ("partition", GONE), ("config", "c")} <= announced
    assert not any(r.get("topic_id") == TOPIC_B for r in node.seen)  # unchanged: nothing to do for it
    node.raft_log.close()


def test_a_topic_changed_while_away_is_announced_with_its_new_state() -> None:
    old = image_of(HISTORY)
    moved = {"type": "partition", "topic_id": TOPIC_B, "partition": 0, "replicas": [2], "isr": [2], "leader": 2,
             "leader_epoch": 5, "partition_epoch": 5}
    new = image_of([*HISTORY, moved])
    assert difference(old, new) == [r for r in snapshot_records(new) if r.get("topic_id") == TOPIC_B
                                    or r["type"] not in ("topic", "partition", "config")
                                    or r.get("resource_type") == BROKER_RESOURCE]
    assert moved in difference(old, new)
    assert [r for r in difference(old, old) if r["type"] in ("topic", "partition", "remove_topic")
            or (r["type"] == "config" and r.get("resource_type") != BROKER_RESOURCE)] == []
    without_default = image_of([*HISTORY, broker_config_record("", "log.retention.ms", None)])
    assert broker_config_record("", "log.retention.ms", None) in difference(old, without_default)
