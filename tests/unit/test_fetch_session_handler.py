"""The replica fetcher's side of KIP-227 (FetchSessionHandler): a full first fetch, then only what changed, the
forgotten partitions, and every failure starting over with a full fetch. Checked against the leader's side
(fetch_sessions.new_context) where the two must agree."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from bus.broker.fetch_session_handler import FetchSessionHandler, PartitionFetch, SessionFetch
from bus.broker.fetch_sessions import (
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSessionCache,
    ReadResult,
    new_context,
)
from bus.protocol.topic_partition import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def at(offset: int, *, log_start: int = 0, leader_epoch: int = 3, last_fetched_epoch: int = 3) -> PartitionFetch:
    return PartitionFetch(offset, log_start, 4096, leader_epoch, last_fetched_epoch)


def opened(handler: FetchSessionHandler, wanted: dict[TopicPartition, PartitionFetch],
           session_id: int = 77) -> SessionFetch:
    """A full fetch answered with `session_id` (every partition in the answer, as a full response is)."""
    fetch = handler.build(wanted)
    assert fetch.full and fetch.epoch == 0
    assert handler.handle_response(fetch, ErrorCode.none, session_id, wanted)
    return fetch


def test_a_full_fetch_then_only_changed_partitions() -> None:
    handler = FetchSessionHandler(1)
    first = opened(handler, {A0: at(10), A1: at(20), B0: at(30)})
    assert first.session_id == INVALID_SESSION_ID and first.to_forget == []
    assert first.to_send == {A0: at(10), A1: at(20), B0: at(30)}

    same = handler.build({A0: at(10), A1: at(20), B0: at(30)})
    assert (same.session_id, same.epoch, same.full) == (77, 1, False)
    assert same.to_send == {} and same.to_forget == []
    assert set(same.session) == {A0, A1, B0}
    assert handler.handle_response(same, ErrorCode.none, 77, [])  # no news: an empty answer is fine

    moved = handler.build({A0: at(15), A1: at(20), B0: at(30)})
    assert moved.epoch == 2 and moved.to_send == {A0: at(15)}
    assert handler.handle_response(moved, ErrorCode.none, 77, [A0])

    # Each of the fields Kafka compares counts as a change: log start, leader epoch, last fetched epoch.
    changed = handler.build({A0: at(15, log_start=5), A1: at(20, leader_epoch=4), B0: at(30, last_fetched_epoch=4)})
    assert changed.epoch == 3 and set(changed.to_send) == {A0, A1, B0}


def test_added_and_removed_partitions() -> None:
    handler = FetchSessionHandler(1)
    opened(handler, {A0: at(10), A1: at(20)})
    fetch = handler.build({A0: at(10), B0: at(0)})
    assert fetch.to_send == {B0: at(0)} and fetch.to_forget == [A1]
    assert set(fetch.session) == {A0, B0}
    assert handler.handle_response(fetch, ErrorCode.none, 77, [B0])
    # A1 comes back (it was held after an error): it is added again, in full.
    again = handler.build({A0: at(10), A1: at(20), B0: at(0)})
    assert again.to_send == {A1: at(20)} and again.to_forget == []


def test_session_errors_and_failures_start_over_with_a_full_fetch() -> None:
    wanted = {A0: at(10), A1: at(20)}
    # The leader no longer knows the session (it restarted): a full fetch without a session id.
    handler = FetchSessionHandler(1)
    opened(handler, wanted)
    fetch = handler.build(wanted)
    assert not handler.handle_response(fetch, ErrorCode.fetch_session_id_not_found, 0, [])
    full = handler.build(wanted)
    assert full.full and full.session_id == INVALID_SESSION_ID and full.to_send == wanted

    # A wrong epoch, or any other top-level error: a full fetch that names the old session so the leader closes it.
    for error in (ErrorCode.invalid_fetch_session_epoch, ErrorCode.unknown_server_error):
        handler = FetchSessionHandler(1)
        opened(handler, wanted)
        assert not handler.handle_response(handler.build(wanted), error, 0, [])
        full = handler.build(wanted)
        assert (full.full, full.session_id, full.epoch, full.to_send) == (True, 77, 0, wanted)

    # A connection lost with the request out.
    handler = FetchSessionHandler(1)
    opened(handler, wanted)
    handler.build({A0: at(11), A1: at(20)})
    handler.handle_error()
    full = handler.build(wanted)
    assert (full.full, full.session_id, full.to_send) == (True, 77, wanted)


def test_answers_that_do_not_fit_the_session_are_refused() -> None:
    handler = FetchSessionHandler(1)
    opened(handler, {A0: at(10)})
    fetch = handler.build({A0: at(10)})
    assert not handler.handle_response(fetch, ErrorCode.none, 77, [B0])  # a partition never asked for
    assert handler.build({A0: at(10)}).full
    opened(handler, {A0: at(10)}, session_id=78)
    fetch = handler.build({A0: at(10)})
    assert not handler.handle_response(fetch, ErrorCode.none, 99, [])  # another session's answer
    assert handler.build({A0: at(10)}).full


def test_a_leader_without_a_session_gets_full_fetches() -> None:
    """Session id 0 in the answer to a full fetch (the leader's cache is full), or to an incremental one (it
    closed the session): every fetch stays full until a session is granted."""
    handler = FetchSessionHandler(1)
    fetch = handler.build({A0: at(10)})
    assert handler.handle_response(fetch, ErrorCode.none, INVALID_SESSION_ID, [A0])
    assert handler.build({A0: at(10)}).full
    opened(handler, {A0: at(10)})
    fetch = handler.build({A0: at(10)})
    assert handler.handle_response(fetch, ErrorCode.none, INVALID_SESSION_ID, [])
    assert handler.build({A0: at(10)}).full


def _cached(fetch: SessionFetch) -> list[CachedPartition]:
    return [CachedPartition(tp.topic, None, tp.partition, f.fetch_offset, f.max_bytes, f.current_leader_epoch,
                            f.last_fetched_epoch) for tp, f in fetch.to_send.items()]


def _forgotten(fetch: SessionFetch) -> list[tuple[str, int]]:
    return [(tp.topic, tp.partition) for tp in fetch.to_forget]


def test_the_leaders_session_follows_the_handlers() -> None:
    """Requests built by the handler, fed to the leader's session code: the leader reads every session partition
    at the position the handler last sent, and the epochs agree across many fetches."""
    cache = FetchSessionCache(10)
    handler = FetchSessionHandler(1)
    wanted = {A0: at(0), A1: at(0), B0: at(0)}
    session_id = INVALID_SESSION_ID
    for step in range(1, 40):
        fetch = handler.build(wanted)
        context = new_context(cache, fetch.session_id, fetch.epoch, False, _cached(fetch), _forgotten(fetch),
                              from_follower=True)
        assert context.error == ErrorCode.none
        assert {(p.topic, p.partition): p.fetch_offset for p in context.partitions} == {
            (tp.topic, tp.partition): f.fetch_offset for tp, f in wanted.items()}
        results = [ReadResult(p, b"", ErrorCode.none, step, step, 0) for p in context.partitions]
        answered = context.select(results)
        session_id = context.session_id
        assert handler.handle_response(fetch, ErrorCode.none, session_id,
                                       [TopicPartition(r.partition.topic or "", r.partition.partition)
                                        for r in answered])
        # One partition moves per round; every third round one is forgotten and comes back the next.
        wanted = dict(wanted)
        wanted[A0] = at(step)
        if step % 3 == 0:
            del wanted[B0]
        elif B0 not in wanted:
            wanted[B0] = at(0)
    assert len(cache) == 1 and cache.get(session_id) is not None
