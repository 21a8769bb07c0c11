"""The capture schemas: one validation, three outcomes (valid / unrecognized / invalid)."""

from __future__ import annotations

import json
import random
from datetime import datetime

import pytest

from contracts import records
from contracts.records import UNRECOGNIZED, Kind, Status
from ingest import values


def vehicle() -> dict:
    return {
        "record_id": "10.1.1.1-1", "checkpoint_id": "330102#1#0#0", "device_ip": "10.1.1.1",
        "recognizer_ip": "10.200.0.1", "capture_time": "2026-11-22T08:01:02.345+08:00",
        "plate_number": "浙AWL999", "plate_color": "blue", "vehicle_color": "white", "vehicle_type": "car",
        "vehicle_brand": "Toyota", "vehicle_series": "Corolla", "inspection_sticker": 2, "tissue_box": False,
        "driver_seatbelt": True, "passenger_seatbelt": True, "lane": 2, "speed_kmh": 41.5,
        "image_url": "s3://captures/vehicle/10.1.1.1/1.jpg",
    }


def face() -> dict:
    return {
        "record_id": "10.1.1.2-7", "checkpoint_id": "330102#1#0#0", "device_ip": "10.1.1.2",
        "recognizer_ip": "10.200.0.1", "capture_time": "2026-11-22T08:01:02.345+08:00", "gender": "female",
        "age_range": "18-30", "glasses": "none", "mask": False, "hat": True,
        "feature": values.feature(random.Random(1)), "image_url": "s3://captures/face/10.1.1.2/7.jpg",
    }


@pytest.mark.parametrize(("kind", "make"), [(Kind.VEHICLE, vehicle), (Kind.FACE, face)])
def test_valid_records_round_trip(kind: Kind, make) -> None:
    record = make()
    checked = records.parse(kind, records.encode(record))
    assert checked.status is Status.VALID
    assert checked.record == record


def test_wire_form_keeps_plates_readable() -> None:
    assert "浙AWL999".encode() in records.encode(vehicle())


def test_unrecognized_fields_are_named() -> None:
    record = {**vehicle(), "plate_number": UNRECOGNIZED, "tissue_box": UNRECOGNIZED}
    checked = records.validate(Kind.VEHICLE, record)
    assert checked.status is Status.UNRECOGNIZED
    assert checked.unrecognized == ("plate_number", "tissue_box")
    assert checked.record == record


def test_only_recognised_fields_may_be_unrecognized() -> None:
    checked = records.validate(Kind.VEHICLE, {**vehicle(), "checkpoint_id": UNRECOGNIZED})
    assert checked.status is Status.INVALID
    assert "checkpoint_id" in checked.reason


@pytest.mark.parametrize(("raw", "reason"), [
    (b'{"record_id": ', "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (None, "null value"),
])
def test_unparseable_values(raw: bytes | None, reason: str) -> None:
    checked = records.parse(Kind.VEHICLE, raw)
    assert checked.status is Status.INVALID
    assert reason in checked.reason
    assert checked.record is None


@pytest.mark.parametrize(("field", "value"), [
    ("capture_time", "2026-11-22 08:01:02"),  # no offset: ambiguous
    ("capture_time", "yesterday"),
    ("device_ip", "10.1.1"),
    ("checkpoint_id", "330102-1-0-0"),
    ("plate_number", "AWL999"),
    ("lane", "2"),
    ("speed_kmh", True),
    ("tissue_box", "no"),
    ("record_id", ""),
])
def test_mistyped_fields_are_invalid(field: str, value: object) -> None:
    checked = records.validate(Kind.VEHICLE, {**vehicle(), field: value})
    assert checked.status is Status.INVALID
    assert field in checked.reason


def test_missing_field_is_invalid_and_extra_fields_are_tolerated() -> None:
    record = vehicle()
    del record["lane"]
    assert records.validate(Kind.VEHICLE, record).reason == "missing field lane"
    assert records.validate(Kind.VEHICLE, {**vehicle(), "new_field": 1}).status is Status.VALID


def test_face_feature_must_be_a_unit_vector_of_128_floats() -> None:
    assert len(records.decode_feature(face()["feature"])) == records.FEATURE_DIM
    not_unit = records.encode_feature([0.5] * records.FEATURE_DIM)
    assert records.validate(Kind.FACE, {**face(), "feature": not_unit}).status is Status.INVALID
    assert records.validate(Kind.FACE, {**face(), "feature": "bm90IGJhc2U2NA"}).status is Status.INVALID


def test_times_keep_milliseconds_and_offset() -> None:
    text = records.format_time(datetime(2026, 11, 22, 8, 1, 2, 345678, tzinfo=records.CITY_TZ))
    assert text == "2026-11-22T08:01:02.345+08:00"
    assert records.epoch_ms(text) == records.epoch_ms("2026-11-22T00:01:02.345+00:00")
    with pytest.raises(ValueError):
        records.format_time(datetime(2026, 11, 22))
    assert records.parse_time(records.now_time()).utcoffset() is not None


def test_recognized_fields_and_encoding() -> None:
    assert "plate_number" in records.RECOGNIZED_FIELDS[Kind.VEHICLE]
    assert "record_id" not in records.RECOGNIZED_FIELDS[Kind.VEHICLE]
    assert json.loads(records.encode({"a": "识别"})) == {"a": "识别"}
