"""The ``alerts`` topic's record: an alert as Alertmanager's API and webhook show it.

Every business that raises alerts (the monitor's rules, the surveillance service's watchlist hits and
cloned plates) publishes this one shape, keyed by the fingerprint, so the console, the notifier and any
Alertmanager-compatible receiver read them alike. An alert is identified by its label set; its
fingerprint is the one Prometheus and Alertmanager compute (``model.LabelSet.Fingerprint``: FNV-1a 64
over the sorted names and values, each followed by the 0xff separator, printed as 16 hex digits).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

_OFFSET64 = 14695981039346656037
_PRIME64 = 1099511628211
_MASK64 = (1 << 64) - 1
_SEPARATOR = 0xFF
ZERO_TIME = "0001-01-01T00:00:00Z"
"""Alertmanager's ``endsAt`` of an alert that has not ended (Go's zero time)."""
FIRING, RESOLVED = "firing", "resolved"


def label_hash(labels: Mapping[str, str]) -> int:
    """Prometheus' ``labelSetToFingerprint``."""
    h = _OFFSET64
    for name in sorted(labels):
        for part in (name, labels[name]):
            for byte in part.encode():
                h = ((h ^ byte) * _PRIME64) & _MASK64
            h = ((h ^ _SEPARATOR) * _PRIME64) & _MASK64
    return h


def fingerprint(labels: Mapping[str, str]) -> str:
    return f"{label_hash(labels):016x}"


def rfc3339(epoch_s: float | None) -> str:
    """Times as Alertmanager writes them (UTC, RFC 3339 with milliseconds)."""
    if epoch_s is None:
        return ZERO_TIME
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def alert_record(status: str, labels: Mapping[str, str], annotations: Mapping[str, str],
                 starts_at: float | None, ends_at: float | None = None, generator_url: str = "") -> dict[str, Any]:
    """One alert state change, the value published on ``alerts`` under the key ``fingerprint(labels)``."""
    if status not in (FIRING, RESOLVED):
        raise ValueError(f"alert status must be {FIRING!r} or {RESOLVED!r}, not {status!r}")
    return {"status": status, "labels": dict(labels), "annotations": dict(annotations),
            "startsAt": rfc3339(starts_at), "endsAt": rfc3339(ends_at),
            "generatorURL": generator_url, "fingerprint": fingerprint(labels)}
