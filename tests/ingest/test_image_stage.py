"""Uploads retry then give up behind a breaker; the stage bounds what is in flight; and the simulator never
publishes a record before its image is stored (or the record is marked without one)."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from contracts import records
from contracts.records import IMAGE_ERROR, Kind, Status
from contracts.topics import Topics
from ingest.city import build_city
from ingest.images import keys
from ingest.images.render import ImageSettings, Renderer
from ingest.images.stage import NO_IMAGE, UPLOAD_FAILED, UPLOADED, ImageStage, Ready
from ingest.images.store import Uploader
from ingest.producer import Delivered
from ingest.simulate import Simulator, StatusLine
from ingest.traffic import Emitted, Traffic, TrafficConfig

FIXED = datetime(2026, 11, 22, 8, 0, 0, 123000, tzinfo=records.CITY_TZ)
SMALL = ImageSettings(width=160, height=96, quality=50)


class FakeStore:
    """An object store in memory that fails on demand and can be slow."""

    def __init__(self, failing: bool = False, delay_s: float = 0.0) -> None:
        self.objects: dict[str, bytes] = {}
        self.failing = failing
        self.delay_s = delay_s
        self.calls = 0
        self.lock = threading.Lock()

    def put(self, key: str, data: bytes) -> None:
        with self.lock:
            self.calls += 1
        time.sleep(self.delay_s)
        if self.failing:
            raise ConnectionRefusedError("store down")
        with self.lock:
            self.objects[key] = data


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_failed_upload_is_retried_then_the_store_rests_then_is_probed() -> None:
    store, clock, pauses = FakeStore(failing=True), Clock(), []
    uploader = Uploader(store, attempts=3, backoff_s=0.1, down_s=2.0, clock=clock, sleep=pauses.append)
    assert not uploader.upload("a.jpg", b"x")
    assert store.calls == 3 and pauses == [0.1, 0.2]
    assert "ConnectionRefusedError" in uploader.last_error
    assert uploader.down() and not uploader.upload("b.jpg", b"x") and store.calls == 3  # resting: not tried
    clock.now = 2.5
    assert not uploader.down()
    store.failing = False
    assert uploader.upload("c.jpg", b"x") and store.objects == {"c.jpg": b"x"}
    assert not uploader.down()


def test_a_store_that_recovers_within_the_retries_loses_nothing() -> None:
    store = FakeStore(failing=True)
    uploader = Uploader(store, attempts=3, backoff_s=0.0, sleep=lambda _s: setattr(store, "failing", False))
    assert uploader.upload("a.jpg", b"x") and store.calls == 2


class FakeProducer:
    """Checks, at the moment a record is produced, that the image it names is already in the store."""

    def __init__(self, store: FakeStore) -> None:
        self.store = store
        self.sent: list[tuple[str, bytes]] = []
        self.named_missing: list[str] = []

    def ensure_topics(self, partitions: dict[str, int], timeout: float = 15.0) -> None:
        pass

    def produce(self, topic: str, key: bytes, value: bytes, on_delivery: Delivered) -> None:
        if topic != "device.heartbeat":
            record = records.parse(Kind.VEHICLE if topic == "capture.vehicle" else Kind.FACE, value).record
            if record is not None and record["image_url"]:
                with self.store.lock:
                    if keys.key_of(record["image_url"]) not in self.store.objects:
                        self.named_missing.append(record["image_url"])
        self.sent.append((topic, value))
        on_delivery(None)

    def poll(self, timeout: float = 0.0) -> None:
        pass

    def flush(self, timeout: float) -> int:
        return 0


def run(store: FakeStore, tmp_path: Path, count: int = 600, **stage: int) -> tuple[Simulator, FakeProducer]:
    traffic = Traffic(build_city(7, 24), TrafficConfig(seed=7, malformed_rate=0.01), clock=lambda: FIXED)
    producer = FakeProducer(store)
    images = ImageStage(Renderer(7, SMALL), Uploader(store, attempts=2, backoff_s=0.01, down_s=0.2), **stage)
    sim = Simulator(traffic, producer, Topics(), rate=20_000, heartbeat_s=0.05, images=images)
    with (tmp_path / "status").open("w") as out:
        sim.run(count=count, duration=60, status=StatusLine(out, interval=0.01))
    images.close()
    return sim, producer


def captures(producer: FakeProducer) -> list[dict]:
    out = []
    for topic, value in producer.sent:
        if topic != "device.heartbeat":
            checked = records.parse(Kind.VEHICLE if topic == "capture.vehicle" else Kind.FACE, value)
            if checked.status is not Status.INVALID:
                out.append(checked.record)
    return out


def test_every_record_goes_out_after_its_image_is_stored(tmp_path: Path) -> None:
    store = FakeStore(delay_s=0.001)
    sim, producer = run(store, tmp_path)
    published = captures(producer)
    assert not producer.named_missing
    assert sum(sim.tally.produced.values()) == 600 == len([s for s in producer.sent if s[0] != "device.heartbeat"])
    stored = [r for r in published if r["image_url"]]
    assert len(stored) == sim.tally.images[UPLOADED] == len(store.objects)
    assert {keys.key_of(r["image_url"]) for r in stored} == set(store.objects)
    faulted = {ip for ip, f in sim.traffic.image_faults.items() if f.active(0.0) and f.mode == "missing"}
    unimaged = [r for r in published if not r["image_url"]]
    assert all(r[IMAGE_ERROR] == NO_IMAGE and r["device_ip"] in faulted for r in unimaged)
    assert sim.tally.images[NO_IMAGE] == len(unimaged)
    assert sim.summary(1.0, 7)["images"]["uploaded"] == len(stored)


def test_a_store_that_is_down_marks_records_and_none_names_a_missing_image(tmp_path: Path) -> None:
    store = FakeStore(failing=True)
    sim, producer = run(store, tmp_path, count=400)
    published = captures(producer)
    assert len([s for s in producer.sent if s[0] != "device.heartbeat"]) == 400
    assert not producer.named_missing and not store.objects
    assert all(r["image_url"] == "" and r[IMAGE_ERROR] in (UPLOAD_FAILED, NO_IMAGE) for r in published)
    assert sim.tally.images[UPLOAD_FAILED] > 300
    assert store.calls < 60  # the breaker: not every capture waits for the whole retry schedule


def test_a_slow_store_back_pressures_the_loop(tmp_path: Path) -> None:
    store = FakeStore(delay_s=0.01)
    peak = 0
    original = ImageStage.submit

    def watching(self: ImageStage, emitted: Emitted) -> list[Ready]:
        nonlocal peak
        finished = original(self, emitted)
        peak = max(peak, self.pending)
        return finished

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ImageStage, "submit", watching)
        start = time.monotonic()
        sim, producer = run(store, tmp_path, count=200, workers=2, max_pending=8)
    assert peak <= 8
    assert time.monotonic() - start >= 200 * 0.01 / 2 * 0.8  # the loop waited for the store
    assert not producer.named_missing and len(store.objects) == sim.tally.images[UPLOADED]
