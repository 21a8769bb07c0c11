"""The leader's fetch session cache when full (Kafka's FetchSessionCache.tryEvict): followers' sessions are
privileged, so consumers coming and going never cost replication its incremental fetches."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from bus.broker.fetch_sessions import CachedPartition, FetchSessionCache, ReadResult, new_context


class Clock:
    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


def parts(count: int) -> list[CachedPartition]:
    return [CachedPartition("t", None, i, 0, 1024, -1) for i in range(count)]


def test_a_consumer_never_evicts_a_followers_session() -> None:
    clock = Clock()
    cache = FetchSessionCache(2, eviction_ms=120_000, now_ms=clock)
    followers = [cache.maybe_create(parts(1), False, privileged=True) for _ in range(2)]
    assert all(followers)
    clock.ms = 60_000
    assert cache.maybe_create(parts(500), False) is None  # bigger, but a consumer's
    assert len(cache) == 2 and all(cache.get(s.id) is s for s in followers if s is not None)


def test_a_follower_evicts_a_consumers_session_of_any_size() -> None:
    clock = Clock()
    cache = FetchSessionCache(2, now_ms=clock)
    consumer = cache.maybe_create(parts(100), False)
    follower = cache.maybe_create(parts(3), False, privileged=True)
    assert consumer is not None and follower is not None
    replacement = cache.maybe_create(parts(1), False, privileged=True)
    assert replacement is not None
    assert cache.get(consumer.id) is None and cache.get(follower.id) is follower


def test_consumers_evict_smaller_consumers_and_idle_sessions_go_first() -> None:
    clock = Clock()
    cache = FetchSessionCache(2, eviction_ms=1000, now_ms=clock)
    follower = cache.maybe_create(parts(50), False, privileged=True)
    small = cache.maybe_create(parts(2), False)
    assert follower is not None and small is not None
    assert cache.maybe_create(parts(1), False) is None  # smaller than every evictable session
    bigger = cache.maybe_create(parts(3), False)
    assert bigger is not None and cache.get(small.id) is None and cache.get(follower.id) is follower
    # A follower that stopped fetching (idle past the eviction time) is evicted like any session.
    clock.ms = 1500
    cache.touch(bigger)
    assert cache.maybe_create(parts(1), False) is not None
    assert cache.get(follower.id) is None


def test_a_diverging_epoch_is_answered_like_an_error() -> None:
    """Kafka's maybeUpdateResponseData: a partition answered a diverging epoch is in the response, and once the
    follower truncated (the divergence gone) it is sent again with the high watermark it did not apply."""
    cache = FetchSessionCache(2)
    wanted = CachedPartition("t", None, 0, 8, 1024, 3, last_fetched_epoch=3)
    full = new_context(cache, 0, 0, False, [wanted], [], from_follower=True)
    diverged = ReadResult(wanted, b"", ErrorCode.none, 5, 5, 0, diverging=(3, 5))
    assert full.select([diverged]) == [diverged]
    session = full.session
    assert session is not None
    truncated = CachedPartition("t", None, 0, 5, 1024, 3, last_fetched_epoch=3)
    incremental = new_context(cache, session.id, session.epoch, False, [truncated], [])
    cached = incremental.partitions[0]
    again = ReadResult(cached, b"", ErrorCode.none, 5, 5, 0)
    assert incremental.select([again]) == [again]  # the same high watermark, sent again
    idle = new_context(cache, session.id, session.epoch, False, [], [])
    assert idle.select([ReadResult(cached, b"", ErrorCode.none, 5, 5, 0)]) == []
