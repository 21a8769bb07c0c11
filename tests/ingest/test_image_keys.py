"""Where capture images go (key layout from the record), and the contracts' rule for image_url."""

from __future__ import annotations

import random
from datetime import datetime

import pytest

from contracts import records
from contracts.records import IMAGE_ERROR, Kind, Status
from ingest import values
from ingest.city import build_city
from ingest.images import keys
from ingest.traffic import IMAGE_FAULT_MODES, Traffic, TrafficConfig

FIXED = datetime(2026, 11, 22, 8, 0, 0, 123000, tzinfo=records.CITY_TZ)


def test_key_layout_is_kind_date_checkpoint_record() -> None:
    key = keys.object_key(Kind.VEHICLE, "330102#1#0#0", "10.1.1.1-42", "2026-03-04T23:59:59.999+08:00")
    assert key == "vehicle/2026/03/04/330102-1-0-0/10.1.1.1-42.jpg"
    assert keys.url(key) == "s3://captures/vehicle/2026/03/04/330102-1-0-0/10.1.1.1-42.jpg"
    assert keys.key_of(keys.url(key)) == key
    # The date is the device's own (city time), not UTC's: 00:30 local is still the 5th.
    assert keys.object_key(Kind.FACE, "330102#1#0#0", "r", "2026-03-05T00:30:00.000+08:00").startswith(
        "face/2026/03/05/")
    for outside in ("s3://videos/a.jpg", "s3://captures/", "https://example.com/a.jpg"):
        with pytest.raises(ValueError):
            keys.key_of(outside)


def test_simulated_records_name_their_image_in_the_layout() -> None:
    traffic = Traffic(build_city(7, 24), TrafficConfig(seed=7), clock=lambda: FIXED)
    for emitted in traffic.records(300, 0.0):
        record = emitted.record
        assert record is not None
        assert records.is_image_url(record["image_url"])
        expected = keys.object_key(emitted.kind, record["checkpoint_id"], record["record_id"], record["capture_time"])
        assert keys.key_of(record["image_url"]) == expected
        assert expected.startswith(f"{emitted.kind.value}/2026/11/22/")


def test_some_devices_have_image_faults_from_the_start_and_the_stream_is_unchanged() -> None:
    traffic = Traffic(build_city(7, 24), TrafficConfig(seed=7), clock=lambda: FIXED)
    assert traffic.image_faults and not set(traffic.image_faults) & set(traffic.failures)
    assert {f.mode for f in traffic.image_faults.values()} <= set(IMAGE_FAULT_MODES)
    first = min(traffic.image_faults.values(), key=lambda f: f.start_s)
    assert first.start_s == 0.0 and traffic.camera_state(first.device_ip, 0.0) == first.mode
    assert first.mode in {e.camera for e in traffic.records(3000, 0.0) if e.device_ip == first.device_ip}
    without = Traffic(build_city(7, 24), TrafficConfig(seed=7, image_fault_share=0.0), clock=lambda: FIXED)
    again = Traffic(build_city(7, 24), TrafficConfig(seed=7), clock=lambda: FIXED)
    assert [e.value for e in without.records(500, 0.0)] == [e.value for e in again.records(500, 0.0)]


def vehicle(**fields: object) -> dict[str, object]:
    return {"record_id": "10.1.1.1-1", "checkpoint_id": "330102#1#0#0", "device_ip": "10.1.1.1",
            "recognizer_ip": "10.2.1.1", "capture_time": "2026-11-22T08:01:02.345+08:00",
            **values.vehicle_attributes(random.Random(1)), "plate_number": "浙A12345", "lane": 1, "speed_kmh": 40.0,
            "image_url": "s3://captures/vehicle/2026/11/22/330102-1-0-0/10.1.1.1-1.jpg", **fields}


@pytest.mark.parametrize("url", [
    "s3://videos/vehicle/1.jpg", "s3://evidence/a.jpg", "s3://captures-other/a.jpg", "s3://captures/",
    "s3://captures/../videos/a.jpg", "s3://captures/a/../../b.jpg", "http://127.0.0.1:9000/captures/a.jpg",
    "/captures/a.jpg", "s3://captures/a b.jpg", "s3://captures/a.jpg#x", "s3://captures//a.jpg", 42, None,
])
def test_an_image_url_outside_the_captures_bucket_is_invalid(url: object) -> None:
    checked = records.validate(Kind.VEHICLE, vehicle(image_url=url))
    assert checked.status is Status.INVALID
    assert "image_url" in checked.reason


def test_a_record_without_image_must_say_why() -> None:
    assert records.validate(Kind.VEHICLE, vehicle()).status is Status.VALID
    assert records.validate(Kind.VEHICLE, vehicle(image_url="s3://captures/big.jpg")).status is Status.VALID
    missing = records.validate(Kind.VEHICLE, vehicle(image_url=""))
    assert missing.status is Status.INVALID and IMAGE_ERROR in missing.reason
    marked = records.validate(Kind.VEHICLE, vehicle(image_url="", **{IMAGE_ERROR: "upload_failed"}))
    assert marked.status is Status.VALID
    assert records.validate(Kind.VEHICLE, vehicle(image_url="", **{IMAGE_ERROR: ""})).status is Status.INVALID
