"""A fetcher's side of an incremental fetch session (KIP-227), after Kafka's FetchSessionHandler.

Without a session every fetch names every partition, and the leader decodes, reads, answers and encodes all
of them although few have news. With one, the first fetch to a leader is full (session id 0, epoch 0) and
the leader answers with a session id; later fetches name that session and its next epoch and carry only the
partitions added or whose fetch position changed, plus the ones to forget. The leader keeps the others'
positions, still reads them (a follower's fetch renews its place in the ISR for every session partition) and
answers only partitions with news; a partition absent from a response keeps its state.

The session's view is updated when a request is built, as Kafka's builder does: any failure (a connection
lost, a session error, a response naming a partition outside the session) makes the next fetch full again,
naming the old session so that the leader closes it (FETCH_SESSION_ID_NOT_FOUND starts from nothing).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from bus.broker.fetch_sessions import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from bus.protocol.topic_partition import TopicPartition

log = logging.getLogger(__name__)


class PartitionFetch(NamedTuple):
    """What a fetch asks of one partition (Kafka's FetchRequest.PartitionData); a change is sent again. A tuple:
    one is built per followed partition per fetch, and compared with the last one sent."""

    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class SessionFetch:
    """One request's session fields and partitions: `to_send` goes in `topics`, `to_forget` in
    `forgotten_topics_data`; `session` is every partition the leader will read for it."""

    session_id: int
    epoch: int
    to_send: dict[TopicPartition, PartitionFetch]
    to_forget: list[TopicPartition]
    session: dict[TopicPartition, PartitionFetch]

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSessionHandler:
    """The session with one leader: builds each request and learns from each answer (or failure)."""

    def __init__(self, leader_id: int) -> None:
        self.leader_id = leader_id
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._partitions: dict[TopicPartition, PartitionFetch] = {}

    def build(self, wanted: Mapping[TopicPartition, PartitionFetch]) -> SessionFetch:
        """The next request for `wanted` (Kafka's FetchSessionHandler.Builder.build): all of it when full,
        else the partitions added or changed since the last request and those no longer wanted."""
        previous, self._partitions = self._partitions, dict(wanted)
        if self.epoch == INITIAL_EPOCH:
            return SessionFetch(self.session_id, self.epoch, dict(wanted), [], self._partitions)
        to_send = {tp: fetch for tp, fetch in wanted.items() if previous.get(tp) != fetch}
        to_forget = [tp for tp in previous if tp not in wanted]
        return SessionFetch(self.session_id, self.epoch, to_send, to_forget, self._partitions)

    def handle_response(self, sent: SessionFetch, error: ErrorCode, session_id: int,
                        partitions: Iterable[TopicPartition]) -> bool:
        """Learn from the leader's answer to `sent`; False when its partitions are not to be used (a session
        error, or an answer that does not fit the request), and the next fetch is full."""
        if error != ErrorCode.none:
            log.info("fetch session %d with broker %d: %s; the next fetch is full", sent.session_id,
                     self.leader_id, error.name)
            if error == ErrorCode.fetch_session_id_not_found:
                self._start_over(INVALID_SESSION_ID)
            else:
                self._start_over(self.session_id)
            return False
        unknown = [tp for tp in partitions if tp not in sent.session]
        if unknown:
            log.warning("fetch session %d with broker %d: the answer names partitions outside the session (%s); "
                        "the next fetch is full", sent.session_id, self.leader_id, ", ".join(map(str, unknown[:5])))
            self._start_over(self.session_id)
            return False
        if session_id == INVALID_SESSION_ID:
            self._start_over(INVALID_SESSION_ID)  # no session (the leader's cache is full, or it closed ours)
        elif sent.full:
            log.info("fetch session %d opened with broker %d for %d partitions", session_id, self.leader_id,
                     len(sent.session))
            self.session_id, self.epoch = session_id, next_epoch(INITIAL_EPOCH)
        elif session_id != self.session_id:
            log.warning("fetch session %d with broker %d: answered as session %d; the next fetch is full",
                        self.session_id, self.leader_id, session_id)
            self._start_over(self.session_id)
            return False
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """The request failed (connection lost or timed out): start over with a full fetch that closes the
        session, should the leader still hold it (Kafka's handleError)."""
        self._start_over(self.session_id)

    def _start_over(self, session_id: int) -> None:
        self.session_id, self.epoch = session_id, INITIAL_EPOCH
