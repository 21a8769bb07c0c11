"""The image sampler in the real monitor process, over a real broker, HBase gateway and object store (SeaweedFS):
capture records of four devices, whose images are fine, black, truncated or absent, are sampled (share 1 here),
fetched as the monitor's own read-only identity and judged; the three faulty devices are alerted on with device
labels and reason ``images``, the good one is not, and a malformed record and one naming a foreign bucket are set
aside and counted without stopping anything."""

from __future__ import annotations

import contextlib
import io
import json
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from minio import Minio
from PIL import Image

from contracts.ports import free_port
from contracts.records import CITY_TZ, format_time
from deploy.object_store import ObjectStore
from deploy.processes.broker import BrokerProcess
from deploy.processes.gateway import start_gateway
from deploy.processes.monitor import MonitorProcess
from ingest.images import keys
from ingest.images.render import encode
from testkit.city import WebhookReceiver, city_map
from tests.monitoring._support import wait_for

DEVICES = {"10.1.0.1": "ok", "10.1.0.2": "black", "10.1.0.3": "truncated", "10.1.0.4": "missing"}
PICTURE = encode(Image.effect_noise((160, 90), 64).convert("RGB"), 70)
BLACK = encode(Image.new("RGB", (160, 90)), 70)


def config_text(bootstrap: str, hbase_port: int, map_path: Path, hook: str, metrics_port: int,
                store: ObjectStore) -> str:
    return f"""
[bus]
bootstrap_servers = "{bootstrap}"
[hbase]
host = "127.0.0.1"
port = {hbase_port}
[map]
path = "{map_path}"
[topics]
partitions = 1
[object_storage]
endpoint = "{store.endpoint}"
credentials_dir = "{store.secrets}"
[monitoring]
evaluation_interval_s = 0.5
flush_interval_s = 0.5
metrics_port = {metrics_port}
lock_session_s = 6
[monitoring.health]
silent_after_s = 600       # no heartbeats in this test: images alone judge
[monitoring.images]
sample_share = 1.0
max_per_s = 100
window_s = 30
degraded_share = 0.5
min_images = 3
[monitoring.route]
group_by = ["alertname", "device_ip"]
group_wait_s = 0.5
group_interval_s = 1
repeat_interval_s = 3600
[[monitoring.rules]]
name = "CaptureImagesBad"
kind = "capture_images"
threshold = 0.5
keep_firing_for_s = 600
[[monitoring.receivers]]
name = "hook"
type = "webhook"
url = "{hook}"
"""


class Cameras:
    """Each device uploads (as the simulator) and publishes one capture every ``tick_s`` until stopped."""

    def __init__(self, bootstrap: str, client: Minio, tick_s: float = 0.3) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        self.client, self.tick_s = client, tick_s
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopping.wait(self.tick_s):
            for n, (ip, mode) in enumerate(DEVICES.items()):
                record_id = uuid.uuid4().hex
                now = format_time(datetime.now(CITY_TZ))
                checkpoint = f"110100#{n}#0#0"
                key = keys.object_key(keys.Kind.VEHICLE, checkpoint, record_id, now)
                data = {"ok": PICTURE, "black": BLACK, "truncated": PICTURE[: len(PICTURE) // 2]}.get(mode)
                if data is not None:
                    self.client.put_object(keys.BUCKET, key, io.BytesIO(data), len(data), content_type="image/jpeg")
                record = {"record_id": record_id, "checkpoint_id": checkpoint, "device_ip": ip,
                          "recognizer_ip": "r1", "capture_time": now, "image_url": keys.url(key)}
                self.producer.produce("capture.vehicle", json.dumps(record).encode(), checkpoint.encode())
            self.producer.produce("capture.vehicle", b"not json at all")
            self.producer.produce("capture.vehicle", json.dumps({
                "record_id": uuid.uuid4().hex, "checkpoint_id": "110100#0#0#0", "device_ip": "10.1.0.1",
                "recognizer_ip": "r1", "capture_time": format_time(datetime.now(CITY_TZ)),
                "image_url": "s3://videos/cam-1/x.webm"}).encode())
            self.producer.flush(5)

    def stop(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(10)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict]:
    broker = BrokerProcess(tmp_path / "bus").start()
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(broker.stop)
        gateway = start_gateway(tmp_path / "hbase", log_dir=tmp_path)
        cleanup.callback(gateway.kill)
        store = ObjectStore(tmp_path / "s3", port=0).start()
        cleanup.callback(store.stop)
        hook = WebhookReceiver()
        cleanup.callback(hook.close)
        map_path = tmp_path / "map.json"
        city_map({"r1": list(DEVICES)}).save(map_path)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("capture.vehicle", 1, 1)])["capture.vehicle"].result(30)
        config = tmp_path / "solution.toml"
        metrics_port = free_port()
        config.write_text(config_text(broker.bootstrap, gateway.port, map_path, hook.url, metrics_port, store))
        simulator = store.credentials("simulator")
        cameras = Cameras(broker.bootstrap, Minio(store.endpoint, simulator.access_key, simulator.secret_key,
                                                  secure=False, region="us-east-1"))
        cleanup.callback(cameras.stop)
        monitor = MonitorProcess(config, tmp_path / "monitor.log")
        cleanup.callback(monitor.kill)
        yield {"hook": hook, "monitor": monitor, "cameras": cameras, "metrics_port": metrics_port}


def metric_lines(port: int, name: str) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {line.split(" ")[0]: float(line.split(" ")[-1]) for line in text.splitlines()
            if line.startswith(name + "{")}


def test_faulty_capture_images_are_found_and_alerted_per_device(stack: dict) -> None:
    hook, monitor, cameras, port = stack["hook"], stack["monitor"], stack["cameras"], stack["metrics_port"]
    monitor.start()
    wait_for(lambda: "monitor running" in monitor.log(), 60, "the monitor to start", monitor.log)
    assert "capture images not judged" not in monitor.log()
    cameras.thread.start()

    def alerted() -> set[str]:
        return {a["labels"]["device_ip"] for a in hook.alerts("firing")
                if a["labels"]["alertname"] == "CaptureImagesBad"}

    wait_for(lambda: alerted() >= {"10.1.0.2", "10.1.0.3", "10.1.0.4"}, 60, "three CaptureImagesBad alerts",
             monitor.log)
    cameras.stop()
    assert "10.1.0.1" not in alerted()
    by_device = {a["labels"]["device_ip"]: a for a in hook.alerts("firing")}
    black = by_device["10.1.0.2"]
    assert {k: black["labels"][k] for k in ("kind", "recognizer_ip", "district", "checkpoint_id")} == {
        "kind": "capture_images", "recognizer_ip": "r1", "district": "110100", "checkpoint_id": "110100#1#0#0"}
    assert black["annotations"]["reason"] == "images" and "black" in black["annotations"]["summary"]
    checked = metric_lines(port, "monitor_images_checked_total")
    assert all(checked.get(f'monitor_images_checked_total{{result="{r}"}}', 0) > 0
               for r in ("ok", "black", "undecodable", "missing")), checked
    malformed = metric_lines(port, "monitor_records_malformed_total")
    assert malformed.get('monitor_records_malformed_total{reason="undecodable",topic="capture.vehicle"}', 0) > 0
    assert malformed.get('monitor_records_malformed_total{reason="invalid",topic="capture.vehicle"}', 0) > 0
    assert monitor.stop() == 0
