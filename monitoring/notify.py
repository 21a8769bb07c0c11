"""Receivers: Alertmanager's webhook (payload version 4) and e-mail over SMTP, each on its own thread.

A receiver's deliveries run on its own worker, so a dead or slow receiver (connection refused,
timeouts, 5xx) never delays the others or the evaluation. A failed attempt is counted and retried
with exponential backoff (``[monitoring.retry]``); after the last attempt the notification is
dropped and counted, and since the notification log was not written the next group flush tries
again (Alertmanager's behaviour). Every network call has a timeout, so nothing hangs.
"""

from __future__ import annotations

import json
import logging
import queue
import smtplib
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from email.message import EmailMessage
from typing import Any

from . import metrics
from .alerts import FIRING, RESOLVED
from .config import Receiver, Retry
from .dispatch import Notification

log = logging.getLogger(__name__)


def _common(maps: list[dict[str, str]]) -> dict[str, str]:
    if not maps:
        return {}
    first = maps[0]
    return {k: v for k, v in first.items() if all(m.get(k) == v for m in maps[1:])}


def webhook_payload(notification: Notification, external_url: str = "") -> dict[str, Any]:
    """Alertmanager's webhook body (``notify/webhook``, ``version: "4"``)."""
    alerts = [a.event() for a in notification.alerts]
    status = FIRING if any(a["status"] == FIRING for a in alerts) else RESOLVED
    return {
        "version": "4",
        "groupKey": notification.group_key,
        "truncatedAlerts": 0,
        "status": status,
        "receiver": notification.receiver.name,
        "groupLabels": dict(notification.group_labels),
        "commonLabels": _common([a["labels"] for a in alerts]),
        "commonAnnotations": _common([a["annotations"] for a in alerts]),
        "externalURL": external_url,
        "alerts": alerts,
    }


def post_webhook(receiver: Receiver, payload: dict[str, Any]) -> None:
    body = json.dumps(payload, ensure_ascii=False).encode()
    request = urllib.request.Request(receiver.url, body, {"Content-Type": "application/json",
                                                         "User-Agent": "securitybus-monitor"})
    try:
        with urllib.request.urlopen(request, timeout=receiver.timeout_s) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"webhook {receiver.url} answered {exc.code}") from None


def email_message(receiver: Receiver, payload: dict[str, Any]) -> EmailMessage:
    """Subject like Alertmanager's default: ``[FIRING:2] DeviceSilent 110101``; one block per alert."""
    firing = sum(a["status"] == FIRING for a in payload["alerts"])
    tag = f"[{payload['status'].upper()}:{firing}]" if payload["status"] == FIRING else "[RESOLVED]"
    message = EmailMessage()
    message["Subject"] = " ".join([tag, *payload["groupLabels"].values()])
    message["From"] = receiver.from_addr
    message["To"] = ", ".join(receiver.to)
    lines = []
    for alert in payload["alerts"]:
        lines.append(f"{alert['status'].upper()} {alert['labels'].get('alertname', '')} since {alert['startsAt']}")
        lines.extend(f"  {k} = {v}" for k, v in sorted(alert["labels"].items()))
        lines.extend(f"  {k}: {v}" for k, v in sorted(alert["annotations"].items()))
        lines.append("")
    message.set_content("\n".join(lines))
    return message


def send_email(receiver: Receiver, payload: dict[str, Any]) -> None:
    with smtplib.SMTP(receiver.host, receiver.port, timeout=receiver.timeout_s) as smtp:
        smtp.send_message(email_message(receiver, payload))


SENDERS: dict[str, Callable[[Receiver, dict[str, Any]], None]] = {"webhook": post_webhook, "smtp": send_email}


class Notifier:
    """One receiver's queue and worker thread."""

    def __init__(self, receiver: Receiver, retry: Retry, done: Callable[[Notification, bool], None],
                 external_url: str = "") -> None:
        self.receiver = receiver
        self.retry = retry
        self.done = done
        self.external_url = external_url
        self._queue: queue.Queue[Notification | None] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"notify-{receiver.name}", daemon=True)
        self._thread.start()

    def submit(self, notification: Notification) -> None:
        self._queue.put(notification)

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._queue.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            notification = self._queue.get()
            if notification is None:
                return
            ok = False
            try:
                ok = self._deliver(notification)
            finally:
                self.done(notification, ok)

    def _deliver(self, notification: Notification) -> bool:
        name = self.receiver.name
        payload = webhook_payload(notification, self.external_url)
        send = SENDERS[self.receiver.type]
        delay = self.retry.initial_s
        for attempt in range(1, self.retry.attempts + 1):
            started = time.monotonic()
            try:
                send(self.receiver, payload)
            except Exception as exc:  # every failure of a receiver is counted and retried, none escapes
                metrics.NOTIFICATION_FAILURES.labels(name).inc()
                log.warning("receiver %s: attempt %d failed: %s", name, attempt, exc)
                if attempt == self.retry.attempts or self._stop.wait(delay):
                    break
                delay = min(delay * 2, self.retry.max_s)
                continue
            finally:
                metrics.NOTIFICATION_SECONDS.labels(name).observe(time.monotonic() - started)
            metrics.NOTIFICATIONS.labels(name).inc()
            return True
        metrics.NOTIFICATIONS_DROPPED.labels(name).inc()
        return False
