"""Incremental fetch sessions (KIP-227), after Kafka's FetchSession, FetchSessionCache and FetchManager.

A consumer fetching many partitions opens a session with a full fetch (session id 0, epoch 0); the broker
remembers the partitions and what it last told the client about each (high watermark, last stable offset,
log start offset). Later fetches name the session and its next epoch and carry only the partitions whose
fetch position changed plus those to forget; the response carries only partitions with news (records, an
error, a moved offset). Epoch -1 closes a session. A session id the cache does not hold answers
FETCH_SESSION_ID_NOT_FOUND and a wrong epoch INVALID_FETCH_SESSION_EPOCH; the client then starts over with
a full fetch, which is also what it does after a broker restart (sessions live in memory only).

The cache holds `max.incremental.fetch.session.cache.slots` sessions. When full, a new session may evict
the least recently used one if it was idle longer than the eviction time (Kafka's 120 s), else the
smallest session if the new one has more partitions; otherwise the fetch is answered without a session.
Followers' sessions are privileged, as in Kafka: a consumer's session never evicts one (only idleness
does), and a follower's evicts any consumer's, so replication keeps its cheap incremental fetches however
many consumers come and go.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_MS = 120_000  # Kafka's min.incremental.fetch.session.eviction.ms
_MAX_ID = 2**31 - 1

PartitionKey = tuple[str | uuid.UUID | None, int]


@dataclass(slots=True)
class CachedPartition:
    """A partition of a fetch: what the client asks (position, limits) and what it was last told."""

    topic: str | None  # None: a topic id this broker does not know
    topic_id: uuid.UUID | None
    partition: int
    fetch_offset: int
    max_bytes: int
    leader_epoch: int
    last_fetched_epoch: int = -1  # v12+: the epoch of the fetcher's last batch, checked for divergence
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def key(self, uses_topic_ids: bool) -> PartitionKey:
        return (self.topic_id if uses_topic_ids else self.topic), self.partition

    def update_request(self, other: CachedPartition) -> None:
        self.fetch_offset = other.fetch_offset
        self.max_bytes = other.max_bytes
        self.leader_epoch = other.leader_epoch
        self.last_fetched_epoch = other.last_fetched_epoch
        self.topic = other.topic

    def must_respond(self, read: ReadResult) -> bool:
        """Whether an incremental response must carry this partition (Kafka's maybeUpdateResponseData), noting
        what the client is told. The last stable offset counts too, for read_committed consumers."""
        told = (read.high_watermark, read.last_stable_offset, read.log_start_offset)
        changed = told != (self.high_watermark, self.last_stable_offset, self.log_start_offset)
        self.high_watermark, self.last_stable_offset, self.log_start_offset = told
        news = read.error != ErrorCode.none or read.diverging is not None
        if news:
            # Repeated until it clears, then the state is sent again: a follower that truncated after a diverging
            # epoch learns the high watermark it did not apply with it.
            self.high_watermark = -1
        return news or len(read.records) > 0 or changed


class ReadResult(NamedTuple):
    """What one read of a fetch's partition found: its response entry's content, which a session compares with
    what the client was last told."""

    partition: CachedPartition
    records: bytes
    error: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list[Any] | None = None  # AbortedTransaction entries, for read_committed fetches
    diverging: tuple[int, int] | None = None  # (epoch, end offset) where the fetcher's log leaves ours (KIP-320)


class FetchSession:
    __slots__ = ("epoch", "id", "last_used_ms", "partitions", "privileged", "uses_topic_ids")

    def __init__(self, session_id: int, partitions: Iterable[CachedPartition], uses_topic_ids: bool,
                 now_ms: int, *, privileged: bool = False) -> None:
        self.id = session_id
        self.privileged = privileged  # a follower's
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.uses_topic_ids = uses_topic_ids
        self.partitions: OrderedDict[PartitionKey, CachedPartition] = OrderedDict(
            (p.key(uses_topic_ids), p) for p in partitions)
        self.last_used_ms = now_ms

    def eviction_key(self) -> tuple[bool, int, int]:
        """Kafka's EvictableKey: the lowest is evicted first, consumers' before followers', smaller first."""
        return self.privileged, len(self.partitions), self.id


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _MAX_ID else epoch + 1


class FetchSessionCache:
    def __init__(self, max_slots: int, eviction_ms: int = EVICTION_MS,
                 now_ms: Callable[[], int] = lambda: int(time.monotonic() * 1000)) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.now_ms = now_ms
        self.sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        return self.sessions.pop(session_id, None)

    def touch(self, session: FetchSession) -> None:
        session.last_used_ms = self.now_ms()
        self.sessions.move_to_end(session.id)

    def maybe_create(self, partitions: list[CachedPartition], uses_topic_ids: bool, *,
                     privileged: bool = False) -> FetchSession | None:
        """A new session for `partitions` (`privileged`: a follower's), or None when the cache is full and
        nothing may be evicted."""
        now = self.now_ms()
        session_id = random.randint(1, _MAX_ID)
        while session_id in self.sessions:
            session_id = random.randint(1, _MAX_ID)
        key = (privileged, len(partitions), session_id)
        if len(self.sessions) >= self.max_slots and not self._try_evict(key, now):
            return None
        session = self.sessions[session_id] = FetchSession(session_id, partitions, uses_topic_ids, now,
                                                           privileged=privileged)
        return session

    def _try_evict(self, key: tuple[bool, int, int], now: int) -> bool:
        """Kafka's tryEvict: the least recently used session if idle past the eviction time, else the lowest
        evictable one (a follower may evict any, a consumer only consumers') if `key` is not below it."""
        if not self.sessions:
            return False
        oldest = next(iter(self.sessions.values()))
        if now - oldest.last_used_ms > self.eviction_ms:
            del self.sessions[oldest.id]
            return True
        privileged = key[0]
        evictable = [s for s in self.sessions.values() if privileged or not s.privileged]
        if not evictable:
            return False
        lowest = min(evictable, key=FetchSession.eviction_key)
        if key < lowest.eviction_key():
            return False
        del self.sessions[lowest.id]
        return True


class FetchContext:
    """How one Fetch request relates to sessions: which partitions to read and which to answer with.

    `error` set: the request is answered with that top-level error and nothing else.
    """

    __slots__ = ("cache", "error", "incremental", "partitions", "privileged", "session", "uses_topic_ids",
                 "wants_session")

    def __init__(self, cache: FetchSessionCache, partitions: list[CachedPartition], *, uses_topic_ids: bool,
                 session: FetchSession | None = None, wants_session: bool = False, privileged: bool = False,
                 error: ErrorCode = ErrorCode.none) -> None:
        self.cache = cache
        self.privileged = privileged
        self.partitions = partitions
        self.uses_topic_ids = uses_topic_ids
        self.session = session
        self.incremental = session is not None
        self.wants_session = wants_session
        self.error = error

    @property
    def session_id(self) -> int:
        return self.session.id if self.session is not None else INVALID_SESSION_ID

    def select(self, results: list[ReadResult]) -> list[ReadResult]:
        """The partitions the response carries. A full fetch carries all and may open a session; an
        incremental one only those with news, which move to the end of the session's order for fairness."""
        if not self.incremental:
            for read in results:
                read.partition.must_respond(read)
            if self.wants_session:
                self.session = self.cache.maybe_create([read.partition for read in results], self.uses_topic_ids,
                                                       privileged=self.privileged)
            return results
        assert self.session is not None
        chosen = [read for read in results if read.partition.must_respond(read)]
        for read in chosen:
            self.session.partitions.move_to_end(read.partition.key(self.uses_topic_ids))
        return chosen


def new_context(cache: FetchSessionCache, session_id: int, epoch: int, uses_topic_ids: bool,
                partitions: list[CachedPartition], forgotten: list[PartitionKey], *,
                from_follower: bool = False) -> FetchContext:
    """Kafka's FetchManager.newContext; `from_follower`: a replica's fetch, whose new session is privileged."""
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)  # a full fetch naming a session closes it
        return FetchContext(cache, partitions, uses_topic_ids=uses_topic_ids,
                            wants_session=epoch == INITIAL_EPOCH and cache.max_slots > 0, privileged=from_follower)
    session = cache.get(session_id)
    if session is None:
        return FetchContext(cache, [], uses_topic_ids=uses_topic_ids, error=ErrorCode.fetch_session_id_not_found)
    if session.epoch != epoch:
        return FetchContext(cache, [], uses_topic_ids=uses_topic_ids,
                            error=ErrorCode.invalid_fetch_session_epoch)
    if session.uses_topic_ids != uses_topic_ids:
        code = ErrorCode.fetch_session_topic_id_error if uses_topic_ids else ErrorCode.fetch_session_id_not_found
        return FetchContext(cache, [], uses_topic_ids=uses_topic_ids, error=code)
    for part in partitions:
        key = part.key(uses_topic_ids)
        cached = session.partitions.get(key)
        if cached is None:
            session.partitions[key] = part
        else:
            cached.update_request(part)
    for key in forgotten:
        session.partitions.pop(key, None)
    session.epoch = next_epoch(session.epoch)
    cache.touch(session)
    return FetchContext(cache, list(session.partitions.values()), uses_topic_ids=uses_topic_ids, session=session)
