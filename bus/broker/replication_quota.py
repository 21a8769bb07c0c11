"""Replication throttles (Kafka's ReplicationQuotaManager), sans IO: which partitions are throttled and whether the
bytes they moved lately exceed the rate.

Two quotas per broker: the leader's (bytes sent to followers of throttled partitions, `leader.replication.
throttled.rate`) and the follower's (bytes fetched for throttled partitions, `follower.replication.throttled.
rate`). A partition is throttled on this broker when its topic's `leader.replication.throttled.replicas` /
`follower.replication.throttled.replicas` names it with this broker's id (or is "*"). The callers throttle only
replicas that are NOT in sync (ReplicaManager.shouldLeaderThrottle, ReplicaFetcherThread.shouldFollowerThrottle):
a throttled copy gets no data while the quota is exceeded, and an in-sync replica, which acks=all waits for, never
waits. The rate is Kafka's `Rate` over `replication.quota.window.num` samples of `replication.quota.window.size.
seconds`: total bytes over the time the samples span, counted as at least all but one window so a fresh quota does
not look exceeded by its first fetch.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from bus.config.broker import DYNAMIC_BROKER_KEYS, BrokerConfig
from bus.config.definitions import LONG_MAX
from bus.config.topic import THROTTLED_REPLICAS_KEYS, throttled_partitions
from bus.protocol.topic_partition import TopicPartition

LEADER_RATE, FOLLOWER_RATE = DYNAMIC_BROKER_KEYS[:2]
LEADER_REPLICAS, FOLLOWER_REPLICAS = THROTTLED_REPLICAS_KEYS


@dataclass(slots=True)
class _Sample:
    start: float
    total: int = 0


class ReplicationQuota:
    """One direction's quota: the throttled partitions and the sampled byte rate (Kafka's ReplicationQuotaManager)."""

    def __init__(self, samples: int = 11, window_s: float = 1.0, rate: int = LONG_MAX,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.samples = samples
        self.window_s = window_s
        self.rate_limit = rate
        self._clock = clock
        self._samples: deque[_Sample] = deque()
        self._throttled: dict[str, frozenset[int] | None] = {}  # topic -> partitions, None: every partition

    def update_rate(self, rate: int) -> None:
        self.rate_limit = rate

    def mark_throttled(self, topic: str, partitions: frozenset[int] | None) -> None:
        """Throttle `partitions` of `topic` (None: all of them); an empty set throttles none."""
        if partitions is not None and not partitions:
            self._throttled.pop(topic, None)
        else:
            self._throttled[topic] = partitions

    def remove_throttle(self, topic: str) -> None:
        self._throttled.pop(topic, None)

    def is_throttled(self, tp: TopicPartition) -> bool:
        if tp.topic not in self._throttled:
            return False
        partitions = self._throttled[tp.topic]
        return partitions is None or tp.partition in partitions

    def record(self, nbytes: int) -> None:
        now = self._clock()
        self._purge(now)
        if not self._samples or now - self._samples[-1].start >= self.window_s:
            self._samples.append(_Sample(now))
            while len(self._samples) > self.samples:
                self._samples.popleft()
        self._samples[-1].total += nbytes

    def measured_rate(self) -> float:
        """Bytes/s over the samples kept (Kafka's Rate.measure with its windowSize)."""
        now = self._clock()
        self._purge(now)
        if not self._samples:
            return 0.0
        elapsed = now - self._samples[0].start
        full_windows = int(elapsed / self.window_s)
        if full_windows < self.samples - 1:
            elapsed += (self.samples - 1 - full_windows) * self.window_s
        return sum(s.total for s in self._samples) / max(elapsed, self.window_s)

    def is_quota_exceeded(self) -> bool:
        return self.rate_limit < LONG_MAX and self.measured_rate() > self.rate_limit

    def _purge(self, now: float) -> None:
        """Samples older than the whole span no longer count (Kafka's purgeObsoleteSamples)."""
        expire_s = self.samples * self.window_s
        while self._samples and now - self._samples[0].start >= expire_s:
            self._samples.popleft()


class ReplicationQuotas:
    """The leader and follower quotas of one broker, kept in line with the metadata: the rates from the dynamic
    broker configs (this broker's own, else the cluster default, else the static file), the throttled partitions
    from the topics' throttled-replica lists."""

    def __init__(self, node_id: int, samples: int, window_s: float, static: Mapping[str, str],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.node_id = node_id
        self.static = static
        self.leader = ReplicationQuota(samples, window_s, clock=clock)
        self.follower = ReplicationQuota(samples, window_s, clock=clock)
        self.update_rates({})

    @classmethod
    def from_broker(cls, config: BrokerConfig) -> ReplicationQuotas:
        return cls(config.node_id, int(config["replication.quota.window.num"]),
                   float(config["replication.quota.window.size.seconds"]), config.static)

    def update_rates(self, dynamic: Mapping[str, Mapping[str, str]]) -> None:
        """`dynamic`: the image's broker configs, resource name ("" or a broker id) -> key -> value."""
        own, default = dynamic.get(str(self.node_id), {}), dynamic.get("", {})
        for quota, key in ((self.leader, LEADER_RATE), (self.follower, FOLLOWER_RATE)):
            value = own.get(key, default.get(key, self.static.get(key, str(LONG_MAX))))
            quota.update_rate(int(value))

    def update_topic(self, topic: str, configs: Mapping[str, str]) -> None:
        """A topic's configs changed: throttle what its lists name for this broker (Kafka's TopicConfigHandler)."""
        for quota, key in ((self.leader, LEADER_REPLICAS), (self.follower, FOLLOWER_REPLICAS)):
            value = configs.get(key, "").strip()
            quota.mark_throttled(topic, throttled_partitions(key, value, self.node_id) if value else frozenset())

    def remove_topic(self, topic: str) -> None:
        self.leader.remove_throttle(topic)
        self.follower.remove_throttle(topic)

    def load(self, topics: Iterable[tuple[str, Mapping[str, str]]], dynamic: Mapping[str, Mapping[str, str]]) -> None:
        self.update_rates(dynamic)
        for name, configs in topics:
            self.update_topic(name, configs)
