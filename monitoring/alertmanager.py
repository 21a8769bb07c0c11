"""A real Alertmanager as a receiver (``type = "alertmanager"``): the monitor is then only the rule
evaluator, as Prometheus is, and routing, grouping, silences, inhibition and notifications are
Alertmanager's.

What is sent follows Prometheus (``rules/alerting.go``, ``cmd/prometheus``'s ``sendAlerts`` and
``notifier/``): every evaluation the monitor offers its book (firing and recently resolved alerts, never
pending ones) and the sender posts to ``<url>/api/v2/alerts`` a JSON list of
``{"labels", "annotations", "startsAt", "endsAt", "generatorURL"}`` with

* a **firing** alert re-sent every ``resend_s`` (Prometheus' ``--rules.alert.resend-delay``, 1 m) with
  ``endsAt = now + 4 * max(resend_s, evaluation_interval_s)`` (Prometheus' ``ValidUntil``: room for
  two or three lost sends before Alertmanager resolves it by itself, and a monitor that died has its
  alerts expire there within that time). Prometheus re-sends once ``resend_s`` has *passed*, i.e. up
  to one evaluation later; here an alert is re-sent at the last evaluation before ``resend_s`` would
  pass, so the gap is never above ``resend_s`` (60 s by default);
* a **resolved** alert sent with ``endsAt`` = its resolution time, once it reached Alertmanager.

Prometheus forgets a failed send; here an alert counts as sent only once Alertmanager answered 2xx,
so an Alertmanager that is down (refused, timed out, 5xx) gets everything again at the next
evaluation after it came back: the firing alerts and the resolutions it missed. Posting runs on the
sender's own thread with a bounded timeout and each offer replaces the previous one (nothing queues
up), so a dead or slow Alertmanager never holds up an evaluation. It is logged once when it becomes
unreachable and once when it is back, and ``monitor_alertmanager_up{receiver}``,
``monitor_alertmanager_unsent_alerts{receiver}`` and the notification counters say so meanwhile.

After a restart nothing is remembered: the firing alerts are sent at the first evaluation (Alertmanager
merges them by fingerprint with what it holds) and the resolutions still in the book once more
(harmless: Alertmanager notifies a resolution only to receivers that were told it fired).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from contracts.alerts import rfc3339

from . import metrics
from .alerts import FIRING, PENDING, RESOLVED, Alert
from .config import Receiver

log = logging.getLogger(__name__)

API_PATH = "/api/v2/alerts"
MAX_BATCH = 256
"""Alerts per POST (Prometheus' notifier sends at most this many, ``maxBatchSize``)."""


def alerts_url(base: str) -> str:
    """``<base>/api/v2/alerts`` for Alertmanager's base address (with or without a trailing slash or path prefix)."""
    return base.rstrip("/") + API_PATH


def valid_until(now: float, resend_s: float, evaluation_interval_s: float) -> float:
    """Prometheus' ``ValidUntil``: ``now + 4 * max(resend delay, evaluation interval)``."""
    return now + 4 * max(resend_s, evaluation_interval_s)


def api_alert(alert: Alert, now: float, resend_s: float, evaluation_interval_s: float,
              generator_url: str = "") -> dict[str, Any]:
    """One ``postableAlert`` of Alertmanager's API v2."""
    ends = alert.resolved_at if alert.state == RESOLVED else valid_until(now, resend_s, evaluation_interval_s)
    body: dict[str, Any] = {"labels": dict(alert.labels), "annotations": dict(alert.annotations),
                            "startsAt": rfc3339(alert.fired_at), "endsAt": rfc3339(ends)}
    if generator_url:
        body["generatorURL"] = generator_url
    return body


@dataclass(frozen=True)
class Sent:
    """What Alertmanager last acknowledged of an alert: the incident (``fired_at``), its status and when."""

    fired_at: float | None
    status: str
    at: float


class SendBook:
    """Which alerts are due (pure, on the caller's clock, so tests run it on a fake one)."""

    def __init__(self, resend_s: float, evaluation_interval_s: float) -> None:
        self.resend_s = resend_s
        self.evaluation_interval_s = evaluation_interval_s
        self.sent: dict[str, Sent] = {}

    def due(self, alerts: Iterable[Alert], now: float) -> list[Alert]:
        """Firing alerts new, or whose last send is at least ``resend_s - evaluation_interval_s`` old (the next
        evaluation would be late); resolved alerts Alertmanager has not acknowledged as resolved."""
        out = []
        for alert in alerts:
            if alert.state == PENDING:
                continue
            last = self.sent.get(alert.fp)
            if last is None or last.fired_at != alert.fired_at or last.status != alert.status:
                out.append(alert)  # new, a new incident, or its resolution
            elif alert.status == FIRING and now - last.at >= self.resend_s - self.evaluation_interval_s:
                out.append(alert)
        return out

    def acknowledged(self, alerts: Iterable[Alert], now: float) -> None:
        for alert in alerts:
            self.sent[alert.fp] = Sent(alert.fired_at, alert.status, now)

    def forget_except(self, fps: set[str]) -> None:
        """Drop what is no longer in the book (resolved alerts past retention, rules removed)."""
        for fp in [fp for fp in self.sent if fp not in fps]:
            del self.sent[fp]


def post_alerts(url: str, alerts: list[dict[str, Any]], timeout_s: float) -> None:
    """POST a list of postable alerts; raises on anything but a 2xx answer."""
    body = json.dumps(alerts, ensure_ascii=False).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json",
                                                 "User-Agent": "securitybus-monitor"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode(errors="replace").strip()
        raise RuntimeError(f"answered {exc.code} {detail}") from None


class AlertmanagerSender:
    """One Alertmanager receiver: :meth:`offer` (non-blocking, from the evaluation) and a worker thread posting."""

    def __init__(self, receiver: Receiver, evaluation_interval_s: float, generator_url: str = "",
                 clock: Callable[[], float] = time.time,
                 post: Callable[[str, list[dict[str, Any]], float], None] = post_alerts) -> None:
        self.receiver = receiver
        self.url = alerts_url(receiver.url)
        self.evaluation_interval_s = evaluation_interval_s
        self.generator_url = generator_url
        self.book = SendBook(receiver.resend_s, evaluation_interval_s)
        self.clock = clock
        self.post = post
        self.reachable: bool | None = None
        """None until the first post; then whether the last one was acknowledged."""
        self.last_error = ""
        self._offered: list[Alert] | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        metrics.ALERTMANAGER_UP.labels(receiver.name).set(0)
        metrics.ALERTMANAGER_UNSENT.labels(receiver.name).set(0)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"alertmanager-{self.receiver.name}", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def offer(self, alerts: Iterable[Alert]) -> None:
        """The book as of this evaluation (copied: the engine goes on changing its alerts)."""
        snapshot = [Alert.from_json(a.to_json()) for a in alerts if a.state != PENDING]
        with self._lock:
            self._offered = snapshot
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            with self._lock:
                alerts, self._offered = self._offered, None
            if alerts is not None:
                try:
                    self.send(alerts)
                except Exception:  # nothing may end this thread: the next evaluation tries again
                    log.exception("alertmanager %s: sending failed", self.receiver.name)

    def send(self, alerts: list[Alert]) -> int:
        """Post what is due of ``alerts`` now; returns how many Alertmanager acknowledged."""
        self.book.forget_except({a.fp for a in alerts})
        due = self.book.due(alerts, self.clock())
        name = self.receiver.name
        sent = 0
        for start in range(0, len(due), MAX_BATCH):
            batch = due[start:start + MAX_BATCH]
            now = self.clock()
            body = [api_alert(a, now, self.receiver.resend_s, self.evaluation_interval_s, self.generator_url)
                    for a in batch]
            started = time.monotonic()
            try:
                self.post(self.url, body, self.receiver.timeout_s)
            except Exception as exc:  # refused, timed out, 4xx/5xx: counted, logged on the change, retried
                metrics.NOTIFICATION_FAILURES.labels(name).inc()
                self._unreachable(exc, len(due) - sent)
                break
            finally:
                metrics.NOTIFICATION_SECONDS.labels(name).observe(time.monotonic() - started)
            self.book.acknowledged(batch, now)
            sent += len(batch)
            metrics.NOTIFICATIONS.labels(name).inc()
            metrics.ALERTMANAGER_ALERTS_SENT.labels(name).inc(len(batch))
            self._reachable()
        if sent == len(due):
            metrics.ALERTMANAGER_UNSENT.labels(name).set(0)
        return sent

    def _unreachable(self, exc: Exception, unsent: int) -> None:
        name = self.receiver.name
        metrics.ALERTMANAGER_UP.labels(name).set(0)
        metrics.ALERTMANAGER_UNSENT.labels(name).set(unsent)
        self.last_error = str(exc)
        if self.reachable is not False:
            log.warning("alertmanager %s at %s unreachable: %s; %d alert(s) kept, retried every evaluation",
                        name, self.url, exc, unsent)
        self.reachable = False

    def _reachable(self) -> None:
        name = self.receiver.name
        metrics.ALERTMANAGER_UP.labels(name).set(1)
        metrics.ALERTMANAGER_LAST_SUCCESS.labels(name).set(time.time())
        if self.reachable is False:
            log.info("alertmanager %s at %s reachable again (was: %s)", name, self.url, self.last_error)
        self.reachable = True
        self.last_error = ""

