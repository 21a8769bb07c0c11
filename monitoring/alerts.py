"""Alerts and their lifecycle, with Prometheus' rule semantics (pending -> firing -> resolved).

An alert is identified by its label set and its Prometheus fingerprint (``contracts.alerts``, where
the ``alerts`` record is defined), so a receiver that dedups by fingerprint sees the same identity
as from a real Alertmanager.

Per rule evaluation (:meth:`AlertBook.update`): a new active condition becomes *pending*; after
``for_s`` of staying active it *fires* (``startsAt``); when the condition goes away a firing alert
keeps firing for ``keep_firing_for_s`` (so a flapping device stays one incident) and then resolves
once (``endsAt``); a pending alert that goes away is dropped without a word. The same labels
becoming active after a resolution start a new incident. Each firing and each resolution is a
*transition*: the service publishes it on the ``alerts`` topic and persists the book.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from contracts.alerts import FIRING, RESOLVED, alert_record, fingerprint

PENDING = "pending"


@dataclass
class Alert:
    rule: str
    labels: dict[str, str]
    annotations: dict[str, str]
    state: str
    active_at: float
    """When the condition became true (the pending clock)."""
    last_active: float
    fired_at: float | None = None
    resolved_at: float | None = None
    fp: str = field(default="")

    def __post_init__(self) -> None:
        self.fp = self.fp or fingerprint(self.labels)

    @property
    def status(self) -> str:
        return RESOLVED if self.state == RESOLVED else FIRING

    def event(self) -> dict[str, Any]:
        """The alert as Alertmanager's API and webhook show it (the ``alerts`` topic value too)."""
        return alert_record(self.status, self.labels, self.annotations, self.fired_at, self.resolved_at)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Alert:
        return cls(**data)


@dataclass(frozen=True)
class Candidate:
    """What a rule found active this evaluation: one alert's labels and annotations."""

    labels: dict[str, str]
    annotations: dict[str, str]


class AlertBook:
    """Every pending, firing and recently resolved alert, by fingerprint."""

    def __init__(self, alerts: Mapping[str, Alert] | None = None, resolved_retention_s: float = 3600.0) -> None:
        self.alerts: dict[str, Alert] = dict(alerts or {})
        self.resolved_retention_s = resolved_retention_s

    def update(self, rule: str, for_s: float, keep_firing_for_s: float, active: list[Candidate],
               now: float) -> list[Alert]:
        """Apply one evaluation of ``rule``; returns the alerts that fired or resolved (the transitions)."""
        changed: list[Alert] = []
        seen: set[str] = set()
        for candidate in active:
            fp = fingerprint(candidate.labels)
            seen.add(fp)
            alert = self.alerts.get(fp)
            if alert is None or alert.state == RESOLVED:
                alert = self.alerts[fp] = Alert(rule, dict(candidate.labels), dict(candidate.annotations), PENDING,
                                                now, now, fp=fp)
            alert.annotations = dict(candidate.annotations)
            alert.last_active = now
            if alert.state == PENDING and now - alert.active_at >= for_s:
                alert.state, alert.fired_at = FIRING, now
                changed.append(alert)
        for fp, alert in list(self.alerts.items()):
            if alert.rule != rule or fp in seen:
                continue
            if alert.state == PENDING:
                del self.alerts[fp]
            elif alert.state == FIRING and now - alert.last_active >= keep_firing_for_s:
                alert.state, alert.resolved_at = RESOLVED, now
                changed.append(alert)
            elif alert.state == RESOLVED and now - (alert.resolved_at or now) > self.resolved_retention_s:
                del self.alerts[fp]
        return changed

    def drop_rules_except(self, names: set[str]) -> None:
        """Forget alerts of rules that are no longer configured (a restart with a changed config)."""
        for fp in [fp for fp, a in self.alerts.items() if a.rule not in names]:
            del self.alerts[fp]

    def notifiable(self) -> list[Alert]:
        """Firing and resolved alerts: what Alertmanager would hold (pending ones are not sent)."""
        return [a for a in self.alerts.values() if a.state != PENDING]

    def open_count(self) -> int:
        return sum(a.state == FIRING for a in self.alerts.values())
