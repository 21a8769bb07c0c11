"""``/api/v1/monitoring/*``, ``/api/v1/alerts`` and ``/api/v1/silences`` against a real console, broker and
HBase gateway, over rows the monitor's own writers put where a running monitor keeps them.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import happybase
import httpx
import pytest

from deploy.processes.console import ConsoleProcess
from monitoring.silences import load_silences
from tests.web._monitoring_support import COUNTS, DAY, HOUR, Monitored, write_monitoring


@pytest.fixture(scope="module")
def monitored(console: ConsoleProcess) -> Monitored:
    return write_monitoring(console.backing.gateway.port, console.map_path)


def field_of(response: httpx.Response) -> list[str]:
    assert response.status_code == 422, response.text
    return [str(d["loc"][-1]) for d in response.json()["detail"]]


def test_latency_has_24_hours_with_every_stage(console: ConsoleProcess, monitored: Monitored) -> None:
    points = console.client("viewer").get("/api/v1/monitoring/latency", params={"day": DAY.isoformat()}).json()
    assert [p["hour"] for p in points] == list(range(24))
    hour = points[HOUR]
    assert hour["count"] == 100
    assert 400 <= hour["p50_ms"] <= hour["p95_ms"] <= hour["p99_ms"] <= 500  # capture_to_ingest: 400..499 ms
    assert hour["stages"]["capture_to_bus"]["count"] == 100
    assert 100 <= hour["stages"]["capture_to_bus"]["p99_ms"] <= 200
    empty = points[HOUR + 1]
    assert empty["count"] == 0 and empty["p99_ms"] is None  # no data: no invented zero


def test_quality_city_device_recognizer(console: ConsoleProcess, monitored: Monitored) -> None:
    viewer = console.client("viewer")
    for params in ({}, {"device_ip": monitored.degraded}, {"recognizer_ip": monitored.recognizer}):
        points = viewer.get("/api/v1/monitoring/quality", params={"day": DAY.isoformat(), **params}).json()
        assert len(points) == 24
        assert {k: points[HOUR][k] for k in COUNTS} == COUNTS, params
        assert points[0]["produced"] == 0
    other = viewer.get("/api/v1/monitoring/quality", params={"day": DAY.isoformat(), "device_ip": monitored.silent})
    assert other.status_code == 200 and other.json()[HOUR]["produced"] == 0


def test_bad_monitoring_input_names_the_field(console: ConsoleProcess, monitored: Monitored) -> None:
    viewer = console.client("viewer")
    assert field_of(viewer.get("/api/v1/monitoring/latency")) == ["day"]
    assert field_of(viewer.get("/api/v1/monitoring/latency", params={"day": "2024-13-01"})) == ["day"]
    assert field_of(viewer.get("/api/v1/monitoring/quality", params={"day": "yesterday"})) == ["day"]
    assert field_of(viewer.get("/api/v1/monitoring/quality",
                               params={"day": DAY.isoformat(), "device_ip": "not-an-ip"})) == ["device_ip"]
    both = viewer.get("/api/v1/monitoring/quality", params={"day": DAY.isoformat(), "device_ip": monitored.degraded,
                                                            "recognizer_ip": monitored.recognizer})
    assert field_of(both) == ["recognizer_ip"]
    unknown = viewer.get("/api/v1/monitoring/quality", params={"day": DAY.isoformat(), "device_ip": "10.254.254.254"})
    assert unknown.status_code == 404 and "10.254.254.254" in unknown.json()["detail"]
    assert viewer.get("/api/v1/monitoring/quality", params={"day": DAY.isoformat(),
                                                            "recognizer_ip": "10.254.254.1"}).status_code == 404
    assert viewer.get("/api/v1/monitoring/devices/10.254.254.254").status_code == 404


def test_devices_have_state_location_and_recognizer(console: ConsoleProcess, monitored: Monitored) -> None:
    devices = {d["device_ip"]: d for d in console.client("viewer").get("/api/v1/monitoring/devices").json()}
    degraded = devices[monitored.degraded]
    assert degraded["state"] == "degraded" and degraded["bad_share"] == pytest.approx(0.3)
    assert degraded["recognizer_ip"] == monitored.recognizer
    assert degraded["location"]["district"] == monitored.district and degraded["location"]["known"]
    assert degraded["location"]["lat"] is not None
    assert devices[monitored.silent]["state"] == "silent"
    one = console.client("viewer").get(f"/api/v1/monitoring/devices/{monitored.degraded}").json()
    assert one == degraded


def test_alerts_list_open_ones_and_acknowledge_once(console: ConsoleProcess, monitored: Monitored) -> None:
    viewer, operator = console.client("viewer"), console.client("operator")
    open_alerts = viewer.get("/api/v1/alerts").json()
    assert [a["fingerprint"] for a in open_alerts] == [monitored.firing_fp]
    assert open_alerts[0]["labels"]["device_ip"] == monitored.degraded and open_alerts[0]["ack"] is None
    everything = viewer.get("/api/v1/alerts", params={"resolved": "true"}).json()
    assert {a["fingerprint"] for a in everything} == {monitored.firing_fp, monitored.resolved_fp}

    assert viewer.post(f"/api/v1/alerts/{monitored.firing_fp}/ack").status_code == 403
    acked = operator.post(f"/api/v1/alerts/{monitored.firing_fp}/ack")
    assert acked.status_code == 200, acked.text
    assert acked.json()["ack"]["by"] == "operator"
    again = console.client("admin").post(f"/api/v1/alerts/{monitored.firing_fp}/ack").json()
    assert again["ack"] == acked.json()["ack"]  # the first one to take it stays on record
    assert viewer.get("/api/v1/alerts").json()[0]["ack"] == acked.json()["ack"]  # stored, shown to everyone

    assert operator.post(f"/api/v1/alerts/{monitored.resolved_fp}/ack").status_code == 409
    assert operator.post("/api/v1/alerts/0123456789abcdef/ack").status_code == 404
    assert field_of(operator.post("/api/v1/alerts/NOT-A-FP/ack")) == ["fingerprint"]
    audit = console.audit(action="alert.ack", q=monitored.firing_fp)
    actions = [(e["action"], e["target"], e["user"]) for e in audit]
    assert ("alert.ack", monitored.firing_fp, "operator") in actions


def _silence(**overrides: object) -> dict[str, object]:
    ends = datetime.now(UTC) + timedelta(hours=1)
    return {"matchers": [{"name": "device_ip", "value": "10.9.9.9"}], "endsAt": ends.isoformat(),
            "comment": "replacing the camera", **overrides}


def test_silences_admin_creates_viewer_reads_admin_expires(console: ConsoleProcess, monitored: Monitored) -> None:
    viewer, operator, admin = console.client("viewer"), console.client("operator"), console.client("admin")
    assert operator.post("/api/v1/silences", json=_silence()).status_code == 403
    created = admin.post("/api/v1/silences", json=_silence(createdBy="someone-else"))
    assert created.status_code == 422  # the author is the caller, never the body
    created = admin.post("/api/v1/silences", json=_silence())
    assert created.status_code == 201, created.text
    silence = created.json()
    assert silence["createdBy"] == "admin" and silence["status"]["state"] == "active"
    listed = {s["id"]: s for s in viewer.get("/api/v1/silences").json()}
    assert listed[silence["id"]]["matchers"] == [{"name": "device_ip", "value": "10.9.9.9", "isRegex": False,
                                                  "isEqual": True}]
    # The monitor reads the same rows (monitoring.silences), so the silence mutes at its next evaluation.
    conn = happybase.Connection("127.0.0.1", console.backing.gateway.port)
    try:
        stored = {s.id: s for s in load_silences(conn)}
    finally:
        conn.close()
    assert stored[silence["id"]].mutes({"device_ip": "10.9.9.9"}, time.time())

    assert viewer.delete(f"/api/v1/silences/{silence['id']}").status_code == 403
    expired = admin.delete(f"/api/v1/silences/{silence['id']}")
    assert expired.status_code == 200 and expired.json()["status"]["state"] == "expired"
    assert admin.delete("/api/v1/silences/" + "0" * 32).status_code == 404


@pytest.mark.parametrize(("body", "field"), [
    ({"matchers": []}, "matchers"),
    ({"matchers": [{"name": "9bad", "value": "x"}]}, "name"),
    ({"matchers": [{"name": "device_ip", "value": "(", "isRegex": True}]}, "matchers"),
    ({"matchers": [{"name": "device_ip", "value": ".*", "isRegex": True}]}, "matchers"),
    ({"comment": "  "}, "comment"),
    ({"endsAt": "2020-01-01T00:00:00+00:00"}, "endsAt"),
    ({"endsAt": "tomorrow"}, "endsAt"),
    ({"endsAt": "2099-01-01T00:00:00"}, "endsAt"),  # no offset: ambiguous
    ({"startsAt": "2099-01-02T00:00:00+00:00", "endsAt": "2099-01-01T00:00:00+00:00"}, "endsAt"),
])
def test_bad_silence_is_422_naming_the_field(console: ConsoleProcess, body: dict[str, object], field: str) -> None:
    response = console.client("admin").post("/api/v1/silences", json=_silence(**body))
    fields = field_of(response)
    assert any(field in str(d["loc"]) for d in response.json()["detail"]), (fields, response.text)
