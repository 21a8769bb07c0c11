"""``/api/v1/captures`` through a real console, on rows the capture slice's writer put into the gateway.

The records come from the simulator's generator (with a stepping clock, so capture times are known)
and go through ``spark_jobs.capture_writer.process_records`` exactly as the ingest job's tasks
do: valid ones reach the main and index tables, unreadable and broken ones do not.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, timedelta
from typing import Any

import httpx
import pytest

from contracts import records
from contracts.hbase import HBaseClient
from contracts.records import Kind, epoch_ms, format_time
from contracts.topics import Topics
from deploy.processes.console import ConsoleProcess
from ingest.city import build_city
from ingest.traffic import Traffic, TrafficConfig
from spark_jobs.capture_writer import WriterSettings, close_cached_clients, process_records
from testkit.web_data import T0, StepClock, as_plate, create_tables, load, valid_records
from tests.web.conftest import MAP_CHECKPOINTS, MAP_SEED

TOPICS = Topics()
REASON = "case 2026-0042"
"""A search by plate needs a reason (kept in the audit trail)."""


@pytest.fixture(scope="module")
def written(console: ConsoleProcess) -> list[tuple[Kind, dict[str, Any]]]:
    """800 raw captures (some unreadable, some broken) through the ingest writer; the valid ones, as written."""
    traffic = Traffic(build_city(MAP_SEED, MAP_CHECKPOINTS),
                      TrafficConfig(seed=5, malformed_rate=0.05, failure_rate=0.1, target_every=20),
                      clock=StepClock(T0 - timedelta(days=30)))
    rows = [(e.key, e.value, TOPICS.of_kind(e.kind), 0, offset, None)
            for offset, e in enumerate(traffic.records(800, 0.0))]
    settings = WriterSettings(HBaseClient(port=console.backing.gateway.port), console.backing.broker.bootstrap,
                              {TOPICS.vehicle: "vehicle", TOPICS.face: "face"})
    create_tables(console.backing.gateway.port)
    try:
        process_records(rows, settings)
    finally:
        close_cached_clients()
    valid = []
    for _, value, topic, *_ in rows:
        kind = TOPICS.kind_of(topic)
        assert kind is not None
        checked = records.parse(kind, value)
        if checked.status is records.Status.VALID and checked.record is not None:
            valid.append((kind, checked.record))
    assert 500 < len(valid) < 800
    return valid


@pytest.fixture
def viewer(console: ConsoleProcess) -> httpx.Client:
    return console.client("viewer")


def pages(client: httpx.Client, limit: int, **params: str) -> list[list[dict[str, Any]]]:
    out, cursor = [], None
    while True:
        query = {**params, "limit": str(limit), "reason": REASON, **({"cursor": cursor} if cursor else {})}
        response = client.get("/api/v1/captures", params=query)
        assert response.status_code == 200, response.text
        body = response.json()
        out.append(body["items"])
        if body["next"] is None:
            return out
        assert len(body["items"]) == limit
        cursor = body["next"]


def newest_first(found: list[dict[str, Any]]) -> list[str]:
    return [r["record_id"] for r in sorted(found, key=lambda r: (-epoch_ms(r["capture_time"]), r["record_id"]))]


def busiest_plate(written: list[tuple[Kind, dict[str, Any]]]) -> str:
    plates = [r["plate_number"] for k, r in written if k is Kind.VEHICLE]
    return max(set(plates), key=plates.count)


def test_plate_search_pages_through_every_capture_once(viewer: httpx.Client, written: list) -> None:
    plate = busiest_plate(written)  # a simulator target: seen along its route
    expected = [r for k, r in written if k is Kind.VEHICLE and r["plate_number"] == plate]
    assert len(expected) >= 5
    got = [item for page in pages(viewer, 2, plate=plate) for item in page]
    assert [i["record_id"] for i in got] == newest_first(expected)
    first = got[0]
    record = next(r for r in expected if r["record_id"] == first["record_id"])
    assert first["kind"] == "vehicle" and first["plate_number"] == plate
    assert first["device_ip"] == record["device_ip"] and first["checkpoint_id"] == record["checkpoint_id"]
    checkpoint = next(c for c in build_city(MAP_SEED, MAP_CHECKPOINTS).checkpoints
                      if c.checkpoint_id == record["checkpoint_id"])
    assert first["location"]["lat"] == checkpoint.lat and first["location"]["district"] == checkpoint.district


def test_checkpoint_search_honours_the_time_range(viewer: httpx.Client, written: list) -> None:
    checkpoint = next(r["checkpoint_id"] for k, r in written if k is Kind.FACE)
    here = sorted((r for _, r in written if r["checkpoint_id"] == checkpoint),
                  key=lambda r: epoch_ms(r["capture_time"]))
    assert len(here) > 20
    start, end = here[3]["capture_time"], here[-4]["capture_time"]
    inside = [r for r in here if epoch_ms(start) <= epoch_ms(r["capture_time"]) < epoch_ms(end)]
    got = [item for page in pages(viewer, 5, checkpoint=checkpoint, start=start, end=end) for item in page]
    assert [i["record_id"] for i in got] == newest_first(inside)
    assert {i["kind"] for i in got} == {"vehicle", "face"}
    # The same instant written in UTC selects the same rows.
    utc = records.parse_time(start).astimezone(UTC).isoformat()
    again = [item for page in pages(viewer, 500, checkpoint=checkpoint, start=utc, end=end) for item in page]
    assert [i["record_id"] for i in again] == [i["record_id"] for i in got]


def test_only_valid_records_are_found(viewer: httpx.Client, written: list, console: ConsoleProcess) -> None:
    ids = {r["record_id"] for _, r in written}
    checkpoints = {r["checkpoint_id"] for _, r in written}
    seen = set()
    for checkpoint in checkpoints:
        seen |= {i["record_id"] for page in pages(viewer, 500, checkpoint=checkpoint,
                                                   end=format_time(T0 - timedelta(days=20))) for i in page}
    assert seen == ids


def test_detail_is_the_whole_record_with_ingest_time_and_latency(viewer: httpx.Client, written: list) -> None:
    for kind, record in (next(p for p in written if p[0] is kind) for kind in Kind):
        response = viewer.get(f"/api/v1/captures/{kind.value}/{record['record_id']}")
        assert response.status_code == 200, response.text
        body = response.json()
        shown = {k: v for k, v in record.items() if k != "feature"}  # a viewer gets no face feature vector
        assert {k: body[k] for k in shown} == shown and "feature" not in body
        assert body["kind"] == kind.value and body["location"]["crossroad"] >= 1
        assert body["latency_ms"] == epoch_ms(body["ingest_time"]) - epoch_ms(record["capture_time"])
    assert viewer.get("/api/v1/captures/vehicle/10.9.9.9-1").status_code == 404
    face_id = next(r["record_id"] for k, r in written if k is Kind.FACE)
    assert viewer.get(f"/api/v1/captures/vehicle/{face_id}").status_code == 404


@pytest.mark.parametrize(("params", "field"), [
    ({"plate": "<script>"}, "plate"),
    ({"plate": "浙A"}, "plate"),
    ({"checkpoint": "110#1"}, "checkpoint"),
    ({}, "plate"),
    ({"plate": "浙AWL999", "checkpoint": "330102#1#0#0"}, "checkpoint"),
    ({"checkpoint": "330102#1#0#0", "start": "2026-03-02T08:00:00"}, "start"),
    ({"checkpoint": "330102#1#0#0", "end": "yesterday"}, "end"),
    ({"checkpoint": "330102#1#0#0", "start": "2026-03-02T09:00:00+08:00", "end": "2026-03-02T08:00:00+08:00"}, "end"),
    ({"plate": "浙AWL999", "limit": "0"}, "limit"),
    ({"plate": "浙AWL999", "limit": "501"}, "limit"),
    ({"plate": "浙AWL999", "cursor": "%%%"}, "cursor"),
])
def test_bad_search_input_is_a_422_naming_the_field(viewer: httpx.Client, params: dict[str, str], field: str) -> None:
    response = viewer.get("/api/v1/captures", params=params)
    assert response.status_code == 422, response.text
    assert [e["loc"] for e in response.json()["detail"]] == [["query", field]]


def test_a_cursor_from_another_search_is_refused(viewer: httpx.Client, written: list) -> None:
    plate = busiest_plate(written)
    cursor = viewer.get("/api/v1/captures", params={"plate": plate, "limit": 1, "reason": REASON}).json()["next"]
    other = next(r["plate_number"] for k, r in written if k is Kind.VEHICLE and r["plate_number"] != plate)
    response = viewer.get("/api/v1/captures", params={"plate": other, "cursor": cursor, "reason": REASON})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "cursor"]
    assert viewer.get("/api/v1/captures/bicycle/x-1").status_code == 422


@pytest.mark.slow
def test_a_plate_with_10000_captures_pages_fast_over_http(viewer: httpx.Client, console: ConsoleProcess) -> None:
    plate = "浙A9T000"
    pairs = as_plate(list(valid_records(10_100, seed=31, clock=StepClock(T0 + timedelta(days=3)),
                                        face_share=0.0)), plate)[:10_000]
    load(console.backing.gateway.port, pairs)
    got: list[dict[str, Any]] = []
    timings: list[float] = []
    cursor = None
    while True:
        response = viewer.get("/api/v1/captures", params={"plate": plate, "limit": 100, "reason": REASON,
                                                          **({"cursor": cursor} if cursor else {})})
        assert response.status_code == 200, response.text
        timings.append(response.elapsed.total_seconds())
        got += response.json()["items"]
        cursor = response.json()["next"]
        if cursor is None:
            break
    assert len(timings) == 100 and len({i["record_id"] for i in got}) == 10_000
    assert [i["record_id"] for i in got] == newest_first([r for _, r in pairs])
    # Deep into the trajectory a page costs what the first ones do: nothing before the cursor is read.
    early, late = sorted(timings[:10])[5], sorted(timings[-10:])[5]
    assert late < 3 * early + 0.05, (early, late)


def test_concurrent_searches_all_answer(console: ConsoleProcess, written: list) -> None:
    """Regression: an HBase connection lent in one worker thread and returned from another broke the request."""
    plates = sorted({r["plate_number"] for k, r in written if k is Kind.VEHICLE})[:40]
    client = console.client("viewer")

    def one(n: int) -> int:
        return client.get("/api/v1/captures", params={"plate": plates[n % len(plates)], "limit": 5,
                                                      "reason": REASON}).status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(one, range(300)))
    assert statuses == [200] * 300
