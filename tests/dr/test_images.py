"""The image at the DR site after mirroring: the image copier (`python -m dr_mirror.images`, started as `make up
--dr-site` starts it) between two real object stores (the primary's, and the DR site's with its own keys and
rights), following the capture topics on a real DR bus. It copies every image a record names with the same bytes,
sets a malformed and a foreign record aside, waits out a primary store that is down without committing past it,
and after a kill -9 copies the rest with nothing lost."""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomli_w
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from minio import Minio
from minio.error import S3Error
from prometheus_client.parser import text_string_to_metric_families

from contracts.ports import free_port
from contracts.processes import ROOT
from contracts.records import encode, now_time
from contracts.topics import Topics
from deploy.dr_site import DrObjectStore
from deploy.object_store import ObjectStore
from deploy.processes.broker import BrokerProcess
from deploy.processes.dr_images import DrImagesProcess, command
from tests.dr._support import wait_until
from video.storage import upload_video

TOPICS = Topics()


def _client(store: ObjectStore, identity: str = "admin") -> Minio:
    key = store.credentials(identity)
    return Minio(store.endpoint, access_key=key.access_key, secret_key=key.secret_key, secure=False,
                 region="us-east-1")


def _metrics(port: int) -> dict[str, float]:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return {}
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            label = ",".join(f"{v}" for v in sample.labels.values())
            out[f"{sample.name}{{{label}}}" if label else sample.name] = sample.value
    return out


def _at_dr(dr: ObjectStore, bucket: str = "captures") -> dict[str, bytes]:
    """Every object of ``bucket`` at a store, with its bytes."""
    client = _client(dr)
    found = {}
    for obj in client.list_objects(bucket, recursive=True):
        response = client.get_object(bucket, obj.object_name)
        found[obj.object_name] = response.read()
        response.close()
        response.release_conn()
    return found


class Site:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.primary = ObjectStore(root / "primary", port=0).start()
        self.dr = DrObjectStore(root / "dr-store", port=0, secrets_dir=root / "dr-secrets").start()
        self.bus = BrokerProcess(root / "dr-bus").start(timeout=60)
        admin = AdminClient({"bootstrap.servers": self.bus.bootstrap})
        for future in admin.create_topics([NewTopic(t, 2, 1) for t in TOPICS.captures]).values():
            future.result(30)
        self.config = root / "solution.toml"
        self.config.write_text(tomli_w.dumps({"dr": {"bootstrap_servers": self.bus.bootstrap},
                                              "object_storage": {"endpoint": self.primary.endpoint}}))
        self.images: dict[str, bytes] = {}
        self.producer = Producer({"bootstrap.servers": self.bus.bootstrap})

    def copier(self, metrics_port: int, *extra: str) -> DrImagesProcess:
        args = command(self.config, self.primary.credentials_file("dr-images"),
                       self.dr.credentials_file("dr-images"), metrics_port=metrics_port,
                       source_endpoint=self.primary.endpoint, target_endpoint=self.dr.endpoint, extra=extra)
        return DrImagesProcess(args, self.root / f"dr-images-{metrics_port}.log").start()

    def check(self) -> dict[str, int]:
        """``python -m dr_mirror.images --check``: the images the DR topics' records name, by where they are."""
        args = [*command(self.config, self.primary.credentials_file("dr-images"),
                         self.dr.credentials_file("dr-images"), metrics_port=-1,
                         source_endpoint=self.primary.endpoint, target_endpoint=self.dr.endpoint), "--check"]
        done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    def put_images(self, n: int, start: int) -> list[tuple[str, bytes]]:
        """``n`` captures' images put into the primary's store (as the devices do); their records, to publish."""
        devices = _client(self.primary, "simulator")
        records = []
        for i in range(start, start + n):
            kind = "vehicle" if i % 2 else "face"
            key = f"{kind}/2026/11/30/330102-1-0-{i % 3}/rec-{i}.jpg"
            data = b"\xff\xd8" + os.urandom(3000 + i) + b"\xff\xd9"
            devices.put_object("captures", key, io.BytesIO(data), len(data), content_type="image/jpeg")
            self.images[key] = data
            record = {"record_id": f"rec-{i}", "capture_time": now_time(), "image_url": f"s3://captures/{key}"}
            records.append((TOPICS.vehicle if kind == "vehicle" else TOPICS.face, encode(record)))
        return records

    def publish(self, records: list[tuple[str, bytes]]) -> None:
        """The records on the DR bus, as the mirror copies them."""
        for topic, value in records:
            self.producer.produce(topic, value)
        assert self.producer.flush(30) == 0

    def capture(self, n: int, start: int) -> None:
        self.publish(self.put_images(n, start))

    def stop(self) -> None:
        self.bus.stop()
        self.dr.stop()
        self.primary.stop()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    running = Site(tmp_path)
    try:
        yield running
    finally:
        running.stop()


@pytest.mark.timeout(120)
def test_the_image_at_the_dr_site_after_mirroring(site: Site) -> None:
    site.capture(40, 0)
    site.producer.produce(TOPICS.vehicle, b"\x00 not a record")
    site.producer.produce(TOPICS.face, encode({"record_id": "x", "image_url": "s3://videos/cam-1/seg.webm"}))
    site.producer.produce(TOPICS.face, encode({"record_id": "y", "image_url": "", "image_error": "no_image"}))
    assert site.producer.flush(10) == 0
    port = free_port()
    first = site.copier(port)
    try:
        wait_until(lambda: _metrics(port).get("dr_images_copied_total") == 40, 40, "40 images copied", first.logs)
        wait_until(lambda: _metrics(port).get("dr_images_lag_records") == 0, 10, "no lag", first.logs)
        figures = _metrics(port)
        assert (figures["dr_images_skipped_total{malformed}"], figures["dr_images_skipped_total{foreign}"],
                figures["dr_images_skipped_total{no_image}"]) == (1, 1, 1)
        assert _at_dr(site.dr) == site.images  # the same keys, the same bytes

        # The primary's store goes down: the copier waits, commits nothing past the records it could not copy,
        # and is killed -9 while it waits.
        later = site.put_images(40, 40)
        primary_port = site.primary.port
        site.primary.stop()
        site.publish(later)
        wait_until(lambda: _metrics(port).get("dr_images_retries_total{primary}", 0) > 0, 30,
                   "the copier retries the primary", first.logs)
        wait_until(lambda: _metrics(port).get("dr_images_lag_records") == 40, 10, "the lag measured meanwhile",
                   first.logs)
        assert _metrics(port)["dr_images_copied_total"] == 40
    finally:
        first.kill()
    site.primary = ObjectStore(site.root / "primary", port=primary_port).start()
    # what a drill reports next to the records missing: the images the DR site's records name that it lacks
    assert site.check() == {"records": 83, "images": 80, "images_at_dr": 40, "images_missing_at_dr": 40,
                            "images_missing_at_both": 0}
    port = free_port()
    second = site.copier(port)
    try:
        wait_until(lambda: _metrics(port).get("dr_images_copied_total") == 40, 40, "the other 40 copied",
                   second.logs)
        wait_until(lambda: _metrics(port).get("dr_images_lag_records") == 0, 10, "no lag", second.logs)
        assert _at_dr(site.dr) == site.images  # nothing lost, nothing altered
        figures = _metrics(port)
        # resumed from the committed offsets: the first run's records are not read again
        assert figures["dr_images_skipped_total{malformed}"] == figures["dr_images_skipped_total{present}"] == 0
    finally:
        assert second.stop() == 0, second.logs()[-3000:]
    assert site.check()["images_missing_at_dr"] == 0


@pytest.mark.timeout(90)
def test_the_copier_identity_reads_captures_and_footage_at_the_primary_and_writes_them_only_at_the_dr_site(
        site: Site) -> None:
    site.capture(1, 0)
    [(key, data)] = site.images.items()
    at_primary, at_dr = _client(site.primary, "dr-images"), _client(site.dr, "dr-images")
    assert at_primary.get_object("captures", key).read() == data
    assert at_primary.stat_object("captures", key).size == len(data)
    for call in (lambda: at_primary.put_object("captures", "x.jpg", io.BytesIO(b"x"), 1),
                 lambda: list(at_primary.list_objects("captures")),
                 lambda: at_primary.remove_object("captures", key),
                 lambda: at_primary.put_object("videos", "cam/x.webm", io.BytesIO(b"x"), 1),
                 lambda: at_primary.get_object("synopsis", "x.webm"),
                 lambda: list(at_dr.list_objects("captures")),
                 lambda: list(at_dr.list_objects("videos")),
                 lambda: at_dr.remove_object("captures", key)):
        with pytest.raises(S3Error) as refused:
            call()
        assert refused.value.code == "AccessDenied"
    at_dr.put_object("captures", key, io.BytesIO(data), len(data))
    assert at_dr.get_object("captures", key).read() == data
    assert at_dr.stat_object("captures", key).size == len(data)
    # the two stores' keys differ: the primary's key opens nothing at the DR site
    assert site.primary.credentials("dr-images") != site.dr.credentials("dr-images")
    identities = json.loads((site.dr.data_dir / "s3-identities.json").read_text())["identities"]
    assert {i["name"]: i["actions"] for i in identities}["dr-images"] == [
        "Read:captures", "Write:captures/*", "Read:videos", "Write:videos/*"]


def _segments(site: Site, camera: str, first: int, n: int) -> dict[str, bytes]:
    """``n`` footage segments of ``camera`` put into the primary's store as the cameras do (their own key)."""
    cameras = _client(site.primary, "cameras")
    stored = {}
    for i in range(first, first + n):
        path = site.root / f"{camera}-{i}.webm"
        path.write_bytes(os.urandom(20_000 + i))
        video = upload_video(cameras, path, camera, dt.datetime(2026, 11, 30, 8, i, tzinfo=dt.UTC))
        stored[video.key] = path.read_bytes()
    return stored


@pytest.mark.timeout(180)
def test_the_cameras_footage_is_copied_to_the_dr_site_and_a_restart_lists_only_what_is_new(site: Site) -> None:
    state = site.root / "videos-copied.json"
    footage = {**_segments(site, "cam-a", 0, 3), **_segments(site, "cam-b", 0, 2)}
    port = free_port()
    first = site.copier(port, "--videos-state", str(state), "--videos-interval", "0.5")
    try:
        wait_until(lambda: _metrics(port).get("dr_videos_copied_total") == 5, 60, "5 segments copied", first.logs)
        wait_until(lambda: _metrics(port).get("dr_videos_pending") == 0, 10, "none pending", first.logs)
        assert _at_dr(site.dr, "videos") == footage  # the same keys, the same bytes
        copied = _client(site.dr).stat_object("videos", next(iter(footage)))
        assert copied.metadata.get("x-amz-meta-camera-id") == "cam-a"  # with the camera's metadata
        footage.update(_segments(site, "cam-a", 3, 2))
        wait_until(lambda: _metrics(port).get("dr_videos_copied_total") == 7, 30, "the new ones copied", first.logs)
        assert json.loads(state.read_text()) == {"cam-a": max(k for k in footage if k.startswith("cam-a/")),
                                                  "cam-b": max(k for k in footage if k.startswith("cam-b/"))}
    finally:
        first.kill()
    footage.update(_segments(site, "cam-b", 2, 1))
    port = free_port()
    second = site.copier(port, "--videos-state", str(state), "--videos-interval", "0.5")
    try:  # restarted from its state: only the one new segment is listed and copied
        wait_until(lambda: _metrics(port).get("dr_videos_copied_total") == 1, 30, "the new one copied", second.logs)
        wait_until(lambda: _metrics(port).get("dr_videos_pending") == 0, 10, "none pending", second.logs)
        assert _at_dr(site.dr, "videos") == footage
        primary_port = site.primary.port
        site.primary.stop()  # the primary's store goes: counted, the copier goes on
        wait_until(lambda: _metrics(port).get("dr_videos_errors_total{primary}", 0) > 0, 30,
                   "the pass stopped on the primary's store", second.logs)
        assert second.exited() is None
    finally:
        assert second.stop() == 0, second.logs()[-3000:]
    site.primary = ObjectStore(site.root / "primary", port=primary_port).start()
