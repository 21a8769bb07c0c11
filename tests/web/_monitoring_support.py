"""Monitoring data for console tests, written with the monitor's own writers (``monitoring.series``,
``monitoring.store``) into the HBase tables the monitor keeps, as a running monitor would leave them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

from contracts.deployment_map import DeploymentMap
from contracts.hbase import HBaseClient
from contracts.ingest_stats import STAGES, LatencyHistogram
from contracts.records import CITY_TZ
from monitoring.alerts import FIRING, RESOLVED, Alert
from monitoring.config import Health, Rule
from monitoring.health import DEGRADED, HEALTHY, SILENT, DeviceTrack, Fleet
from monitoring.locator import Locator
from monitoring.rules import device_quality
from monitoring.series import Series, quality_scopes
from monitoring.store import Store

DAY = date(2024, 5, 1)
HOUR = 9
"""The local hour of DAY that has data."""
COUNTS = {"produced": 100, "read": 90, "valid": 80, "unrecognized": 7, "invalid": 3}


@dataclass
class Monitored:
    """What was written: a degraded and a silent device (and the rest healthy), their alerts."""

    degraded: str
    silent: str
    recognizer: str
    district: str
    firing_fp: str
    resolved_fp: str


def latency_histogram(low_ms: int, n: int) -> LatencyHistogram:
    histogram = LatencyHistogram()
    histogram.record_counts({low_ms + i: 1 for i in range(n)})
    return histogram


def write_monitoring(hbase_port: int, map_path: Path) -> Monitored:
    store = Store(HBaseClient(port=hbase_port))
    try:
        store.ensure_tables()
        city = DeploymentMap.load(map_path)
        checkpoints = {c.checkpoint_id: c for c in city.checkpoints}
        degraded, silent = city.devices[0], city.devices[1]
        district = checkpoints[degraded.checkpoint_id].district
        t = datetime(DAY.year, DAY.month, DAY.day, HOUR, 30, tzinfo=CITY_TZ).timestamp()
        series = Series(store)
        for i, stage in enumerate(STAGES):
            series.add_latency(stage, t, latency_histogram(100 * (i + 1), 100))
        series.add_counts(quality_scopes(district, degraded.recognizer_ip, degraded.device_ip), t, COUNTS)
        series.flush()
        now = time.time()
        tracks = [DeviceTrack(d.device_ip, d.recognizer_ip, d.checkpoint_id, "capture.vehicle",
                              state=DEGRADED if d is degraded else SILENT if d is silent else HEALTHY, since=now - 60,
                              bad=0.3 if d is degraded else 0.0, images_bad=0.6 if d is degraded else None,
                              reason="records,images" if d is degraded else "") for d in city.devices]
        store.put_states("device", [(track.device_ip, track.to_json()) for track in tracks])
        # The firing alert as the monitor's own rule builds it (labels, location, annotations with catalog key).
        fleet = Fleet(Health(), Locator(map_path), now)
        fleet.locator.refresh()
        fleet.devices[degraded.device_ip] = next(t for t in tracks if t.device_ip == degraded.device_ip)
        rule = Rule("DeviceDegraded", "device_quality", 0.2)
        (candidate,) = device_quality(rule, fleet, now)
        firing = Alert(rule.name, candidate.labels, candidate.annotations, FIRING, now - 30, now, fired_at=now - 20)
        resolved = Alert("DeviceSilent", {"alertname": "DeviceSilent", "severity": "critical",
                                          "device_ip": silent.device_ip}, {"summary": "silent"}, RESOLVED, now - 90,
                         now - 60, fired_at=now - 80, resolved_at=now - 10)
        store.put_states("alert", [(a.fp, {**a.to_json(), "published": a.status, "muting": None})
                                   for a in (firing, resolved)])
        return Monitored(degraded.device_ip, silent.device_ip, degraded.recognizer_ip, district, firing.fp,
                         resolved.fp)
    finally:
        store.close()
