"""A small city that publishes real capture records for the real ingest job, with faults chosen by the test.

Unlike :class:`testkit.city.ScriptedCity` (which writes ``ingest.stats`` itself), this one
only does what devices do: vehicle captures on ``capture.vehicle`` (schema-valid, built with the
simulator's value generators) and heartbeats with cumulative counters on ``device.heartbeat``. The
ingest job (``spark_jobs/ingest_captures.py``) reads the captures and publishes ``ingest.stats``, so
every figure the monitor judges comes from the real pipeline. Modes per device: ``ok``, ``blurred``
(80 % of plates unreadable), ``silent`` (neither captures nor heartbeats); ``lag_s`` sets every
capture's ``capture_time`` that many seconds in the past (a latency spike upstream of the bus).
"""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from confluent_kafka import Producer

from contracts.deployment_map import DeploymentMap
from contracts.records import CITY_TZ, UNRECOGNIZED, encode, format_time
from ingest import values

TOPIC = "capture.vehicle"


@dataclass
class CaptureCity:
    bootstrap: str
    deployment: DeploymentMap
    rate: int = 8
    """Captures per device per tick."""
    tick_s: float = 0.5
    heartbeat_every: int = 2
    """Ticks between heartbeats."""
    modes: dict[str, str] = field(default_factory=dict)
    lag_s: float = 0.0
    produced: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> CaptureCity:
        self._rng = random.Random(7)
        self._producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "log_level": 3})
        self._ticks = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(10)

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            self.tick()

    def tick(self) -> None:
        now = datetime.now(CITY_TZ)
        captured = format_time(now - timedelta(seconds=self.lag_s))
        self._ticks += 1
        for device in self.deployment.devices:
            ip, mode = device.device_ip, self.modes.get(device.device_ip, "ok")
            if mode == "silent":
                continue
            for _ in range(self.rate):
                seq = self.produced.get(ip, 0) + 1
                self.produced[ip] = seq
                record = {"record_id": f"{ip}-{seq}", "checkpoint_id": device.checkpoint_id, "device_ip": ip,
                          "recognizer_ip": device.recognizer_ip, "capture_time": captured,
                          **values.vehicle_attributes(self._rng), "lane": 1, "speed_kmh": 40.0,
                          "image_url": f"s3://captures/vehicle/{ip}/{seq}.jpg"}
                if mode == "blurred" and self._rng.random() < 0.8:
                    record["plate_number"] = UNRECOGNIZED
                self._producer.produce(TOPIC, encode(record), device.checkpoint_id.encode())
            if self._ticks % self.heartbeat_every == 0:
                beat = {"device_ip": ip, "checkpoint_id": device.checkpoint_id, "recognizer_ip": device.recognizer_ip,
                        "topic": TOPIC, "time": format_time(now), "status": "ok", "produced": self.produced[ip],
                        "unrecognized": 0}
                self._producer.produce("device.heartbeat", json.dumps(beat).encode(), ip.encode())
        self._producer.poll(0)
