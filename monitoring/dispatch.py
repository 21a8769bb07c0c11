"""Alertmanager's dispatcher: inhibition, silences, aggregation groups and the notification log.

Each tick takes the firing and recently resolved alerts, drops the muted ones (silenced, or inhibited
by a firing source alert with the same ``equal`` labels), sorts the rest into groups by the route's
``group_by`` labels and flushes each group when due: ``group_wait`` after its oldest alert fired (so
at once when that is long past, e.g. after a restart), then every ``group_interval``.
Whether a flush notifies a receiver is Alertmanager's ``DedupStage.needsUpdate`` against the
notification log (a new firing alert, a resolution, or ``repeat_interval`` elapsed); the log entry is
written only after a delivery succeeded, and it is persisted, so a restarted monitor re-sends nothing
already delivered and a failed delivery is tried again at the next flush.

Groups are derived from the alert book each tick rather than stored: a resolved alert leaves its
group once every receiver that was told it fired has been told it resolved.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .alerts import FIRING, RESOLVED, Alert
from .config import InhibitRule, Receiver, Route
from .matchers import all_match
from .silences import Silence

ROUTE_KEY = "{}"
"""The root route's key, as Alertmanager prints it in ``groupKey``."""


@dataclass
class LogEntry:
    """What a receiver was last told about a group (Alertmanager's ``nflogpb.Entry``)."""

    firing: frozenset[str]
    resolved: frozenset[str]
    timestamp: float

    def to_json(self) -> dict[str, Any]:
        return {"firing": sorted(self.firing), "resolved": sorted(self.resolved), "timestamp": self.timestamp}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LogEntry:
        return cls(frozenset(data["firing"]), frozenset(data["resolved"]), float(data["timestamp"]))


class NotificationLog:
    """Entries by (receiver, group key); ``persist`` writes one through (called after each delivery)."""

    def __init__(self, entries: Mapping[tuple[str, str], LogEntry] | None = None,
                 persist: Callable[[str, str, LogEntry], None] | None = None) -> None:
        self._entries = dict(entries or {})
        self._persist = persist
        self._lock = threading.Lock()

    def get(self, receiver: str, group_key: str) -> LogEntry | None:
        with self._lock:
            return self._entries.get((receiver, group_key))

    def log(self, receiver: str, group_key: str, entry: LogEntry) -> None:
        if self._persist is not None:
            self._persist(receiver, group_key, entry)
        with self._lock:
            self._entries[(receiver, group_key)] = entry


def needs_update(entry: LogEntry | None, firing: set[str], resolved: set[str], repeat_s: float, send_resolved: bool,
                 now: float) -> bool:
    """Alertmanager's ``DedupStage.needsUpdate``."""
    if entry is None:
        return bool(firing)
    if not firing <= entry.firing:
        return True
    if not firing:
        return bool(entry.firing)
    if send_resolved and not resolved <= entry.resolved:
        return True
    return entry.timestamp < now - repeat_s


def group_labels(labels: Mapping[str, str], group_by: Iterable[str]) -> dict[str, str]:
    return {name: labels[name] for name in group_by if name in labels}


def group_key(labels: Mapping[str, str]) -> str:
    """``{}:{alertname="DeviceSilent", district="110101"}`` as Alertmanager builds it."""
    inner = ", ".join(f'{name}="{labels[name]}"' for name in sorted(labels))
    return f"{ROUTE_KEY}:{{{inner}}}"


@dataclass(frozen=True)
class Notification:
    receiver: Receiver
    group_key: str
    group_labels: dict[str, str]
    alerts: tuple[Alert, ...]
    firing: frozenset[str]
    resolved: frozenset[str]
    at: float


@dataclass
class Muting:
    """Why an alert is not notified (shown by the console like Alertmanager's ``status``)."""

    silenced_by: list[str] = field(default_factory=list)
    inhibited_by: list[str] = field(default_factory=list)


def inhibited_by(alert: Alert, firing: list[Alert], rules: Iterable[InhibitRule]) -> list[str]:
    """Fingerprints of firing source alerts that inhibit ``alert`` (Alertmanager's ``Inhibitor.Mutes``)."""
    found: list[str] = []
    for rule in rules:
        if not all_match(rule.target, alert.labels):
            continue
        both = all_match(rule.source, alert.labels)  # an alert matching both sides is not muted by its peers
        for source in firing:
            if source.fp == alert.fp or not all_match(rule.source, source.labels):
                continue
            if both and all_match(rule.target, source.labels):
                continue
            if all(source.labels.get(n, "") == alert.labels.get(n, "") for n in rule.equal):
                found.append(source.fp)
    return found


class Dispatcher:
    def __init__(self, route: Route, receivers: Iterable[Receiver], inhibit_rules: Iterable[InhibitRule],
                 nflog: NotificationLog) -> None:
        self.route = route
        wanted = set(route.receivers)
        self.receivers = [r for r in receivers if not wanted or r.name in wanted]
        self.inhibit_rules = tuple(inhibit_rules)
        self.nflog = nflog
        self.next_flush: dict[str, float] = {}
        self.muting: dict[str, Muting] = {}
        self._in_flight: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def tick(self, alerts: Iterable[Alert], silences: Iterable[Silence], now: float) -> list[Notification]:
        """Notifications due now (the caller delivers them and reports back with :meth:`delivered`)."""
        alerts = list(alerts)
        silences = list(silences)
        firing = [a for a in alerts if a.state == FIRING]
        self.muting = {}
        groups: dict[str, list[Alert]] = {}
        labels_of: dict[str, dict[str, str]] = {}
        for alert in alerts:
            muting = Muting([s.id for s in silences if s.mutes(alert.labels, now)],
                            inhibited_by(alert, firing, self.inhibit_rules))
            if muting.silenced_by or muting.inhibited_by:
                self.muting[alert.fp] = muting
                continue
            labels = group_labels(alert.labels, self.route.group_by)
            key = group_key(labels)
            if alert.state == RESOLVED and self._settled(alert, key):
                continue
            groups.setdefault(key, []).append(alert)
            labels_of[key] = labels
        for key in [k for k in self.next_flush if k not in groups]:
            del self.next_flush[key]
        due: list[Notification] = []
        for key, members in groups.items():
            if key not in self.next_flush:
                oldest = min(now if a.fired_at is None else a.fired_at for a in members)
                self.next_flush[key] = max(now, oldest + self.route.group_wait_s)
            if now < self.next_flush[key]:
                continue
            self.next_flush[key] = now + self.route.group_interval_s
            due.extend(self._flush(key, labels_of[key], members, now))
        return due

    def _settled(self, alert: Alert, key: str) -> bool:
        """A resolved alert every receiver either never heard of or has heard resolve."""
        for receiver in self.receivers:
            entry = self.nflog.get(receiver.name, key)
            if entry is not None and alert.fp in entry.firing and alert.fp not in entry.resolved:
                return False
        return True

    def _flush(self, key: str, labels: dict[str, str], members: list[Alert], now: float) -> list[Notification]:
        firing = {a.fp for a in members if a.state == FIRING}
        resolved = {a.fp for a in members if a.state == RESOLVED}
        out = []
        for receiver in self.receivers:
            with self._lock:
                if (receiver.name, key) in self._in_flight:
                    continue
            entry = self.nflog.get(receiver.name, key)
            if not needs_update(entry, firing, resolved, self.route.repeat_interval_s, receiver.send_resolved, now):
                continue
            shown = tuple(a for a in sorted(members, key=lambda a: a.fp)
                          if a.state == FIRING or receiver.send_resolved)
            if not shown:
                # Alertmanager still logs it so the receiver's entry forgets the resolved alerts.
                self.nflog.log(receiver.name, key, LogEntry(frozenset(firing), frozenset(resolved), now))
                continue
            with self._lock:
                self._in_flight.add((receiver.name, key))
            out.append(Notification(receiver, key, labels, shown, frozenset(firing), frozenset(resolved), now))
        return out

    def delivered(self, notification: Notification, ok: bool) -> None:
        """Called by the notifier when a delivery ended; only a success is logged."""
        try:
            if ok:
                self.nflog.log(notification.receiver.name, notification.group_key,
                               LogEntry(notification.firing, notification.resolved, notification.at))
        finally:
            with self._lock:
                self._in_flight.discard((notification.receiver.name, notification.group_key))
