"""One request in flight per destination: late, duplicate and unexpected responses are ignored."""

from kio.schema.errors import ErrorCode

from bus.raft.messages import Envelope, VoteResponse
from bus.raft.requests import RequestManager
from bus.raft.roles import Role
from tests.unit.raft.harness import Net


def test_request_manager_tracks_timeouts_and_backoff() -> None:
    requests = RequestManager(request_timeout_ms=100, retry_backoff_ms=10)
    assert requests.is_ready(2, 0)
    first = requests.on_sent(2, 0)
    assert not requests.is_ready(2, 50) and requests.any_in_flight(50)
    assert not requests.take_response(2, first + 1)  # not the one in flight
    assert requests.take_response(2, first) and requests.is_ready(2, 60)
    assert not requests.take_response(2, first)  # a duplicate
    second = requests.on_sent(2, 60)
    assert not requests.is_ready(2, 159) and not requests.is_ready(2, 160)  # timed out: now backing off
    assert requests.is_ready(2, 170) and not requests.take_response(2, second)  # given up on
    requests.on_failed(3, 200)
    assert not requests.is_ready(3, 205) and requests.is_ready(3, 210)


def test_duplicated_vote_response_does_not_count_twice() -> None:
    net = Net({1, 2, 3, 4, 5})
    candidate = net.nodes[1]
    requests = candidate.tick(10_000).messages
    assert candidate.role is Role.CANDIDATE
    grant = VoteResponse(ErrorCode.none, -1, candidate.epoch, True)
    reply = Envelope(requests[0].destination, 1, requests[0].correlation_id, grant)
    candidate.handle(reply, 10_001)
    candidate.handle(reply, 10_002)
    assert candidate.role is Role.CANDIDATE and len(candidate.state.granted) == 2
