"""A scripted city on the bus and a webhook receiver, for the monitor's tests and benchmarks/monitoring.py.

The city publishes what the simulator and the ingest job publish (``device.heartbeat`` with
cumulative counters, ``ingest.stats`` built with ``contracts.ingest_stats.stats_record``), but with
each device's fault chosen by the caller: ``ok``, ``blurred`` (80 % unreadable), ``silent`` (nothing
at all) or ``flapping`` (blurred and ok by turns), so the expected alerts are known exactly.
`WebhookReceiver` is the real HTTP server the monitor's alerts are sent to.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from confluent_kafka import Producer

from contracts.deployment_map import Checkpoint, DeploymentMap, Device, District, Recognizer
from contracts.ingest_stats import BatchTally, stats_record
from contracts.records import CITY_TZ, format_time


def city_map(recognizers: dict[str, list[str]]) -> DeploymentMap:
    """One checkpoint per device, district by recogniser (``1101xx``), crossroad = device index."""
    districts, checkpoints, devices = [], [], []
    for r, (recognizer, ips) in enumerate(sorted(recognizers.items())):
        code = f"1101{r:02d}"
        districts.append(District(code, f"district {r}"))
        for n, ip in enumerate(ips):
            cp = f"{code}#{n}#0#0"
            checkpoints.append(Checkpoint(cp, code, n, "N", 30.0 + n / 100, 120.0 + r / 100, 2, ip, None))
            devices.append(Device(ip, cp, "vehicle", recognizer))
    return DeploymentMap(tuple(districts), tuple(checkpoints), tuple(devices),
                         tuple(Recognizer(k, tuple(v)) for k, v in sorted(recognizers.items())))



@dataclass
class ScriptedCity:
    """Devices (ip -> recogniser) publishing every ``tick_s``; ``modes`` may be changed while it runs."""

    bootstrap: str
    devices: dict[str, str]
    rate: int = 10
    tick_s: float = 0.5
    modes: dict[str, str] = field(default_factory=dict)
    produced: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> ScriptedCity:
        self._producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "log_level": 3})
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._batch = 0
        self._started = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(10)

    def mode(self, ip: str, now: float) -> str:
        mode = self.modes.get(ip, "ok")
        if mode == "flapping":
            return "blurred" if int((now - self._started) / 1.5) % 2 else "ok"
        return mode

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            self.tick()

    def tick(self) -> None:
        now = time.monotonic()
        stamp = format_time(datetime.now(CITY_TZ))
        tally = BatchTally()
        for ip, recognizer in self.devices.items():
            mode = self.mode(ip, now)
            if mode == "silent":
                continue
            self.produced[ip] = self.produced.get(ip, 0) + self.rate
            counts = tally.device("capture.vehicle", ip, recognizer, f"cp-{ip}")
            bad = self.rate * 8 // 10 if mode == "blurred" else 0
            counts.valid += self.rate - bad
            counts.unrecognized += bad
            tally.latency["capture_to_ingest"][800] += self.rate
            beat = {"device_ip": ip, "checkpoint_id": f"cp-{ip}", "recognizer_ip": recognizer,
                    "topic": "capture.vehicle", "time": stamp, "status": "ok", "produced": self.produced[ip],
                    "unrecognized": 0}
            self._producer.produce("device.heartbeat", json.dumps(beat).encode(), ip.encode())
        self._batch += 1
        record = stats_record("test-ingest", self._batch, stamp, self.tick_s, 0.01, tally)
        self._producer.produce("ingest.stats", json.dumps(record).encode(), b"test-ingest")
        self._producer.poll(0)



class WebhookReceiver:
    """A real HTTP server that keeps every Alertmanager payload it is sent."""

    def __init__(self) -> None:
        received: list[dict[str, Any]] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, status: str | None = None) -> list[dict[str, Any]]:
        """Every alert of every payload, in order (``status`` firing/resolved to filter)."""
        return [a for p in list(self.received) for a in p["alerts"] if status is None or a["status"] == status]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
