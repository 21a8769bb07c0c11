"""The vehicle index rows ``rows_for_valid`` builds: which tables, which keys, and the covering cell ``i:v``."""

from __future__ import annotations

from contracts.records import Kind, epoch_ms
from contracts.tables import captures, reversed_ms
from testkit.web_data import ingest_time, valid_records

VEHICLE, FACE = (next(r for k, r in valid_records(50, seed=3) if k is kind) for kind in (Kind.VEHICLE, Kind.FACE))


def test_a_vehicle_writes_its_main_row_and_four_index_rows_each_covering_the_searched_fields() -> None:
    puts = captures.rows_for_valid(Kind.VEHICLE, VEHICLE, ingest_time(VEHICLE))
    rev = reversed_ms(epoch_ms(VEHICLE["capture_time"]))
    suffix = f"{rev}|{VEHICLE['record_id']}".encode()
    district = VEHICLE["checkpoint_id"].split("#")[0]
    keys = {table: key for table, key, _ in puts}
    assert keys == {
        "vehicle": captures.record_key(VEHICLE["record_id"]),
        "capture_by_checkpoint": captures.checkpoint_prefix(VEHICLE["checkpoint_id"]) + f"{rev}|vehicle|".encode()
        + VEHICLE["record_id"].encode(),
        "vehicle_by_plate": captures.plate_prefix(VEHICLE["plate_number"]) + suffix,
        "vehicle_by_district": captures.district_prefix(district) + suffix,
        "vehicle_by_brand": captures.brand_prefix(VEHICLE["vehicle_brand"]) + suffix,
    }
    assert set(keys) == set(captures.TABLES) - {"face", "capture_unrecognized"}
    for table, _, cells in puts[1:]:
        covered = captures.read_vehicle_cell(cells[captures.VEHICLE_COLUMN])
        assert covered == {name: VEHICLE[name] for name in captures.VEHICLE_FIELDS}, table
    assert sum(len(cells) for _, _, cells in puts) == 15  # what a vehicle costs the writer


def test_a_face_has_no_vehicle_index_rows_and_no_covering_cell() -> None:
    puts = captures.rows_for_valid(Kind.FACE, FACE, ingest_time(FACE))
    assert [table for table, _, _ in puts] == ["face", "capture_by_checkpoint"]
    assert captures.VEHICLE_COLUMN not in puts[1][2]


def test_checkpoint_id_fields() -> None:
    assert captures.district_of("330102#4#2#0") == "330102" and captures.direction_of("330102#4#2#0") == "2"
