"""One evaluation: judge the fleet, run every rule, publish and persist alert changes, dispatch.

The order is what makes a kill -9 at any point harmless: an alert's change is published to the
``alerts`` topic first and remembered as published only once the broker acknowledged it (what was
not acknowledged is published again next time, same key and value); the book is persisted every
evaluation; a notification is logged only after its delivery succeeded and the log is read back at
start-up, so nothing already delivered is delivered again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from . import metrics
from .alertmanager import AlertmanagerSender
from .alerts import PENDING, Alert, AlertBook
from .config import ALERTMANAGER, MonitoringConfig
from .dispatch import Dispatcher, LogEntry, Notification, NotificationLog
from .health import STATES, Fleet
from .rules import LagOf, candidates
from .silences import Silence, load_silences
from .store import Store

log = logging.getLogger(__name__)

Publish = Callable[[list[Alert]], set[str]]
"""Publish alert events; returns the fingerprints the broker acknowledged."""


class Engine:
    def __init__(self, cfg: MonitoringConfig, fleet: Fleet, fleet_lock: threading.Lock, store: Store,
                 publish: Publish, submit: Callable[[Notification], None], lag_of: LagOf) -> None:
        self.cfg = cfg
        self.fleet = fleet
        self.fleet_lock = fleet_lock
        self.store = store
        self.publish = publish
        self.submit = submit
        self.lag_of = lag_of
        self.book = AlertBook(resolved_retention_s=max(3600.0, 4 * cfg.route.group_interval_s))
        self.published: dict[str, str] = {}
        """Fingerprint -> the last status the broker acknowledged."""
        self.nflog = NotificationLog(persist=self._persist_log)
        self.dispatcher = Dispatcher(cfg.route, [r for r in cfg.receivers if r.type != ALERTMANAGER],
                                     cfg.inhibit_rules, self.nflog)
        self.alertmanagers = [AlertmanagerSender(r, cfg.evaluation_interval_s, cfg.external_url)
                              for r in cfg.receivers if r.type == ALERTMANAGER]
        """Real Alertmanagers: they get the whole book every evaluation (their own threads post it)."""
        self._stored: set[str] = set()
        self._bad_silences: set[bytes] = set()

    def _persist_log(self, receiver: str, group_key: str, entry: LogEntry) -> None:
        self.store.put_states("nflog", [(f"{receiver}|{group_key}", {"receiver": receiver, "group_key": group_key,
                                                                      **entry.to_json()})])

    def load(self) -> None:
        """Read the book and the notification log back (start-up)."""
        alerts = {}
        for fp, row in self.store.states("alert"):
            published = row.pop("published", "")
            row.pop("muting", None)
            alerts[fp] = Alert.from_json(row)
            self.published[fp] = published
        self.book = AlertBook(alerts, self.book.resolved_retention_s)
        self.book.drop_rules_except({r.name for r in self.cfg.rules})
        self._stored = set(alerts)
        entries = {(row["receiver"], row["group_key"]): LogEntry.from_json(row)
                   for _, row in self.store.states("nflog")}
        self.nflog = NotificationLog(entries, persist=self._persist_log)
        self.dispatcher.nflog = self.nflog

    def evaluate(self, now: float) -> None:
        with metrics.EVALUATION_SECONDS.time():
            # Bus round trips first, outside the fleet lock: a slow answer must not hold up consuming.
            lags = {rule.group or "monitoring": self.lag_of(rule.group or "monitoring") for rule in self.cfg.rules
                    if rule.kind == "consumer_lag"}
            with self.fleet_lock:
                self.fleet.locator.refresh()
                live = self.fleet.live_since is not None
                if live:
                    self.fleet.judge(now)
                for rule in self.cfg.rules:
                    if not live and rule.kind != "consumer_lag":
                        continue  # not reading up to date (start-up, rebalance): no judgement, no resolution
                    found = candidates(rule, self.fleet, lags.get, now)
                    for alert in self.book.update(rule.name, rule.for_s, rule.keep_firing_for_s, found, now):
                        metrics.TRANSITIONS.labels(alert.status).inc()
                        log.info("alert %s %s %s", alert.status, alert.fp, alert.labels)
                self._device_metrics()
            self._publish()
            silences = self._silences()
            notifications = self.dispatcher.tick(self.book.notifiable(), silences, now)
            self._persist()
            for notification in notifications:
                self.submit(notification)
            notifiable = self.book.notifiable()
            for sender in self.alertmanagers:
                sender.offer(notifiable)
            metrics.EVALUATIONS.inc()
            for state in ("pending", "firing", "resolved"):
                metrics.ALERTS.labels(state).set(sum(a.state == state for a in self.book.alerts.values()))

    def _device_metrics(self) -> None:
        for state in STATES:
            metrics.DEVICES.labels(state).set(sum(t.state == state for t in self.fleet.devices.values()))
        metrics.UNKNOWN_DEVICES.set(sum(not self.fleet.location(t).known for t in self.fleet.devices.values()))

    def _publish(self) -> None:
        due = [a for a in self.book.alerts.values() if a.state != PENDING and self.published.get(a.fp) != a.status]
        if not due:
            return
        acked = self.publish(due)
        for alert in due:
            if alert.fp in acked:
                self.published[alert.fp] = alert.status

    def _silences(self) -> list[Silence]:
        """The silences; a row that is not one is left out and counted, and logged once (not every evaluation)."""
        bad: dict[bytes, Exception] = {}
        try:
            silences = load_silences(self.store.connection(), bad.__setitem__)
        except Exception as exc:  # HBase hiccup: evaluate without silences this once, and say so
            log.warning("cannot read silences: %s", exc)
            return []
        for key in bad.keys() - self._bad_silences:
            log.warning("silence row %r is not a silence, left out (the others still mute): %r", key, bad[key])
        self._bad_silences = set(bad)
        metrics.MALFORMED_SILENCES.set(len(bad))
        return silences

    def _persist(self) -> None:
        rows: list[tuple[str, dict[str, Any]]] = []
        for fp, alert in self.book.alerts.items():
            muting = self.dispatcher.muting.get(fp)
            rows.append((fp, {**alert.to_json(), "published": self.published.get(fp, ""),
                              "muting": {"silencedBy": muting.silenced_by, "inhibitedBy": muting.inhibited_by}
                              if muting else None}))
        self.store.put_states("alert", rows)
        gone = self._stored - set(self.book.alerts)
        if gone:
            self.store.delete_states("alert", gone)
        for fp in gone:
            self.published.pop(fp, None)
        self._stored = set(self.book.alerts)
