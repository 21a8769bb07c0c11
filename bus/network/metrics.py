"""The network's authentication counts (Kafka's Selector metrics), which the broker's exporter publishes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from prometheus_client.core import CounterMetricFamily, Metric


class AuthenticationMetrics:
    """Kafka's selector metrics `successful-authentication-total`, `failed-authentication-total` (and their
    re-authentication twins, KIP-368) and `expired-connections-killed-count`, per listener and mechanism, as plain
    counters the connections bump; the mechanism is the SASL one, or SSL for the TLS handshake and certificate."""

    OUTCOMES: ClassVar[dict[str, str]] = {
        "successful_authentication": "Connections that authenticated",
        "failed_authentication": "Connections whose authentication failed (TLS handshake, certificate or SASL login)",
        "successful_reauthentication": "SASL sessions renewed by re-authentication (KIP-368)",
        "failed_reauthentication": "SASL re-authentications that failed (the connection was closed)",
        "expired_connections_killed": "Connections closed because their SASL session outlived "
                                      "connections.max.reauth.ms without re-authentication",
    }

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, str], int] = {}  # (outcome, listener, mechanism) -> count

    def record(self, outcome: str, listener: str, mechanism: str) -> None:
        key = (outcome, listener, mechanism)
        self.counts[key] = self.counts.get(key, 0) + 1

    def count(self, outcome: str, listener: str | None = None, mechanism: str | None = None) -> int:
        """The total of `outcome`, optionally for one listener and one mechanism only."""
        return sum(n for (kind, lst, mech), n in list(self.counts.items())
                   if kind == outcome and listener in (None, lst) and mechanism in (None, mech))

    def collect(self) -> Iterator[Metric]:
        counts = list(self.counts.items())
        for outcome, doc in self.OUTCOMES.items():
            family = CounterMetricFamily(f"bus_{outcome}", doc, labels=["listener", "mechanism"])
            for (kind, listener, mechanism), count in sorted(counts):
                if kind == outcome:
                    family.add_metric([listener, mechanism], count)
            yield family
