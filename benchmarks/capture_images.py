"""Capture image endpoint latency as `make up` serves it (a script, not a test).

Starts the whole solution the way `make up` does (its own free ports and data directory) with capture images on
(`[simulator] images = true`), takes vehicle records from the bus as they are published, waits until the ingest
job has stored them (the endpoint answers 200), then times over HTTPS as an operator would load them:

* the first thumbnail of each capture (read, decoded, scaled and cached in the store),
* cached thumbnails (target p99 <= 50 ms, issue 28), and
* originals,

each request audited as the console audits every image read. Prints p50/p99 per kind and the load average.

    .venv/bin/python benchmarks/capture_images.py [--captures 50] [--requests 400]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer

from contracts.ports import free_port
from contracts.records import UNRECOGNIZED
from contracts.topics import Topics
from deploy.processes.make_up import (
    MAKE_UP_PORTS,
    bus_settings,
    console_client,
    down,
    start_up,
    write_config,
)


def published_vehicles(data_dir: Path, count: int, timeout: float = 300) -> list[str]:
    """Record ids of ``count`` vehicle captures with an image, read from the bus as the super user."""
    consumer = Consumer({**bus_settings(data_dir), "group.id": "benchmark-images", "auto.offset.reset": "earliest"})
    consumer.subscribe([Topics().vehicle])
    found: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while len(found) < count and time.monotonic() < deadline:
            for message in consumer.consume(200, 1.0):
                if message.error() is None:
                    record = json.loads(message.value())
                    # one with an unreadable field is kept in capture_unrecognized, not served as a capture
                    if record.get("image_url") and UNRECOGNIZED not in record.values():
                        found.append(record["record_id"])
    finally:
        consumer.close()
    if len(found) < count:
        raise RuntimeError(f"only {len(found)} vehicle captures with an image in {timeout:.0f} s")
    return found[:count]


def percentiles(samples: list[float]) -> str:
    cuts = statistics.quantiles(samples, n=100)
    return f"p50 {cuts[49] * 1000:6.1f} ms  p99 {cuts[98] * 1000:6.1f} ms  (n={len(samples)})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--captures", type=int, default=50, help="distinct captures whose images are fetched")
    parser.add_argument("--requests", type=int, default=400, help="timed requests of each cached kind")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="capture-images-") as tmp:
        ports = {name: free_port() for name in MAKE_UP_PORTS}
        config = write_config(Path(tmp), ports)
        config.write_text(config.read_text() + "\n[simulator]\nimages = true\n")  # images on, as the issue runs it
        data_dir = Path(tmp) / "data"
        proc, _output = start_up(config, data_dir, ports, pipeline=True, timeout=600)
        try:
            records = published_vehicles(data_dir, args.captures)
            password = (data_dir / "console" / "admin_password").read_text().strip()
            with console_client(data_dir, ports["console"]) as console:
                token = console.post("/api/v1/auth/token", data={"username": "admin", "password": password})
                headers = {"Authorization": f"Bearer {token.json()['access_token']}"}

                def fetch(record_id: str, size: str) -> tuple[int, float]:
                    began = time.perf_counter()
                    answer = console.get(f"/api/v1/captures/vehicle/{record_id}/image", headers=headers,
                                         params={"size": size, "reason": "benchmark"})
                    return answer.status_code, time.perf_counter() - began

                deadline = time.monotonic() + 600  # the ingest job's first micro-batch may take minutes
                while missing := [r for r in records if fetch(r, "full")[0] != 200]:  # every partition's batch
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{len(missing)} captures never reached HBase")
                    time.sleep(2)
                first = [fetch(r, "thumb") for r in records]
                assert all(code == 200 for code, _ in first), first
                cached = [fetch(records[n % len(records)], "thumb") for n in range(args.requests)]
                originals = [fetch(records[n % len(records)], "full") for n in range(args.requests)]
            print("capture image endpoint, the console as make up runs it (HTTPS, audited, images on):")
            print(f"  first thumbnail (made and cached): {percentiles([s for _, s in first])}")
            print(f"  cached thumbnail:                  {percentiles([s for _, s in cached])}  (target p99 <= 50 ms)")
            print(f"  original JPEG:                     {percentiles([s for _, s in originals])}")
            print(f"  load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        finally:
            down(data_dir, proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
