"""The quorum's settings, with Kafka's names and defaults (QuorumConfig.java).

The voter set is static (`controller.quorum.voters`); dynamic membership (KIP-853) is out of scope.
Only the ids matter to the consensus core: endpoints are the transport's business.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    """`controller.quorum.*` as the core uses them (all times in milliseconds)."""

    voters: frozenset[int]
    # controller.quorum.election.timeout.ms: a voter without a leader waits a random time in [t, 2t).
    election_timeout_ms: int = 1000
    # controller.quorum.fetch.timeout.ms: a follower without a successful fetch for this long starts an election.
    fetch_timeout_ms: int = 2000
    # controller.quorum.election.backoff.max.ms: cap of a candidate's exponential backoff between elections.
    election_backoff_max_ms: int = 1000
    # controller.quorum.retry.backoff.ms: pause before resending a request that failed or timed out.
    retry_backoff_ms: int = 20
    # controller.quorum.request.timeout.ms: a request without a response for this long is given up.
    request_timeout_ms: int = 2000
    # controller.quorum.fetch.max.wait.ms is not a Kafka key: KafkaRaftClient hardcodes 500 ms of long poll.
    fetch_max_wait_ms: int = 500
    # Kafka's MAX_FETCH_SIZE_BYTES (8 MiB) for Fetch and FetchSnapshot; smaller values chunk snapshots.
    fetch_max_bytes: int = 8 * 1024 * 1024

    def __post_init__(self) -> None:
        if not self.voters:
            raise ValueError("controller.quorum.voters must name at least one voter")
        if any(voter < 0 for voter in self.voters):
            raise ValueError(f"controller.quorum.voters has a negative id: {sorted(self.voters)}")
        for name in ("election_timeout_ms", "fetch_timeout_ms", "request_timeout_ms", "fetch_max_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("election_backoff_max_ms", "retry_backoff_ms", "fetch_max_wait_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")

    @property
    def majority(self) -> int:
        """Votes (or replicas) that make a quorum: more than half of the voters."""
        return len(self.voters) // 2 + 1

    @property
    def check_quorum_timeout_ms(self) -> int:
        """A leader that has not heard from a majority for this long resigns (LeaderState's factor 1.5)."""
        return int(self.fetch_timeout_ms * 1.5)
