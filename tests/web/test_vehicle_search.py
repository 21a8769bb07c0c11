"""``GET /api/v1/captures/vehicles`` through a real console, on 20,000 captures (~16,000 vehicles) written as the
ingest writes them: every answer, paged to its end, equals a brute scan of the same records (hypothesis draws the
queries).

The records are the simulator's (the console's city, one capture a second from ``WINDOW_START``, a day no other test
writes), so any query inside that window sees exactly these rows whatever else the session's gateway holds.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts.records import Kind, epoch_ms, format_time
from contracts.tables import captures as layout
from deploy.processes.console import ConsoleProcess
from ingest.city import DISTRICTS, build_city
from testkit.search import REASON, URL, Record, brute, every_page
from testkit.web_data import T0, StepClock, load, valid_records
from tests.web.conftest import MAP_CHECKPOINTS, MAP_SEED

CAPTURES = 20_000
WINDOW_START = T0 + timedelta(days=200)
STEP = timedelta(seconds=1)
WINDOW_END = WINDOW_START + CAPTURES * STEP
CITY = build_city(MAP_SEED, MAP_CHECKPOINTS)


@pytest.fixture(scope="module")
def written(console: ConsoleProcess) -> list[Record]:
    """The vehicle records as the ingest writes them (main row and every index row), newest first, each with its
    capture time in ms as ``_ms`` (what the brute scan compares). Faces are written too: a checkpoint's index
    holds both, and a search there must step over the faces."""
    pairs = list(valid_records(CAPTURES, seed=29, clock=StepClock(WINDOW_START, STEP), face_share=0.2))
    load(console.backing.gateway.port, pairs)
    records = [{**record, "_ms": epoch_ms(record["capture_time"])} for kind, record in pairs if kind is Kind.VEHICLE]
    return sorted(records, key=lambda r: (-r["_ms"], r["record_id"]))


@pytest.fixture(scope="module")
def viewer(console: ConsoleProcess) -> httpx.Client:
    return console.client("viewer")


def iso(moment: datetime) -> str:
    return format_time(moment)


def window(**conditions: Any) -> dict[str, Any]:
    """A query over the whole data window."""
    return {"from": iso(WINDOW_START), "to": iso(WINDOW_END), **conditions}


def masked(plate: str, draw: st.DrawFn) -> str:
    """A pattern ``plate`` matches: some characters become ``?``, a run becomes ``*``, at least one kept."""
    chars = [c if draw(st.booleans()) else "?" for c in plate]
    keep = draw(st.integers(0, len(chars) - 1))
    chars[keep] = plate[keep]
    run = draw(st.integers(0, len(chars)))
    cut = draw(st.integers(run, len(chars)))
    if cut > run and not (run <= keep < cut):
        chars[run:cut] = ["*"]
    return "".join(chars)


@st.composite
def queries(draw: st.DrawFn, records: list[Record]) -> dict[str, Any]:
    """A time range inside the window and a consistent mix of conditions, with values the data has."""
    span_s = int((WINDOW_END - WINDOW_START).total_seconds())
    length = draw(st.sampled_from((60, 600, 3600, span_s)))
    offset = draw(st.integers(-60, span_s - length + 60))
    params: dict[str, Any] = {"from": iso(WINDOW_START + timedelta(seconds=offset)),
                              "to": iso(WINDOW_START + timedelta(seconds=offset + length))}
    sample = draw(st.sampled_from(records))
    checkpoint = next(c for c in CITY.checkpoints if c.checkpoint_id == sample["checkpoint_id"])
    chosen = draw(st.sets(st.sampled_from(("district", "checkpoint", "lane", "plate", "pattern", "plate_color",
                                           "vehicle_color", "vehicle_type", "brand", "direction")), max_size=3))
    if "district" in chosen:
        params["district"] = checkpoint.district
    if "checkpoint" in chosen:
        params["checkpoint"] = checkpoint.checkpoint_id
    if "lane" in chosen:
        params["lane"] = draw(st.integers(1, checkpoint.lanes))
    if "plate" in chosen:
        params["plate"] = sample["plate_number"]
    elif "pattern" in chosen:
        params["plate"] = masked(sample["plate_number"], draw)
    for name, field in (("plate_color", "plate_color"), ("vehicle_color", "vehicle_color"),
                        ("vehicle_type", "vehicle_type"), ("brand", "vehicle_brand")):
        if name in chosen:
            params[name] = sample[field]
    if "direction" in chosen:
        params["direction"] = layout.direction_of(checkpoint.checkpoint_id)
    expected = len(brute(records, params))
    params["limit"] = min(500, max(draw(st.sampled_from((5, 50))), expected // 4 + 1))
    return params


def test_every_query_pages_to_what_a_brute_scan_finds(viewer: httpx.Client, written: list[Record]) -> None:
    @settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(queries(written))
    def check(params: dict[str, Any]) -> None:
        got = [item["record_id"] for body in every_page(viewer, params) for item in body["items"]]
        assert got == brute(written, params)

    check()


def test_items_carry_the_searched_attributes_and_the_location(viewer: httpx.Client, written: list[Record]) -> None:
    record = written[1234]
    body = every_page(viewer, window(plate=record["plate_number"], limit=500))[0]
    item = next(i for i in body["items"] if i["record_id"] == record["record_id"])
    assert {k: item[k] for k in ("plate_number", "plate_color", "vehicle_color", "vehicle_type", "vehicle_brand",
                                 "lane", "checkpoint_id", "device_ip", "capture_time")} == {
        k: record[k] for k in ("plate_number", "plate_color", "vehicle_color", "vehicle_type", "vehicle_brand",
                               "lane", "checkpoint_id", "device_ip", "capture_time")}
    checkpoint = next(c for c in CITY.checkpoints if c.checkpoint_id == record["checkpoint_id"])
    assert item["kind"] == "vehicle" and item["ingest_time"]
    assert (item["location"]["lat"], item["location"]["district"]) == (checkpoint.lat, checkpoint.district)


def test_a_rare_condition_over_the_window_answers_short_pages_within_the_scan_budget(
        viewer: httpx.Client, written: list[Record]) -> None:
    """Every district merged, one rare colour: each request stops after its budget of index rows, with a cursor."""
    params = window(vehicle_color="yellow", limit=200)
    bodies = every_page(viewer, params)
    assert len(bodies) >= 4 and any(len(b["items"]) < 200 and b["next"] for b in bodies)
    assert [i["record_id"] for b in bodies for i in b["items"]] == brute(written, params)


def test_the_search_is_audited_with_its_conditions_and_reason(console: ConsoleProcess, written: list[Record]) -> None:
    reason = f"case-{uuid.uuid4().hex[:10]}"
    params = window(district=DISTRICTS[0][0], vehicle_color="red", limit=5, reason=reason)
    assert console.client("viewer").get(URL, params=params).status_code == 200
    [entry] = console.audit(until=lambda entries: len(entries) == 1, q=reason)
    assert (entry["action"], entry["target"], entry["reason"]) == ("captures.vehicle_search", DISTRICTS[0][0], reason)
    assert entry["query"]["district"] == DISTRICTS[0][0] and entry["query"]["vehicle_color"] == "red"


CHECKPOINT = CITY.checkpoints[0]
OTHER = next(c for c in CITY.checkpoints if c.district != CHECKPOINT.district)
FACING_ELSEWHERE = next(c for c in CITY.checkpoints if c.direction != CHECKPOINT.direction)


@pytest.mark.parametrize(("params", "field"), [
    ({"plate": "*"}, "plate"),
    ({"plate": "??*?"}, "plate"),
    ({"plate": "浙a*"}, "plate"),
    ({"plate": "浙A1"}, "plate"),
    ({"to": iso(WINDOW_START + timedelta(days=31, seconds=1))}, "to"),
    ({"to": iso(WINDOW_START)}, "to"),
    ({"from": "2026-09-18T08:00:00"}, "from"),
    ({"from": None}, "from"),
    ({"cursor": "%%%"}, "cursor"),
    ({"cursor": "bm90LW91cnM"}, "cursor"),
    ({"checkpoint": CHECKPOINT.checkpoint_id, "lane": CHECKPOINT.lanes + 1}, "lane"),
    ({"lane": 9}, "lane"),
    ({"district": "110101"}, "district"),
    ({"district": "33010x"}, "district"),
    ({"checkpoint": "330102#99#0#0"}, "checkpoint"),
    ({"checkpoint": OTHER.checkpoint_id, "district": CHECKPOINT.district}, "checkpoint"),
    ({"direction": "7"}, "direction"),
    ({"direction": "N"}, "direction"),
    ({"checkpoint": CHECKPOINT.checkpoint_id, "direction": layout.direction_of(FACING_ELSEWHERE.checkpoint_id)},
     "direction"),
    ({"limit": 0}, "limit"),
    ({"reason": None}, "reason"),
])
def test_bad_input_is_a_422_naming_the_field(viewer: httpx.Client, params: dict[str, Any], field: str) -> None:
    query = {k: v for k, v in {**window(reason=REASON), **params}.items() if v is not None}
    response = viewer.get(URL, params=query)
    assert response.status_code == 422, response.text
    assert [e["loc"] for e in response.json()["detail"]] == [["query", field]]


def test_a_cursor_from_another_search_is_refused(viewer: httpx.Client, written: list[Record]) -> None:
    cursor = viewer.get(URL, params=window(vehicle_color="white", limit=1, reason=REASON)).json()["next"]
    assert cursor
    for other in (window(vehicle_color="black"), {**window(vehicle_color="white"), "to": iso(WINDOW_END - STEP)}):
        response = viewer.get(URL, params={**other, "cursor": cursor, "reason": REASON})
        assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["query", "cursor"]
    assert viewer.get(URL, params=window(vehicle_color="white", cursor=cursor, reason=REASON)).status_code == 200
