"""Elections: timeouts, vote granting, persistence before replies, backoff and restarts (KIP-595)."""

import random

import pytest
from kio.schema.errors import ErrorCode

from bus.raft.messages import BeginQuorumEpochRequest, Envelope, VoteRequest, VoteResponse
from bus.raft.node import RaftNode, RoleChanged
from bus.raft.quorum_state import ElectionState, MemoryQuorumStateStore, QuorumStateError
from bus.raft.replicated_log import InMemoryRaftLog, LeaderChangeMessage
from bus.raft.roles import Role
from tests.unit.raft.harness import Net, config


def _node(
    node_id: int = 1,
    voters: set[int] | None = None,
    log: InMemoryRaftLog | None = None,
    store: MemoryQuorumStateStore | None = None,
    seed: int = 0,
    now: int = 0,
) -> RaftNode:
    return RaftNode(
        node_id,
        config(voters or {1, 2, 3}),
        log or InMemoryRaftLog(),
        store or MemoryQuorumStateStore(),
        random.Random(seed),
        now,
    )


def _vote(
    node: RaftNode, candidate: int, epoch: int, last_epoch: int = 0, last_offset: int = 0, now: int = 0
) -> VoteResponse:
    step = node.handle(
        Envelope(candidate, node.node_id, 7, VoteRequest(None, epoch, candidate, last_epoch, last_offset)), now
    )
    replies = [m.body for m in step.messages if isinstance(m.body, VoteResponse)]
    assert len(replies) == 1
    return replies[0]


def test_single_voter_elects_itself_at_once_and_writes_a_leader_change() -> None:
    log = InMemoryRaftLog()
    node = _node(voters={1}, log=log)
    assert node.role is Role.LEADER and node.epoch == 1
    assert [e.record for e in log.entries()] == [LeaderChangeMessage(1, (1,), (1,))]
    assert node.high_watermark == 1  # its own vote is a majority: committed at once
    _, last = node.append(1, [b"a"], now_ms=1)
    assert last == 1 and node.high_watermark == 2


def test_election_timeout_is_randomized_between_one_and_two_timeouts() -> None:
    fired = []
    for seed in range(20):
        node = _node(seed=seed)
        for now in range(0, 201):
            node.tick(now)
            if node.role is Role.CANDIDATE:
                fired.append(now)
                break
    assert all(100 <= t < 200 for t in fired) and len(fired) == 20
    assert len(set(fired)) > 5  # not all at once: that is the point of the jitter


@pytest.mark.parametrize("voters", [{1, 2, 3}, {1, 2, 3, 4, 5}])
def test_a_quorum_elects_one_leader_who_announces_itself(voters: set[int]) -> None:
    net = Net(voters)
    leader = net.elect()
    net.advance(100)
    for node in net.nodes.values():
        assert node.epoch == leader.epoch
        assert node.role is (Role.LEADER if node is leader else Role.FOLLOWER)
        assert node.leader_id == leader.node_id
    change = net.logs[leader.node_id].entries()[0]
    assert change.record.leader_id == leader.node_id and change.epoch == leader.epoch
    assert len(change.record.granting_voters) >= len(voters) // 2 + 1


def test_vote_is_granted_only_to_a_candidate_whose_log_is_at_least_ours() -> None:
    log = InMemoryRaftLog()
    log.append_as_leader([b"a", b"b"], 2)
    log.append_as_leader([b"c"], 3)  # our end: epoch 3, offset 3
    store = MemoryQuorumStateStore()
    store.write(ElectionState(3, voters=frozenset({1, 2, 3})))
    node = _node(log=log, store=store)
    assert not _vote(node, 2, epoch=4, last_epoch=2, last_offset=9).vote_granted  # older last epoch
    assert not _vote(node, 2, epoch=5, last_epoch=3, last_offset=2).vote_granted  # same epoch, shorter
    granted = _vote(node, 2, epoch=6, last_epoch=3, last_offset=3)
    assert granted.vote_granted and granted.error_code == ErrorCode.none and granted.leader_epoch == 6
    assert node.role is Role.VOTED


def test_one_vote_per_epoch_persisted_before_the_reply() -> None:
    store = MemoryQuorumStateStore()
    node = _node(store=store)
    assert _vote(node, 2, epoch=1).vote_granted
    assert store.state == ElectionState(1, voted_id=2, voters=frozenset({1, 2, 3}))
    assert not _vote(node, 3, epoch=1).vote_granted
    assert _vote(node, 2, epoch=1).vote_granted  # the same candidate asking again gets the same answer


def test_restarted_voter_remembers_its_vote_and_never_goes_back_in_epoch() -> None:
    store, log = MemoryQuorumStateStore(), InMemoryRaftLog()
    node = _node(store=store, log=log)
    assert _vote(node, 2, epoch=4).vote_granted
    restarted = _node(store=store, log=log, seed=1)
    assert (restarted.role, restarted.epoch) == (Role.VOTED, 4)
    assert not _vote(restarted, 3, epoch=4).vote_granted
    assert _vote(restarted, 3, epoch=3).error_code == ErrorCode.fenced_leader_epoch


def test_log_epoch_newer_than_the_state_file_wins_on_restart() -> None:
    log = InMemoryRaftLog()
    log.append_as_leader([b"a"], 6)
    store = MemoryQuorumStateStore()
    store.write(ElectionState(2, voters=frozenset({1, 2, 3})))
    node = _node(store=store, log=log)
    assert (node.role, node.epoch) == (Role.UNATTACHED, 6)
    assert store.state is not None and store.state.epoch == 6


def test_restarted_leader_resigns_and_the_next_election_is_a_new_epoch() -> None:
    net = Net({1, 2, 3})
    leader = net.elect()
    epoch = leader.epoch
    net.down.add(leader.node_id)
    restarted = net.start(leader.node_id)
    assert (restarted.role, restarted.epoch) == (Role.RESIGNED, epoch)
    new_leader = net.elect()
    net.advance(200)
    assert net.leader().epoch > epoch and new_leader.epoch > epoch


def test_stored_voters_must_match_the_configuration() -> None:
    store = MemoryQuorumStateStore()
    store.write(ElectionState(1, voters=frozenset({1, 2, 4})))
    with pytest.raises(QuorumStateError, match="differ"):
        _node(store=store)


def test_vote_request_errors() -> None:
    node = _node()
    _vote(node, 2, epoch=5)
    assert _vote(node, 3, epoch=4).error_code == ErrorCode.fenced_leader_epoch
    assert _vote(node, 9, epoch=6).error_code == ErrorCode.inconsistent_voter_set  # 9 is not a voter
    assert _vote(node, 3, epoch=6, last_epoch=6).error_code == ErrorCode.invalid_request
    observer = _node(node_id=9)
    assert _vote(observer, 2, epoch=1).error_code == ErrorCode.inconsistent_voter_set
    assert observer.role is Role.UNATTACHED


def test_candidate_backs_off_exponentially_after_losing_then_tries_a_new_epoch() -> None:
    log = InMemoryRaftLog()
    node = _node(log=log, seed=3)
    requests = node.tick(250).messages
    assert node.role is Role.CANDIDATE and node.epoch == 1
    assert sorted(r.destination for r in requests) == [2, 3]
    # Both others have longer logs: they reject, so the election is lost before its timeout.
    for request in requests:
        rejection = VoteResponse(ErrorCode.none, -1, 1, False)
        node.handle(Envelope(request.destination, 1, request.correlation_id, rejection), 251)
    # The first backoff is 0 or 100 ms (RETRY_BACKOFF_BASE_MS * random(2)), well before the election timeout.
    now = 251
    while node.epoch == 1:
        now += 1
        node.tick(now)
    assert now in (251, 351)
    assert node.role is Role.CANDIDATE and node.state.retries == 2


def test_begin_quorum_epoch_makes_a_voter_follow_and_a_stale_one_is_fenced() -> None:
    node = _node()
    step = node.handle(Envelope(2, 1, 1, BeginQuorumEpochRequest(None, 2, 3)), 0)
    assert (node.role, node.epoch, node.leader_id) == (Role.FOLLOWER, 3, 2)
    assert RoleChanged(Role.FOLLOWER, 3, 2) in step.events
    step = node.handle(Envelope(3, 1, 2, BeginQuorumEpochRequest(None, 3, 2)), 0)
    assert step.messages[0].body.error_code == ErrorCode.fenced_leader_epoch


def test_follower_without_fetches_starts_an_election_after_the_fetch_timeout() -> None:
    net = Net({1, 2, 3})
    leader = net.elect()
    follower = next(n for n in net.nodes.values() if n is not leader)
    net.down.add(leader.node_id)
    start = net.now
    while follower.role is Role.FOLLOWER:
        net.advance(5)
    assert follower.role is Role.CANDIDATE
    assert 200 <= net.now - start <= 215  # fetch_timeout_ms, measured from the last successful fetch


def test_leader_steps_down_on_a_higher_epoch() -> None:
    net = Net({1, 2, 3})
    leader = net.elect()
    _vote(leader, 2, epoch=leader.epoch + 1, last_epoch=0, last_offset=0)
    assert leader.role is Role.UNATTACHED


def test_a_voter_back_from_a_pause_with_a_stale_log_cannot_stall_the_election() -> None:
    """A voter cut off while the others committed (a SIGSTOPped process) comes back as a candidate whose log is
    behind: it can never win, and each new epoch it tries must not restart the other voters' election timers
    (Kafka keeps the remaining time on the way to Unattached), or no leader is ever elected again."""
    net = Net({1, 2, 3}, election_backoff_max_ms=100)
    leader = net.elect()
    stale = next(i for i in (1, 2, 3) if i != leader.node_id)
    cut_off = lambda e: stale not in (e.source, e.destination)  # noqa: E731
    net.advance(2000, keep=cut_off)  # it has tried many epochs alone: its backoff is at its maximum
    net.append([b"committed without it"])
    net.advance(50, keep=cut_off)
    assert net.nodes[stale].role is Role.CANDIDATE and net.nodes[stale].epoch > leader.epoch
    net.pending = [e for e in net.pending if cut_off(e)]
    for _ in range(400):
        net.advance(5)
        current = net.leader()
        if current is not None and current.node_id != stale and all(
                n.leader_id == current.node_id for n in net.nodes.values()):
            break
    else:
        raise AssertionError("no leader within 2 s of the stale voter's return")
    assert net.nodes[stale].log.end_offset() == current.log.end_offset()  # it caught up from the new leader
