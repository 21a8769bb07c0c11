"""The console's side of monitoring: what the monitor keeps in HBase, and who acknowledged which alert.

The monitor (``python -m monitoring``) owns the series and its state; the console reads them through
``monitoring.queries`` and manages silences through ``monitoring.silences`` (the monitor reloads them
every evaluation), so the two never call each other. Acknowledgements are the console's own: an
operator saying "I have this one" changes nothing in the monitor's notifications, so they live in
``console_alert_ack``, one row per fingerprint carrying the incident's ``startsAt`` (an alert that
resolves and fires again is a new incident, not yet acknowledged).

Every method takes HBase in the calling thread (``Backends.hbase``): call them from sync routes.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import happybase

from contracts.alerts import ZERO_TIME, rfc3339
from contracts.records import parse_time
from contracts.tables import console as console_tables
from contracts.tables.monitoring import ensure_monitoring_tables
from monitoring import queries
from monitoring import silences as silence_store
from monitoring.matchers import Matcher

from ..backends import Backends, BackendUnavailable
from .errors import Conflict, Invalid, NotFound

ALERTMANAGER = "alertmanager"
"""The backend named in a 503 when the console reads a real Alertmanager that does not answer."""


class MonitoringService:
    def __init__(self, backends: Backends, map_path: Path) -> None:
        self._backends = backends
        self._map_path = map_path
        self._ready = False

    @contextlib.contextmanager
    def _connection(self) -> Iterator[happybase.Connection]:
        """A pooled connection; the first one makes sure the tables exist (the console may start before the monitor)."""
        with self._backends.hbase() as connection:
            if not self._ready:
                ensure_monitoring_tables(connection)
                console_tables.ensure_console_tables(connection, self._backends.settings.retention.audit_ttl_s)
                self._ready = True
            yield connection

    # -- series and device health -----------------------------------------------------------------
    def latency(self, day: date) -> list[dict[str, Any]]:
        with self._connection() as conn:
            return queries.latency_by_hour(conn, day)

    def quality(self, day: date, device_ip: str | None, recognizer_ip: str | None) -> list[dict[str, Any]]:
        """The city's counts per hour, or one device's or recogniser's (404 when nobody knows it)."""
        with self._connection() as conn:
            if device_ip or recognizer_ip:
                states = queries.device_states(conn, self._map_path)
                if device_ip and all(d["device_ip"] != device_ip for d in states):
                    raise NotFound("device", device_ip)
                if recognizer_ip and all(d["recognizer_ip"] != recognizer_ip for d in states):
                    raise NotFound("recognizer", recognizer_ip)
            return queries.quality_by_hour(conn, day, device_ip=device_ip, recognizer_ip=recognizer_ip)

    def devices(self) -> list[dict[str, Any]]:
        with self._connection() as conn:
            return queries.device_states(conn, self._map_path)

    def device(self, device_ip: str) -> dict[str, Any]:
        found = [d for d in self.devices() if d["device_ip"] == device_ip]
        if not found:
            raise NotFound("device", device_ip)
        return found[0]

    # -- alerts and acknowledgements --------------------------------------------------------------
    def alerts(self, include_resolved: bool = False) -> list[dict[str, Any]]:
        """The monitor's alerts, or a real Alertmanager's when the console is pointed at one (``alertmanager_url``:
        it holds no resolved alerts, so ``include_resolved`` adds nothing then)."""
        am_url = self._backends.settings.alertmanager_url
        listed = alertmanager_alerts(am_url, self._backends.settings.backend_timeout_s) if am_url else None
        with self._connection() as conn:
            if listed is None:
                listed = queries.alerts(conn, include_resolved=include_resolved)
            acks = {key.decode(): console_tables.read_ack(cells)
                    for key, cells in conn.table(console_tables.ACK_TABLE).scan()}
        return [{**alert, "ack": _ack_of(alert, acks.get(alert["fingerprint"]))} for alert in listed]

    def acknowledge(self, fingerprint: str, username: str) -> dict[str, Any]:
        """Record who took an open alert's incident; a second acknowledgement keeps the first (who came first)."""
        alert = next((a for a in self.alerts(include_resolved=True) if a["fingerprint"] == fingerprint), None)
        if alert is None:
            raise NotFound("alert", fingerprint)
        if alert["status"]["state"] == "resolved":
            raise Conflict(f"alert {fingerprint} is resolved: nothing to acknowledge")
        if alert["ack"] is None:
            ack = {"starts_at": alert["startsAt"], "by": username, "at": rfc3339(time.time())}
            with self._connection() as conn:
                conn.table(console_tables.ACK_TABLE).put(fingerprint.encode(), console_tables.ack_row(**ack))
            alert = {**alert, "ack": {"by": ack["by"], "at": ack["at"]}}
        return alert

    # -- silences ---------------------------------------------------------------------------------
    def silences(self) -> list[dict[str, Any]]:
        now = time.time()
        with self._connection() as conn:
            found = silence_store.load_silences(conn)
        order = {"active": 0, "pending": 1, "expired": 2}
        return sorted((s.api(now) for s in found), key=lambda s: (order[s["status"]["state"]], s["endsAt"]))

    def create_silence(self, matchers: list[Matcher], starts_at: float | None, ends_at: float, username: str,
                       comment: str) -> dict[str, Any]:
        now = time.time()
        starts_at = now if starts_at is None else starts_at
        if ends_at <= now:
            raise Invalid("endsAt", "endsAt is in the past: the silence would never mute anything")
        if ends_at <= starts_at:
            raise Invalid("endsAt", "endsAt must be after startsAt")
        if all(m.matches({}) for m in matchers):
            raise Invalid("matchers", "at least one matcher must not match the empty string "
                                      "(it would silence everything)")
        silence = silence_store.new_silence(matchers, starts_at, ends_at, username, comment)
        with self._connection() as conn:
            silence_store.save_silence(conn, silence)
        return silence.api(now)

    def expire_silence(self, silence_id: str) -> dict[str, Any]:
        with self._connection() as conn:
            silence = silence_store.expire_silence(conn, silence_id)
        if silence is None:
            raise NotFound("silence", silence_id)
        return silence.api(time.time())


def alertmanager_alerts(base_url: str, timeout_s: float) -> list[dict[str, Any]]:
    """``GET <base_url>/api/v2/alerts`` in the console's shape (Alertmanager's ``gettableAlert`` less its receivers;
    ``unprocessed``, not yet routed, shows as active), oldest first; unreachable: :class:`BackendUnavailable`."""
    url = base_url.rstrip("/") + "/api/v2/alerts"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            found = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise BackendUnavailable(ALERTMANAGER, f"{url} answered {exc.code}") from None
    except (OSError, ValueError) as exc:  # refused, timed out (URLError, TimeoutError), not JSON
        raise BackendUnavailable(ALERTMANAGER, f"{url}: {getattr(exc, 'reason', exc)}") from None
    out = []
    for alert in found if isinstance(found, list) else []:
        status = alert.get("status") or {}
        state = status.get("state")
        out.append({"fingerprint": alert["fingerprint"],
                    "status": {"state": state if state in ("active", "suppressed") else "active",
                               "silencedBy": list(status.get("silencedBy") or []),
                               "inhibitedBy": list(status.get("inhibitedBy") or [])},
                    "labels": dict(alert.get("labels") or {}), "annotations": dict(alert.get("annotations") or {}),
                    "startsAt": _rfc3339(alert.get("startsAt")), "endsAt": _rfc3339(alert.get("endsAt"))})
    return sorted(out, key=lambda a: a["startsAt"])


def _rfc3339(text: Any) -> str:
    """Alertmanager's times as the monitor writes them (UTC, milliseconds), so an acknowledgement's incident matches."""
    try:
        return rfc3339(parse_time(text).timestamp())
    except (TypeError, ValueError):
        return str(text or ZERO_TIME)


def _ack_of(alert: dict[str, Any], ack: dict[str, str] | None) -> dict[str, str] | None:
    """The acknowledgement of this incident of the alert, if any (an older incident's does not count)."""
    if ack is None or ack.get("starts_at") != alert["startsAt"]:
        return None
    return {"by": ack["by"], "at": ack["at"]}
