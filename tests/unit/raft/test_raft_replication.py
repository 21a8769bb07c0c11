"""Replication: pull fetches, divergence and truncation, the commit rule, long polls, snapshots, observers."""

from kio.schema.errors import ErrorCode

from bus.raft.messages import (
    DescribeQuorumRequest,
    Envelope,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    SnapshotId,
)
from bus.raft.node import Committed, HighWatermarkAdvanced, SnapshotInstalled
from bus.raft.quorum_state import ElectionState
from bus.raft.replicated_log import OffsetAndEpoch
from bus.raft.roles import Role
from tests.unit.raft.harness import Net


def _records(net: Net, node_id: int) -> list[bytes]:
    return [e.record for e in net.logs[node_id].entries() if isinstance(e.record, bytes)]


def test_followers_replicate_and_the_high_watermark_follows_a_majority() -> None:
    net = Net({1, 2, 3})
    leader = net.elect()
    last = net.append([b"a", b"b"])
    # A follower whose fetch brings nothing new long-polls; it learns the high watermark when that
    # fetch completes (at the latest after fetch_max_wait_ms, as in KafkaRaftClient).
    net.advance(60)
    for node_id, node in net.nodes.items():
        assert _records(net, node_id) == [b"a", b"b"]
        assert node.high_watermark == last + 1
    committed = [e for ev in net.events[leader.node_id] if isinstance(ev, Committed) for e in ev.entries]
    assert [e.record for e in committed][-2:] == [b"a", b"b"]


def test_high_watermark_needs_a_majority_of_voters() -> None:
    net = Net({1, 2, 3})
    leader = net.elect()
    net.advance(20)
    hw = leader.high_watermark
    others = [i for i in net.nodes if i != leader.node_id]
    net.down.update(others)
    net.append([b"lonely"])
    net.advance(100)
    assert leader.high_watermark == hw
    net.start(others[0])
    net.advance(100)
    assert leader.high_watermark == hw + 1


def test_new_leader_exposes_nothing_until_an_entry_of_its_own_epoch_is_on_a_majority() -> None:
    net = Net({1, 2, 3})
    old = net.elect()
    net.advance(20)
    # The old leader replicates "x" to one follower only, then dies before the HW covers it.
    net.append([b"x"])
    follower = next(i for i in net.nodes if i != old.node_id)
    third = next(i for i in net.nodes if i not in (old.node_id, follower))
    net.down.add(third)
    net.advance(5, keep=lambda e: e.destination != old.node_id or not isinstance(e.body, FetchRequest))
    net.down.add(old.node_id)
    assert _records(net, follower) == [b"x"]
    hw_before = net.nodes[follower].high_watermark
    # The follower wins the next epoch with the third node's vote; the third node does not fetch yet.
    net.start(third)
    while net.leader() is None:
        net.advance(5, keep=lambda e: not isinstance(e.body, FetchRequest | FetchResponse))
    new = net.leader()
    assert new is not None and new.node_id == follower
    net.advance(20, keep=lambda e: not isinstance(e.body, FetchRequest | FetchResponse))
    assert new.high_watermark == hw_before  # "x" (old epoch) is not committed by the new leader alone
    net.advance(100)
    assert new.high_watermark == net.logs[follower].end_offset()  # now its LeaderChange is on a majority
    assert net.logs[third].entries() == net.logs[follower].entries()


def test_divergent_follower_truncates_to_the_leaders_epoch_end_and_catches_up() -> None:
    net = Net({1, 2, 3})
    # Node 3 holds entries of an epoch (2) that never committed; nodes 1 and 2 moved on in epoch 3.
    for node_id in (1, 2):
        net.logs[node_id].append_as_leader([b"a"], 1)
        net.logs[node_id].append_as_leader([b"b", b"c"], 3)
        net.stores[node_id].write(ElectionState(3, voters=net.config.voters))
    net.logs[3].append_as_leader([b"a"], 1)
    net.logs[3].append_as_leader([b"stale1", b"stale2", b"stale3"], 2)
    net.stores[3].write(ElectionState(3, voters=net.config.voters))
    for node_id in (1, 2, 3):
        net.start(node_id)
    leader = net.elect()
    assert leader.node_id in (1, 2)
    net.advance(100)
    diverging = [
        e.body for e in net.delivered if isinstance(e.body, FetchResponse) and e.body.diverging_epoch.epoch >= 0
    ]
    assert diverging and diverging[0].diverging_epoch.epoch == 1 and diverging[0].diverging_epoch.end_offset == 1
    assert net.logs[3].entries() == net.logs[leader.node_id].entries()
    assert b"stale1" not in _records(net, 3)


def test_leader_long_polls_an_empty_fetch_until_data_or_max_wait() -> None:
    net = Net({1, 2, 3})
    leader = net.elect()
    net.advance(100)
    follower = next(i for i in net.nodes if i != leader.node_id)
    request = Envelope(
        follower,
        leader.node_id,
        999,
        FetchRequest(
            None,
            follower,
            50,
            leader.epoch,
            net.logs[leader.node_id].end_offset(),
            net.logs[leader.node_id].last_fetched_epoch(),
        ),
    )
    assert leader.handle(request, net.now).messages == []  # parked
    step, _ = leader.append(leader.epoch, [b"new"], net.now + 1)
    answer = [m for m in step.messages if m.correlation_id == 999]
    assert answer and [e.record for e in answer[0].body.records] == [b"new"]
    # An observer's fetch at the end moves nothing: it waits max_wait for data that does not come.
    request = Envelope(
        9,
        leader.node_id,
        1000,
        FetchRequest(None, 9, 50, leader.epoch, net.logs[leader.node_id].end_offset(), leader.epoch),
    )
    assert leader.handle(request, net.now + 2).messages == []
    assert [m for m in leader.tick(net.now + 30).messages if m.correlation_id == 1000] == []
    timed_out = [m for m in leader.tick(net.now + 52).messages if m.correlation_id == 1000]
    assert timed_out and timed_out[0].body.records == () and timed_out[0].body.error_code == ErrorCode.none


def test_fetch_errors_name_the_current_leader() -> None:
    net = Net({1, 2, 3})
    leader = net.elect()
    net.advance(50)
    follower = next(n for n in net.nodes.values() if n is not leader)
    for epoch, error in [
        (leader.epoch - 1, ErrorCode.fenced_leader_epoch),
        (leader.epoch + 1, ErrorCode.unknown_leader_epoch),
    ]:
        step = leader.handle(Envelope(9, leader.node_id, 1, FetchRequest(None, 9, 0, epoch, 0, 0)), net.now)
        assert step.messages[0].body.error_code == error
    step = follower.handle(Envelope(9, follower.node_id, 1, FetchRequest(None, 9, 0, follower.epoch, 0, 0)), net.now)
    body = step.messages[0].body
    assert body.error_code == ErrorCode.not_leader_or_follower
    assert (body.current_leader.leader_id, body.current_leader.leader_epoch) == (leader.node_id, leader.epoch)


def test_lagging_follower_fetches_the_snapshot_in_chunks_then_the_log() -> None:
    net = Net({1, 2, 3}, fetch_max_bytes=4)
    leader = net.elect()
    net.advance(20)
    lagging = next(i for i in net.nodes if i != leader.node_id)
    net.down.add(lagging)
    for i in range(10):
        net.append([f"r{i}".encode()])
        net.advance(10)
        if i == 4:  # an older snapshot, whose history the next one lets the leader's log drop
            leader.create_snapshot(leader.high_watermark, b"older")
    image = b"state-machine-image-0123456789"
    snapshot = leader.create_snapshot(leader.high_watermark, image)
    assert net.logs[leader.node_id].start_offset() == snapshot.snapshot_id.offset
    net.append([b"after"])
    net.start(lagging)
    chunks = []
    net.advance(400, keep=lambda e: not (isinstance(e.body, FetchSnapshotRequest) and chunks.append(e.body.position)))
    assert len(chunks) >= len(image) // 4  # chunked by position, max_bytes at a time
    installed = [ev for ev in net.events[lagging] if isinstance(ev, SnapshotInstalled)]
    assert installed and installed[0].snapshot.data == image
    assert net.logs[lagging].start_offset() == snapshot.snapshot_id.offset
    assert _records(net, lagging) == [b"after"]
    assert net.nodes[lagging].high_watermark == net.logs[leader.node_id].end_offset()


def test_fetch_snapshot_errors() -> None:
    net = Net({1, 2, 3})
    leader = net.elect()
    net.append([b"a"])
    net.advance(50)
    snapshot = leader.create_snapshot(leader.high_watermark, b"img")
    wanted = SnapshotId(snapshot.snapshot_id.offset, snapshot.snapshot_id.epoch)

    def ask(snapshot_id: SnapshotId, position: int) -> FetchSnapshotResponse:
        request = FetchSnapshotRequest(None, 2, 100, leader.epoch, snapshot_id, position)
        body = leader.handle(Envelope(2, leader.node_id, 5, request), net.now).messages[0].body
        assert isinstance(body, FetchSnapshotResponse)
        return body

    assert ask(SnapshotId(1, 1), 0).error_code == ErrorCode.snapshot_not_found
    assert ask(wanted, 3).error_code == ErrorCode.position_out_of_range
    ok = ask(wanted, 1)
    assert (ok.error_code, ok.size, ok.position, ok.unaligned_records) == (ErrorCode.none, 3, 1, b"mg")


def test_snapshot_must_be_committed() -> None:
    net = Net({1})
    leader = net.leader()
    assert leader is not None
    try:
        leader.create_snapshot(leader.high_watermark + 1, b"x")
    except ValueError as exc:
        assert "high watermark" in str(exc)
    else:
        raise AssertionError("a snapshot past the high watermark was accepted")


def test_observer_discovers_the_leader_fetches_but_never_votes_or_counts() -> None:
    net = Net({1, 2, 3}, observers={9})
    leader = net.elect()
    net.append([b"a"])
    net.advance(300)
    observer = net.nodes[9]
    assert (observer.role, observer.leader_id) == (Role.FOLLOWER, leader.node_id)
    assert _records(net, 9) == [b"a"] and observer.high_watermark == leader.high_watermark
    # With both other voters down the observer alone cannot move the high watermark.
    net.down.update(i for i in (1, 2, 3) if i != leader.node_id)
    hw = leader.high_watermark
    net.append([b"b"])
    net.advance(150)
    assert _records(net, 9) == [b"a", b"b"] and leader.high_watermark == hw
    assert all(ev.role not in (Role.CANDIDATE, Role.LEADER) for ev in net.events[9] if hasattr(ev, "role"))


def test_describe_quorum_reports_voters_and_observers() -> None:
    net = Net({1, 2, 3}, observers={9})
    leader = net.elect()
    net.append([b"a", b"b"])
    net.advance(300)
    reply = leader.handle(Envelope(50, leader.node_id, 1, DescribeQuorumRequest()), net.now).messages[0].body
    assert (reply.error_code, reply.leader_id, reply.leader_epoch) == (ErrorCode.none, leader.node_id, leader.epoch)
    assert reply.high_watermark == leader.high_watermark == net.logs[leader.node_id].end_offset()
    assert [r.replica_id for r in reply.current_voters] == [1, 2, 3]
    assert [r.replica_id for r in reply.observers] == [9]
    for replica in reply.current_voters + reply.observers:
        assert replica.log_end_offset == leader.high_watermark
        assert 0 <= replica.last_caught_up_timestamp <= replica.last_fetch_timestamp <= net.now
    follower = next(n for n in net.nodes.values() if n.role is Role.FOLLOWER)
    answer = follower.handle(Envelope(50, follower.node_id, 1, DescribeQuorumRequest()), net.now).messages[0].body
    assert answer.error_code == ErrorCode.not_leader_or_follower


def test_high_watermark_events_are_monotonic() -> None:
    net = Net({1, 2, 3})
    net.elect()
    for i in range(5):
        net.append([bytes([i])])
        net.advance(20)
    for events in net.events.values():
        marks = [ev.high_watermark for ev in events if isinstance(ev, HighWatermarkAdvanced)]
        assert marks == sorted(set(marks))
    assert OffsetAndEpoch(1, 5) < OffsetAndEpoch(2, 0)  # logs compare by epoch first
