"""Capture images: deterministic from the seed, the record's vehicle and plate scheme, a plate that reads back as
the record's plate_number, unreadable plates unreadable, faces that agree with their attributes, device faults."""

from __future__ import annotations

import io
import random

import numpy as np
import pytest
from PIL import Image

from contracts.records import UNRECOGNIZED, Kind
from ingest import values
from ingest.images import faces, plates, vehicles
from ingest.images.render import ImageSettings, Renderer
from tests.ingest._plates import decode, plate_difference, read_plate

SETTINGS = ImageSettings(width=640, height=360, quality=70)
SCALE = vehicles.plate_scale(SETTINGS.width)


def vehicle(record_id: str = "10.1.1.1-1", **fields: object) -> dict[str, object]:
    attrs = values.vehicle_attributes(random.Random(record_id))
    return {**attrs, "record_id": record_id, **fields}


def face(record_id: str = "10.1.1.2-1", **fields: object) -> dict[str, object]:
    return {**values.face_attributes(random.Random(record_id)), "record_id": record_id, **fields}


def test_same_seed_same_bytes_and_another_seed_other_bytes() -> None:
    record, person = vehicle(), face()
    one, again, other = Renderer(7, SETTINGS), Renderer(7, SETTINGS), Renderer(8, SETTINGS)
    assert one.jpeg(Kind.VEHICLE, record) == again.jpeg(Kind.VEHICLE, record)
    assert one.jpeg(Kind.FACE, person) == again.jpeg(Kind.FACE, person)
    assert one.jpeg(Kind.VEHICLE, record) != other.jpeg(Kind.VEHICLE, record)
    assert one.jpeg(Kind.VEHICLE, record) != one.jpeg(Kind.VEHICLE, vehicle("10.1.1.1-2"))


def test_size_quality_and_weight_follow_the_settings() -> None:
    small = Renderer(1, SETTINGS)
    data = small.jpeg(Kind.VEHICLE, vehicle())
    assert data is not None and data[:3] == b"\xff\xd8\xff"
    assert decode(data).size == (640, 360)
    assert 10_000 < len(data) < 60_000  # ~30 KB: the embedded default must not fill a disk
    assert decode(small.jpeg(Kind.FACE, face()) or b"").size == (270, 360)
    large = Renderer(1, ImageSettings(width=1280, height=720, quality=80)).jpeg(Kind.VEHICLE, vehicle())
    assert large is not None and decode(large).size == (1280, 720)
    with pytest.raises(ValueError):
        ImageSettings(quality=0)
    with pytest.raises(ValueError):
        ImageSettings(width=10)


@pytest.mark.parametrize(("plate_number", "color"), [
    ("浙A7K3Q9", "blue"), ("苏B8K9Q2", "yellow"), ("浙AD12345", "green"), ("京A0M4P1", "white"), ("粤Z12B4C", "black")])
def test_the_plate_reads_back_as_the_records_plate_in_its_scheme(plate_number: str, color: str) -> None:
    record = vehicle(plate_number=plate_number, plate_color=color)
    renderer = Renderer(3, SETTINGS)
    _, where = renderer.vehicle(record)
    image = decode(renderer.jpeg(Kind.VEHICLE, record) or b"")
    text, weakest = read_plate(image, where.plate, color, SCALE)
    assert text == plate_number
    assert weakest > 0.6
    same = plate_difference(image, where.plate, plate_number, color, SCALE)
    province = "沪" if plate_number[0] != "沪" else "京"
    for other_text in (plate_number[:2] + "W" * (len(plate_number) - 2), province + plate_number[1:]):
        other = plate_difference(image, where.plate, other_text, color, SCALE)
        assert same < other, (same, other, other_text)
    scheme = plates.SCHEMES[color]
    seen = np.asarray(image.crop(where.plate), dtype=np.float64).reshape(-1, 3)
    background = seen[np.abs(seen - scheme.ink).sum(axis=1) > 200]  # pixels far from the characters' colour
    expected = (np.array(scheme.top) + np.array(scheme.bottom)) / 2
    assert np.abs(background.mean(axis=0) - expected).max() < 45, (background.mean(axis=0), expected)


def test_the_vehicle_has_the_records_colour() -> None:
    renderer = Renderer(3, SETTINGS)
    for color in ("red", "blue", "white", "black", "yellow"):
        image, where = renderer.vehicle(vehicle(vehicle_color=color, vehicle_type="suv"))
        left, top, right, bottom = where.body
        hood = np.asarray(image.crop((left + (right - left) // 10, top + (bottom - top) * 3 // 5,
                                      left + (right - left) // 4, top + (bottom - top) * 7 // 10)), np.float64)
        assert np.abs(hood.reshape(-1, 3).mean(axis=0) - vehicles.BODY_COLORS[color]).max() < 30, color


def test_an_unrecognized_plate_does_not_read() -> None:
    renderer = Renderer(5, SETTINGS)
    legible, spoiled = [], []
    for n in range(12):
        record = vehicle(f"10.1.1.1-{n}", plate_color="blue", plate_number="浙A7K3Q9")
        _, where = renderer.vehicle(record)
        legible.append(read_plate(decode(renderer.jpeg(Kind.VEHICLE, record) or b""), where.plate, "blue", SCALE)[1])
        unread = {**record, "plate_number": UNRECOGNIZED}
        _, where = renderer.vehicle(unread)
        spoiled.append(read_plate(decode(renderer.jpeg(Kind.VEHICLE, unread) or b""), where.plate, "blue", SCALE)[1])
    assert min(legible) > 0.6
    assert max(spoiled) < min(legible) - 0.15, (spoiled, legible)


def _share_of(image: Image.Image, color: tuple[int, int, int], tolerance: int = 30) -> float:
    pixels = np.asarray(image, dtype=np.int32).reshape(-1, 3)
    return float((np.abs(pixels - color).max(axis=1) < tolerance).mean())


def test_faces_agree_with_their_attributes() -> None:
    renderer = Renderer(2, SETTINGS)
    plain = dict(gender="male", age_range="31-45", glasses="none", mask=False, hat=False)
    masked = decode(renderer.jpeg(Kind.FACE, face(**{**plain, "mask": True})) or b"")
    bare = decode(renderer.jpeg(Kind.FACE, face(**plain)) or b"")
    assert _share_of(masked, (170, 205, 230)) > 0.03 > _share_of(bare, (170, 205, 230))
    shaded = decode(renderer.jpeg(Kind.FACE, face(**{**plain, "glasses": "sunglasses"})) or b"")
    assert _share_of(shaded, (15, 15, 20), 20) > _share_of(bare, (15, 15, 20), 20) + 0.005
    woman = decode(renderer.jpeg(Kind.FACE, face(**{**plain, "gender": "female"})) or b"")
    assert not np.array_equal(np.asarray(woman), np.asarray(bare))
    elder = decode(renderer.jpeg(Kind.FACE, face(**{**plain, "age_range": "60+"})) or b"")
    assert _share_of(elder, faces.GREY_HAIR, 20) > 0.01 > _share_of(bare, faces.GREY_HAIR, 20)


def test_device_faults_show_in_the_image() -> None:
    renderer = Renderer(4, SETTINGS)
    record = vehicle()
    good = renderer.jpeg(Kind.VEHICLE, record) or b""
    assert renderer.jpeg(Kind.VEHICLE, record, "missing") is None
    black = decode(renderer.jpeg(Kind.VEHICLE, record, "black") or b"")
    assert np.asarray(black).max() < 10
    truncated = renderer.jpeg(Kind.VEHICLE, record, "truncated") or b""
    assert 0 < len(truncated) < len(good) and good.startswith(truncated)
    with pytest.raises(OSError):
        Image.open(io.BytesIO(truncated)).load()
    blurred = np.asarray(decode(renderer.jpeg(Kind.VEHICLE, record, "blurred") or b""), np.float64)
    sharp = np.asarray(decode(good), np.float64)
    assert np.abs(np.diff(blurred, axis=1)).mean() < 0.6 * np.abs(np.diff(sharp, axis=1)).mean()
