"""DR image lag at 200 captures/s (issue 28): how long after its capture an image is at the DR site (a script).

Starts the primary's object store, the DR site's (`deploy.dr_site.DrObjectStore`, its own keys and rights), a DR
bus (`bus broker`) with the capture topics, and the image copier exactly as `make up --dr-site` runs it
(`deploy/processes/dr_images.py`: `python -m dr_mirror.images`, 16 workers, as the `dr-images` identity at each
store). Then devices at ``--rate`` captures/s for ``--seconds``: each one puts a real ~30 KB JPEG (the simulator's
renderer, 640x360 at quality 70) into the primary's store as the ``simulator`` identity, then its record goes on the
DR bus stamped with the time (what the mirror delivers; the mirror's own lag is `benchmarks/dr_mirror.py`'s).

The lag of an image is from its record's capture time to the moment a HEAD at the DR site finds it: every
``--sample``-th capture is watched, in capture order (a HEAD every 50 ms while the oldest watched one is not there,
so each figure is within 50 ms, never early). Also printed: the copier's
own ``dr_images_lag_records`` / ``dr_images_lag_seconds`` sampled every second, what the DR page shows.

    .venv/bin/python benchmarks/dr_images.py [--rate 200] [--seconds 60] [--sample 10]
"""

from __future__ import annotations

import argparse
import io
import os
import queue
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil
import tomli_w
import urllib3
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from minio import Minio
from minio.error import S3Error
from prometheus_client.parser import text_string_to_metric_families

from contracts.ports import free_port
from contracts.records import Kind, encode, now_time
from contracts.topics import Topics
from deploy.dr_site import DrObjectStore
from deploy.object_store import ObjectStore
from deploy.processes.broker import BrokerProcess
from deploy.processes.dr_images import DrImagesProcess, command
from ingest.images import keys
from ingest.images.render import ImageSettings, Renderer

TOPICS = Topics()
POLL_S = 0.05


def client(store: ObjectStore, identity: str, connections: int = 32) -> Minio:
    key = store.credentials(identity)
    http = urllib3.PoolManager(maxsize=connections, timeout=urllib3.Timeout(connect=2, read=10))
    return Minio(store.endpoint, access_key=key.access_key, secret_key=key.secret_key, secure=False,
                 region="us-east-1", http_client=http)


def jpegs(count: int) -> list[bytes]:
    """``count`` distinct capture images, rendered once (a device renders its own; the copier only moves bytes)."""
    renderer = Renderer(7, ImageSettings())
    return [renderer.jpeg(Kind.VEHICLE, {"record_id": f"bench-{i}", "plate_number": f"浙A{10000 + i}"}) or b""
            for i in range(count)]


def metrics(port: int) -> dict[str, float]:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return {}
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}


def proc_cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="captures per second")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--sample", type=int, default=10, help="watch every n-th capture's image at the DR site")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-dr-images-"))
    images = jpegs(40)
    print(f"images: {len(images)} rendered, {statistics.mean(map(len, images)) / 1024:.1f} KiB on average",
          flush=True)
    primary = ObjectStore(root / "primary", port=0).start()
    dr = DrObjectStore(root / "dr-store", port=0, secrets_dir=root / "dr-secrets").start()
    bus = BrokerProcess(root / "dr-bus").start(timeout=60)
    copier = None
    try:
        admin = AdminClient({"bootstrap.servers": bus.bootstrap})
        for future in admin.create_topics([NewTopic(t, 2, 1) for t in TOPICS.captures]).values():
            future.result(30)
        config = root / "solution.toml"
        config.write_text(tomli_w.dumps({"dr": {"bootstrap_servers": bus.bootstrap},
                                         "object_storage": {"endpoint": primary.endpoint}}))
        port = free_port()
        copier = DrImagesProcess(command(config, primary.credentials_file("dr-images"),
                                         dr.credentials_file("dr-images"), metrics_port=port,
                                         source_endpoint=primary.endpoint, target_endpoint=dr.endpoint),
                                 root / "dr-images.log").start()
        deadline = time.monotonic() + 30
        while not metrics(port) and time.monotonic() < deadline:
            time.sleep(0.2)
        devices, watcher = client(primary, "simulator"), client(dr, "admin")
        producer = Producer({"bootstrap.servers": bus.bootstrap, "linger.ms": 5})
        lags: list[float] = []
        gauges: list[tuple[float, float]] = []
        lost: list[str] = []
        stopping = threading.Event()

        pending: queue.Queue[tuple[str, float] | None] = queue.Queue()

        def watch() -> None:
            """The sampled images in capture order, the oldest first: one HEAD every 50 ms at most while it is not
            there (an image copied before an older one is found right after it: never counted early)."""
            while (item := pending.get()) is not None:
                key, captured = item
                until = time.monotonic() + 300
                while time.monotonic() < until:
                    try:
                        watcher.stat_object("captures", key)
                        lags.append(time.time() - captured)
                        break
                    except S3Error:
                        time.sleep(POLL_S)
                else:
                    lost.append(key)

        def sample_gauges() -> None:
            while not stopping.wait(1.0):
                found = metrics(port)
                if "dr_images_lag_records" in found:
                    gauges.append((found["dr_images_lag_records"], found["dr_images_lag_seconds"]))

        def capture(i: int) -> None:
            data = images[i % len(images)]
            when = now_time()
            key = keys.object_key(Kind.VEHICLE, f"330102#{i % 8}#0#0", f"bench-{i}", when)
            devices.put_object("captures", key, io.BytesIO(data), len(data), content_type="image/jpeg")
            captured = time.time()  # the record is published once its image is stored, as the devices do
            producer.produce(TOPICS.vehicle if i % 2 else TOPICS.face,
                             encode({"record_id": f"bench-{i}", "capture_time": when, "image_url": keys.url(key)}))
            if i % args.sample == 0:
                pending.put((key, captured))

        threading.Thread(target=sample_gauges, daemon=True).start()
        watching = threading.Thread(target=watch, daemon=True)
        watching.start()
        total = int(args.rate * args.seconds)
        start = time.monotonic()
        late = 0
        with ThreadPoolExecutor(32) as uploads:
            for i in range(total):
                due = start + i / args.rate
                pause = due - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
                elif pause < -0.5:
                    late += 1
                uploads.submit(capture, i)
                producer.poll(0)
            uploads.shutdown(wait=True)
            sent_s = time.monotonic() - start
            producer.flush(30)
        pending.put(None)
        watching.join()
        stopping.set()
        final = metrics(port)
        print(f"captures: {total} in {sent_s:.1f} s ({total / sent_s:.0f}/s offered, {late} late by > 0.5 s)")
        print(f"copied: {final.get('dr_images_copied_total', 0):.0f}; watched {len(lags)} images, "
              f"{len(lost)} not at the DR site within 300 s")
        if lags:
            print(f"DR image lag (capture -> at the DR site, +-{POLL_S * 1000:.0f} ms): "
                  f"p50 {percentile(lags, 0.5):.3f} s, p99 {percentile(lags, 0.99):.3f} s, max {max(lags):.3f} s")
        if gauges:
            print(f"copier's gauges (1 s samples): lag_records p50 {percentile([g[0] for g in gauges], 0.5):.0f}, "
                  f"p99 {percentile([g[0] for g in gauges], 0.99):.0f}; lag_seconds p50 "
                  f"{percentile([g[1] for g in gauges], 0.5):.3f}, p99 {percentile([g[1] for g in gauges], 0.99):.3f}")
        print(f"load average: {' '.join(f'{v:.1f}' for v in os.getloadavg())} on {os.cpu_count()} CPUs")
        cpu = {name: proc_cpu(proc.pid) for name, proc in (("copier", copier.proc), ("primary store", primary.proc),
                                                           ("DR store", dr.proc)) if proc is not None}
        print("CPU seconds used: " + ", ".join(f"{name} {seconds:.1f}" for name, seconds in cpu.items()))
        return 0 if not lost else 1
    finally:
        if copier is not None:
            copier.stop()
        bus.stop()
        dr.stop()
        primary.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
