"""Capture search (web.services.captures) against a real gateway holding rows the ingest writer wrote."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import happybase
import pytest

from contracts.records import Kind, epoch_ms
from deploy.processes.gateway import Gateway, start_gateway
from testkit.web_data import T0, StepClock, as_plate, load, valid_records
from web.services import captures
from web.services.errors import Invalid, NotFound

PLATE = "浙AZZ001"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = start_gateway(tmp_path_factory.mktemp("captures") / "hbase")
    yield gw
    gw.kill()


@pytest.fixture(scope="module")
def data(gateway: Gateway) -> list[tuple[Kind, dict[str, Any]]]:
    pairs = list(valid_records(600, clock=StepClock()))
    # A car that crosses the city: every 5th vehicle capture of a second stream is it.
    car = as_plate(list(valid_records(300, seed=11, clock=StepClock(T0 + timedelta(hours=1))))[::5], PLATE)
    load(gateway.port, pairs + car)
    return pairs + car


@pytest.fixture
def conn(gateway: Gateway) -> Iterator[happybase.Connection]:
    c = gateway.connect()
    yield c
    c.close()


def nowhere(_checkpoint: str) -> None:
    return None


def every_page(fetch: Any, limit: int) -> list[list[dict[str, Any]]]:
    pages, cursor = [], None
    while True:
        page = fetch(limit, cursor)
        pages.append(page.items)
        if page.next is None:
            return pages
        cursor = captures.decode_cursor(page.next)


def newest_first(records: list[dict[str, Any]]) -> list[str]:
    return [r["record_id"] for r in sorted(records, key=lambda r: (-epoch_ms(r["capture_time"]), r["record_id"]))]


def test_plate_trajectory_pages_return_every_capture_once_newest_first(
        conn: happybase.Connection, data: list[tuple[Kind, dict[str, Any]]]) -> None:
    expected = [r for k, r in data if k is Kind.VEHICLE and r["plate_number"] == PLATE]
    assert len(expected) > 20
    pages = every_page(lambda limit, cursor: captures.plate_trajectory(
        conn, PLATE, None, None, limit, cursor, nowhere), 7)
    assert all(len(p) == 7 for p in pages[:-1]) and 1 <= len(pages[-1]) <= 7
    got = [item for page in pages for item in page]
    assert [i["record_id"] for i in got] == newest_first(expected)
    by_id = {r["record_id"]: r for r in expected}
    for item in got:
        record = by_id[item["record_id"]]
        assert item["plate_number"] == PLATE and item["kind"] == "vehicle"
        assert item["capture_time"] == record["capture_time"] and item["checkpoint_id"] == record["checkpoint_id"]
        assert item["device_ip"] == record["device_ip"] and item["ingest_time"] is not None


def test_a_full_last_page_has_no_next_cursor(conn: happybase.Connection, data: list) -> None:
    total = sum(1 for k, r in data if k is Kind.VEHICLE and r["plate_number"] == PLATE)
    page = captures.plate_trajectory(conn, PLATE, None, None, total, None, nowhere)
    assert len(page.items) == total and page.next is None
    assert captures.plate_trajectory(conn, "浙A00000", None, None, 10, None, nowhere).items == []


def test_checkpoint_range_is_start_inclusive_end_exclusive(
        conn: happybase.Connection, data: list[tuple[Kind, dict[str, Any]]]) -> None:
    checkpoint = next(r["checkpoint_id"] for k, r in data if k is Kind.FACE)
    at = sorted((r for _, r in data if r["checkpoint_id"] == checkpoint), key=lambda r: epoch_ms(r["capture_time"]))
    assert len(at) > 30 and {k for k, r in data if r["checkpoint_id"] == checkpoint} == {Kind.VEHICLE, Kind.FACE}
    start, end = epoch_ms(at[5]["capture_time"]), epoch_ms(at[25]["capture_time"])
    inside = [r for r in at if start <= epoch_ms(r["capture_time"]) < end]
    assert len(inside) == 20

    pages = every_page(lambda limit, cursor: captures.checkpoint_captures(
        conn, checkpoint, start, end, limit, cursor, nowhere), 6)
    got = [item for page in pages for item in page]
    assert [i["record_id"] for i in got] == newest_first(inside)
    assert {i["kind"] for i in got} == {r_kind.value for r_kind, r in data if r in inside}
    # Open ends: everything from start on, everything before end.
    later = captures.checkpoint_captures(conn, checkpoint, start, None, 500, None, nowhere).items
    assert [i["record_id"] for i in later] == newest_first(at[5:])
    earlier = captures.checkpoint_captures(conn, checkpoint, None, end, 500, None, nowhere).items
    assert [i["record_id"] for i in earlier] == newest_first(at[:25])


def test_detail_has_the_whole_record_ingest_time_and_latency(conn: happybase.Connection, data: list) -> None:
    kind, record = next((k, r) for k, r in data if k is Kind.FACE)
    detail = captures.capture_detail(conn, kind, record["record_id"], lambda c: {"checkpoint": c})
    assert {k: detail[k] for k in record} == record
    assert detail["kind"] == "face" and detail["latency_ms"] == 1500
    assert detail["location"] == {"checkpoint": record["checkpoint_id"]}
    with pytest.raises(NotFound):
        captures.capture_detail(conn, Kind.VEHICLE, record["record_id"], nowhere)


def test_bad_cursor_limit_and_range_name_the_field(conn: happybase.Connection, data: list) -> None:
    other = captures.plate_trajectory(conn, PLATE, None, None, 2, None, nowhere).next
    assert other is not None
    with pytest.raises(Invalid) as exc:
        captures.checkpoint_captures(conn, data[0][1]["checkpoint_id"], None, None, 5,
                                     captures.decode_cursor(other), nowhere)
    assert exc.value.field == "cursor"
    with pytest.raises(ValueError):
        captures.decode_cursor("not base64!")
    with pytest.raises(Invalid) as exc:
        captures.plate_trajectory(conn, PLATE, None, None, 501, None, nowhere)
    assert exc.value.field == "limit"
    with pytest.raises(Invalid) as exc:
        captures.checkpoint_captures(conn, "330102#1#0#0", 2000, 1000, 5, None, nowhere)
    assert exc.value.field == "end"


def test_tables_not_created_yet_mean_no_captures(tmp_path: Path) -> None:
    gw = start_gateway(tmp_path / "empty")
    try:
        c = gw.connect()
        assert captures.plate_trajectory(c, PLATE, None, None, 10, None, nowhere).items == []
        with pytest.raises(NotFound):
            captures.capture_detail(c, Kind.VEHICLE, "x-1", nowhere)
    finally:
        gw.kill()


@pytest.mark.slow
def test_a_plate_with_10000_captures_pages_in_constant_time(gateway: Gateway, conn: happybase.Connection) -> None:
    plate = "浙A10000"
    pairs = as_plate(list(valid_records(10_100, seed=23, clock=StepClock(T0 + timedelta(days=1)),
                                             face_share=0.0)), plate)[:10_000]
    assert len(pairs) == 10_000
    load(gateway.port, pairs)
    seen: list[str] = []
    timings: list[float] = []
    cursor = None
    while True:
        started = time.perf_counter()
        page = captures.plate_trajectory(conn, plate, None, None, 500, cursor, nowhere)
        timings.append(time.perf_counter() - started)
        seen += [i["record_id"] for i in page.items]
        if page.next is None:
            break
        cursor = captures.decode_cursor(page.next)
    assert seen == newest_first([r for _, r in pairs])
    assert len(timings) == 20
    # The last page costs about what the first does: nothing before the cursor is read again.
    assert max(timings[-5:]) < 3 * max(timings[:5]) + 0.05
