"""The monitor's read side, for the console (``/api/v1/monitoring/*``, ``/api/v1/alerts``).

Every function takes a happybase connection and returns plain JSON-ready values; the shapes are the
issue's Interface section:

* :func:`latency_by_hour` -> 24 points ``{"hour", "count", "p50_ms", "p95_ms", "p99_ms", "stages":
  {stage: {"count", "p50_ms", "p95_ms", "p99_ms"}}}``; the top level is the end-to-end stage
  ``capture_to_ingest`` (the book's figure 10-6); an hour without data has ``count`` 0 and ``None``
  percentiles.
* :func:`quality_by_hour` -> 24 points ``{"hour", "produced", "read", "valid", "unrecognized",
  "invalid"}`` for the city, one device or one recogniser (figure 10-7).
* :func:`device_states` -> one entry per device ``{"device_ip", "state", "since", "last_seen",
  "bad_share", "images_bad_share", "reason", "video_problem", "recognizer_ip", "checkpoint_id", "location":
  {"district", "crossroad", "direction", "lat", "lon", "known"}}`` (figure 10-9); ``state`` is healthy / degraded /
  silent / recovering; ``reason`` says why a degraded (or recovering) device was degraded: records, images, video,
  comma-joined; ``video_problem`` what is (or was) wrong with a camera's video: gap (silent), undecodable, black,
  blurred or frozen (degraded), "" for none and for every capture device.
* :func:`alerts` -> Alertmanager API v2-like alerts ``{"fingerprint", "status": {"state":
  "active"|"suppressed"|"resolved", "silencedBy", "inhibitedBy"}, "labels", "annotations",
  "startsAt", "endsAt"}`` (pending ones are not listed).

``day`` is the city's local date (``contracts.records.CITY_TZ``); hours are local hours 0..23.
"""

from __future__ import annotations

from collections import Counter
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import Any

from contracts.ingest_stats import STAGES, LatencyHistogram
from contracts.records import CITY_TZ
from contracts.tables.monitoring import (
    HOUR_COLUMN,
    LATENCY,
    QUALITY,
    SERIES_TABLE,
    STATE_TABLE,
    hour_of_key,
    read_state,
    series_prefix,
)

from .alerts import PENDING, RESOLVED, Alert
from .health import SILENT
from .locator import Locator
from .series import decode

END_TO_END = "capture_to_ingest"
QUALITY_FIELDS = ("produced", "read", "valid", "unrecognized", "invalid")


def day_hours(day: date) -> list[int]:
    """Epoch seconds of the 24 local hours of ``day`` in the city."""
    start = datetime.combine(day, time(0), CITY_TZ)
    return [int((start + timedelta(hours=h)).timestamp()) for h in range(24)]


def _hours(conn: Any, metric: str, tags: str, day: date) -> dict[int, bytes]:
    """Local hour -> the stored hour cell, for one series and day (one scan)."""
    hours = day_hours(day)
    prefix = series_prefix(metric, tags)
    rows = conn.table(SERIES_TABLE).scan(row_start=prefix + f"{hours[0]:010d}".encode(),
                                         row_stop=prefix + f"{hours[-1] + 3600:010d}".encode(),
                                         columns=[HOUR_COLUMN])
    index = {start: h for h, start in enumerate(hours)}
    return {index[hour_of_key(key)]: cells[HOUR_COLUMN] for key, cells in rows
            if hour_of_key(key) in index and HOUR_COLUMN in cells}


def _percentiles(histogram: LatencyHistogram | None) -> dict[str, Any]:
    if histogram is None or not histogram.count:
        return {"count": 0, "p50_ms": None, "p95_ms": None, "p99_ms": None}
    return {"count": histogram.count, "p50_ms": histogram.percentile(50), "p95_ms": histogram.percentile(95),
            "p99_ms": histogram.percentile(99)}


def latency_by_hour(conn: Any, day: date) -> list[dict[str, Any]]:
    per_stage = {stage: _hours(conn, LATENCY, f"stage={stage}", day) for stage in STAGES}
    points = []
    for hour in range(24):
        stages = {}
        for stage in STAGES:
            raw = per_stage[stage].get(hour)
            stages[stage] = _percentiles(decode(LATENCY, raw) if raw else None)  # type: ignore[arg-type]
        points.append({"hour": hour, **stages[END_TO_END], "stages": stages})
    return points


def quality_scope(device_ip: str | None = None, recognizer_ip: str | None = None,
                  district: str | None = None) -> str:
    if sum(x is not None for x in (device_ip, recognizer_ip, district)) > 1:
        raise ValueError("choose one of device_ip, recognizer_ip, district")
    if device_ip:
        return f"device={device_ip}"
    if recognizer_ip:
        return f"recognizer={recognizer_ip}"
    if district:
        return f"district={district}"
    return "city"


def quality_by_hour(conn: Any, day: date, device_ip: str | None = None, recognizer_ip: str | None = None,
                    district: str | None = None) -> list[dict[str, Any]]:
    scope = quality_scope(device_ip, recognizer_ip, district)
    cells = _hours(conn, QUALITY, f"scope={scope}", day)
    points = []
    for hour in range(24):
        counts: Counter[str] = decode(QUALITY, cells[hour]) if hour in cells else Counter()  # type: ignore[assignment]
        points.append({"hour": hour, **{name: int(counts.get(name, 0)) for name in QUALITY_FIELDS}})
    return points


def device_states(conn: Any, map_path: Path) -> list[dict[str, Any]]:
    """Every device the monitor has judged, plus map devices it has not heard of yet (silent)."""
    locator = Locator(map_path)
    locator.refresh()
    rows = {ip: row for ip, row in _states(conn, "device")}
    out = []
    for ip in sorted(set(rows) | set(locator.devices())):
        row = rows.get(ip, {})
        where = locator.locate(ip, row.get("recognizer_ip", ""), row.get("checkpoint_id", ""))
        out.append({"device_ip": ip, "state": row.get("state", SILENT),
                    "since": row.get("since"), "last_seen": row.get("last_seen"), "bad_share": row.get("bad"),
                    "images_bad_share": row.get("images_bad"), "reason": row.get("reason", ""),
                    "video_problem": row.get("video_problem") or "",
                    "recognizer_ip": where.recognizer_ip, "checkpoint_id": where.checkpoint_id,
                    "location": {"district": where.district, "crossroad": where.crossroad,
                                 "direction": where.direction, "lat": where.lat, "lon": where.lon,
                                 "known": where.known}})
    return out


def alerts(conn: Any, include_resolved: bool = True) -> list[dict[str, Any]]:
    out = []
    for _, row in _states(conn, "alert"):
        muting = row.pop("muting", None) or {}
        row.pop("published", None)
        alert = Alert.from_json(row)
        if alert.state == PENDING or (alert.state == RESOLVED and not include_resolved):
            continue
        event = alert.event()
        state = "resolved" if alert.state == RESOLVED else "suppressed" if muting else "active"
        out.append({"fingerprint": alert.fp, "status": {"state": state,
                                                        "silencedBy": muting.get("silencedBy", []),
                                                        "inhibitedBy": muting.get("inhibitedBy", [])},
                    **{k: event[k] for k in ("labels", "annotations", "startsAt", "endsAt")}})
    return sorted(out, key=lambda a: (a["status"]["state"] == "resolved", a["startsAt"]))


def _states(conn: Any, kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [(key.decode().split("|", 1)[1], read_state(cells))
            for key, cells in conn.table(STATE_TABLE).scan(row_prefix=f"{kind}|".encode())]
