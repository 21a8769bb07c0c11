"""``/api/v1/map``, ``/api/v1/devices``, ``/api/v1/checkpoints/{id}`` through a real console."""

from __future__ import annotations

import json
from datetime import timedelta
from urllib.parse import quote

import httpx
import pytest

from contracts.records import Kind
from deploy.processes.console import ConsoleProcess
from testkit.web_data import T0, StepClock, load, valid_records


@pytest.fixture
def viewer(console: ConsoleProcess) -> httpx.Client:
    return console.client("viewer")


def test_map_is_the_deployment_map_file(viewer: httpx.Client, console: ConsoleProcess) -> None:
    response = viewer.get("/api/v1/map")
    assert response.status_code == 200, response.text
    on_disk = json.loads(console.map_path.read_text())
    assert response.json() == {k: on_disk[k] for k in response.json()}
    assert len(response.json()["checkpoints"]) == 12


def test_devices_carry_their_checkpoint_location(viewer: httpx.Client, console: ConsoleProcess) -> None:
    on_disk = json.loads(console.map_path.read_text())
    devices = viewer.get("/api/v1/devices").json()
    assert {d["device_ip"] for d in devices} == {d["device_ip"] for d in on_disk["devices"]}
    where = {c["checkpoint_id"]: c for c in on_disk["checkpoints"]}
    for device in devices:
        checkpoint = where[device["checkpoint_id"]]
        assert (device["location"]["lat"], device["location"]["lon"]) == (checkpoint["lat"], checkpoint["lon"])
    one = on_disk["checkpoints"][0]["checkpoint_id"]
    only = viewer.get("/api/v1/devices", params={"checkpoint": one}).json()
    assert only and {d["checkpoint_id"] for d in only} == {one}
    bad = viewer.get("/api/v1/devices", params={"checkpoint": "nope"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "checkpoint"]


def test_checkpoint_panel_has_devices_and_latest_captures(viewer: httpx.Client, console: ConsoleProcess) -> None:
    pairs = list(valid_records(300, clock=StepClock(T0 + timedelta(days=60))))
    load(console.backing.gateway.port, pairs)
    record = next(r for k, r in pairs if k is Kind.FACE)
    checkpoint = record["checkpoint_id"]
    response = viewer.get(f"/api/v1/checkpoints/{quote(checkpoint, safe='')}", params={"latest": 5})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["checkpoint"]["checkpoint_id"] == checkpoint and body["location"]["lat"] == body["checkpoint"]["lat"]
    assert {d["kind"] for d in body["devices"]} == {"vehicle", "face"}
    newest = sorted((r for _, r in pairs if r["checkpoint_id"] == checkpoint), key=lambda r: r["capture_time"])[-5:]
    assert [i["record_id"] for i in body["latest"]] == [r["record_id"] for r in reversed(newest)]


def test_unknown_and_malformed_checkpoints(viewer: httpx.Client) -> None:
    assert viewer.get(f"/api/v1/checkpoints/{quote('999999#1#0#0', safe='')}").status_code == 404
    bad = viewer.get("/api/v1/checkpoints/330102")
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["path", "checkpoint_id"]


def test_a_missing_map_is_a_503_naming_it_and_a_new_one_is_picked_up(viewer: httpx.Client,
                                                                      console: ConsoleProcess) -> None:
    path = console.map_path
    saved = path.read_text()
    try:
        path.unlink()
        for url in ("/api/v1/map", "/api/v1/devices"):
            response = viewer.get(url)
            assert response.status_code == 503 and response.json()["backend"] == "map", response.text
        # Searches still answer, without locations.
        assert viewer.get("/api/v1/captures", params={"checkpoint": "330102#1#0#0"}).status_code == 200
        data = json.loads(saved)
        data["checkpoints"] = data["checkpoints"][:3]
        path.write_text(json.dumps(data))
        assert len(viewer.get("/api/v1/map").json()["checkpoints"]) == 3
    finally:
        path.write_text(saved)
    assert len(viewer.get("/api/v1/map").json()["checkpoints"]) == 12
