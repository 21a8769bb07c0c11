"""Through real processes: ``python -m ingest.simulate`` with a real object store and a real broker.

Every published capture names an object that exists and decodes (or shows its device's planned fault), and the
plate drawn is the record's; with the store down every record is marked and none names a missing image; with
``images = false`` nothing is uploaded and every record says it has no image.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from contracts import records
from contracts.ports import free_port
from contracts.records import IMAGE_ERROR, Kind, Status
from deploy.object_store import ObjectStore
from deploy.processes.broker import BrokerProcess
from ingest.images import keys
from ingest.images.render import ImageSettings, Renderer
from ingest.images.stage import NO_IMAGE, UPLOAD_FAILED
from ingest.images.vehicles import plate_scale
from tests.ingest._plates import decode, read_plate

ROOT = Path(__file__).resolve().parents[2]
SEED = 21


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObjectStore]:
    with ObjectStore(tmp_path_factory.mktemp("s3"), port=0) as running:
        yield running


def simulate(broker: BrokerProcess, tmp: Path, endpoint: str, key_file: Path, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "ingest.simulate", "--bootstrap-server", broker.bootstrap, "--map",
         str(tmp / "map.json"), "--status-interval", "0", "--seed", str(SEED), "--curve", "flat",
         "--endpoint", endpoint, "--s3-credentials", str(key_file), *args],
        cwd=ROOT, capture_output=True, timeout=180, check=False)
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-3000:]
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def consume(broker: BrokerProcess, count: int) -> list[tuple[Kind, dict[str, Any]]]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "image-test",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["capture.vehicle", "capture.face"])
    out: list[tuple[Kind, dict[str, Any]]] = []
    try:
        for _ in range(200):
            if len(out) >= count:
                break
            for message in consumer.consume(500, 0.5):
                if message.error() is None:
                    kind = Kind.VEHICLE if message.topic() == "capture.vehicle" else Kind.FACE
                    checked = records.parse(kind, message.value())
                    assert checked.status is not Status.INVALID, checked.reason
                    out.append((kind, checked.record or {}))
    finally:
        consumer.close()
    return out


def test_every_published_capture_names_an_image_that_exists_and_shows_it(
        store: ObjectStore, broker: BrokerProcess, tmp_path: Path) -> None:
    summary = simulate(broker, tmp_path, store.url, store.credentials_file("simulator"), "--images", "--count", "400",
                       "--rate", "2000")
    assert summary["failed"] == 0 and sum(summary["produced"].values()) == 400
    published = consume(broker, 400)
    assert len(published) == 400
    client = store.client()
    renderer = Renderer(SEED, ImageSettings())
    read = same_bytes = 0
    for kind, record in published:
        if not record["image_url"]:
            assert record[IMAGE_ERROR] == NO_IMAGE  # a device planned to send no image
            continue
        key = keys.key_of(record["image_url"])
        assert key == keys.object_key(kind, record["checkpoint_id"], record["record_id"], record["capture_time"])
        response = client.get_object(keys.BUCKET, key)
        try:
            data, content_type = response.read(), response.headers.get("Content-Type")
        finally:
            response.close()
            response.release_conn()
        assert content_type == "image/jpeg"
        same_bytes += data == renderer.jpeg(kind, record)  # made again from the seed (devices without faults)
        try:
            image = decode(data)
        except OSError:  # a device with the truncated-image fault
            assert data[:3] == b"\xff\xd8\xff"
            continue
        if kind is Kind.VEHICLE and record["plate_number"] != records.UNRECOGNIZED and image.getextrema()[0][1] > 10:
            _, where = renderer.vehicle(record)
            if record["plate_color"] != "white":
                text, _ = read_plate(image, where.plate, record["plate_color"], plate_scale(image.width))
                read += text == record["plate_number"]
    assert summary["images"]["uploaded"] == sum(1 for _, r in published if r["image_url"])
    assert sum(1 for _, r in published if r["image_url"]) > 300
    vehicles_read = sum(1 for k, r in published if k is Kind.VEHICLE and r["plate_number"] != records.UNRECOGNIZED)
    assert read >= vehicles_read * 0.8  # blurred devices' and faulted images excepted, the plate reads back
    assert same_bytes >= len(published) * 0.8


def test_with_the_store_down_records_are_marked_and_none_names_a_missing_image(
        store: ObjectStore, broker: BrokerProcess, tmp_path: Path) -> None:
    nobody = f"127.0.0.1:{free_port()}"
    summary = simulate(broker, tmp_path, nobody, store.credentials_file("simulator"), "--images", "--count", "300",
                       "--rate", "1000")
    assert sum(summary["produced"].values()) == 300
    assert summary["images"]["uploaded"] == 0 and summary["images"][UPLOAD_FAILED] > 250
    published = consume(broker, 300)
    assert len(published) == 300
    assert all(r["image_url"] == "" and r[IMAGE_ERROR] in (UPLOAD_FAILED, NO_IMAGE) for _, r in published)


def test_images_off_uploads_nothing(store: ObjectStore, broker: BrokerProcess, tmp_path: Path) -> None:
    config = tmp_path / "solution.toml"
    config.write_text("[simulator]\nimages = false\n")
    before = sum(1 for _ in store.client().list_objects(keys.BUCKET, recursive=True))
    summary = simulate(broker, tmp_path, store.url, store.credentials_file("simulator"), "--config", str(config),
                       "--count", "200", "--rate", "2000")
    assert summary["images"] is None and sum(summary["produced"].values()) == 200
    assert sum(1 for _ in store.client().list_objects(keys.BUCKET, recursive=True)) == before
    published = consume(broker, 200)
    assert all(r["image_url"] == "" and r[IMAGE_ERROR] == keys.IMAGES_OFF for _, r in published)  # none named

