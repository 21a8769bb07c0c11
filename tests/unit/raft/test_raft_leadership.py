"""Leaving leadership: graceful resignation with EndQuorumEpoch, check quorum, and restarts over the real file."""

import random
from pathlib import Path

from kio.schema.errors import ErrorCode

from bus.raft.messages import EndQuorumEpochRequest, Envelope, FetchRequest, FetchResponse
from bus.raft.node import NotLeaderError, RaftNode
from bus.raft.quorum_state import FileQuorumStateStore
from bus.raft.replicated_log import InMemoryRaftLog
from bus.raft.roles import Role
from tests.unit.raft.harness import Net, config


def test_resigning_leader_names_the_most_caught_up_voter_who_runs_first() -> None:
    net = Net({1, 2, 3, 4, 5})
    leader = net.elect()
    net.advance(100)
    behind = [i for i in net.nodes if i != leader.node_id][:2]
    net.down.update(behind)
    net.append([b"a", b"b"])
    net.advance(20)
    net.down.difference_update(behind)
    epoch = leader.epoch
    net.absorb(leader.node_id, leader.resign(epoch, net.now))
    assert leader.role is Role.RESIGNED
    ends = [e.body for e in net.pending if isinstance(e.body, EndQuorumEpochRequest)]
    assert len(ends) == 4 and all(e.leader_epoch == epoch for e in ends)
    successors = ends[0].preferred_successors
    caught_up = [i for i in successors if i not in behind]
    assert list(successors[:2]) == caught_up  # most caught-up first
    with_no_backoff = successors[0]
    net.deliver(lambda e: isinstance(e.body, EndQuorumEpochRequest))
    net.advance(5)
    assert net.nodes[with_no_backoff].role in (Role.CANDIDATE, Role.LEADER)
    assert all(net.nodes[i].role is Role.FOLLOWER for i in successors[1:])
    new = net.elect()
    assert new.node_id == with_no_backoff and new.epoch == epoch + 1


def test_end_quorum_epoch_backoff_grows_with_the_position_among_successors() -> None:
    net = Net({1, 2, 3, 4, 5}, election_backoff_max_ms=80)
    leader = net.elect()
    net.advance(50)
    deadlines = {}
    successors = tuple(i for i in sorted(net.nodes) if i != leader.node_id)
    request = EndQuorumEpochRequest(None, leader.node_id, leader.epoch, successors)
    for position, voter in enumerate(successors):
        step = net.nodes[voter].handle(Envelope(leader.node_id, voter, 77, request), net.now)
        assert [m.body.error_code for m in step.messages if m.correlation_id == 77] == [ErrorCode.none]
        state = net.nodes[voter].state
        deadlines[position] = state.fetch_deadline - net.now if state.role is Role.FOLLOWER else state.role
    # Kafka's strict exponential backoff: none for the first (a candidate at once), then max >> (n-1),
    # doubling with the position, capped at the max.
    assert deadlines == {0: Role.CANDIDATE, 1: 10, 2: 20, 3: 40}


def test_only_the_leader_of_the_epoch_may_append_or_resign() -> None:
    net = Net({1, 2, 3})
    leader = net.elect()
    follower = next(n for n in net.nodes.values() if n is not leader)
    for call in (
        lambda: follower.append(leader.epoch, [b"x"], net.now),
        lambda: leader.append(leader.epoch - 1, [b"x"], net.now),
        lambda: follower.resign(leader.epoch, net.now),
    ):
        try:
            call()
        except NotLeaderError:
            continue
        raise AssertionError("accepted")


def test_leader_cut_off_from_a_majority_resigns_after_the_check_quorum_timeout() -> None:
    net = Net({1, 2, 3})
    leader = net.elect()
    net.advance(100)
    start = net.now
    isolated = leader.node_id
    cut = lambda e: isolated not in (e.source, e.destination)  # noqa: E731
    while leader.role is Role.LEADER:
        net.advance(5, keep=cut)
    # 1.5 x controller.quorum.fetch.timeout.ms after the last fetch (long polls arrive at least every 50 ms).
    assert 250 <= net.now - start <= 305
    assert leader.role is Role.RESIGNED


def test_parked_fetches_are_answered_when_the_leader_steps_down() -> None:
    net = Net({1, 2, 3})
    leader = net.elect()
    net.advance(100)
    end = net.logs[leader.node_id].end_offset()
    request = FetchRequest(None, 9, 500, leader.epoch, end, leader.epoch)
    assert leader.handle(Envelope(9, leader.node_id, 42, request), net.now).messages == []
    step = leader.resign(leader.epoch, net.now)
    answers = [m.body for m in step.messages if m.correlation_id == 42]
    assert len(answers) == 1 and isinstance(answers[0], FetchResponse)
    assert answers[0].error_code == ErrorCode.not_leader_or_follower


def test_restart_over_the_quorum_state_file(tmp_path: Path) -> None:
    log = InMemoryRaftLog()
    cfg = config({1})
    node = RaftNode(1, cfg, log, FileQuorumStateStore(tmp_path), random.Random(0), 0)
    assert (node.role, node.epoch) == (Role.LEADER, 1)
    again = RaftNode(1, cfg, log, FileQuorumStateStore(tmp_path), random.Random(1), 10)
    # A restarted leader never resumes its epoch: it leads a new one (the only voter needs no votes).
    assert (again.role, again.epoch) == (Role.LEADER, 2)
    assert FileQuorumStateStore(tmp_path).read().leader_id == 1
