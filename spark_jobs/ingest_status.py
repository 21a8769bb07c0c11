"""The ingest job's running tally: a JSON line per batch, the status file `make up` reads, and the
``ingest.stats`` record each batch publishes for the console and the monitor.

Counts are of this process's batches (a replayed batch after a crash counts again here, though
its rows only overwrite themselves in HBase). Rates and latency percentiles of the status file cover
a sliding window of recent batches, which is what an operator watching the status line wants.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter, deque
from pathlib import Path
from typing import Any

from contracts.ingest_stats import BatchTally, LatencyHistogram, stats_record
from contracts.records import now_time
from ingest.producer import RecordProducer

WINDOW_S = 30.0
IDLE_STATS_EVERY_S = 10.0
"""An empty batch publishes a record at most this often: readers tell "idle" from "dead" by it."""
END_TO_END = "capture_to_ingest"


def percentile(values: list[int], q: float) -> int | None:
    """Nearest-rank percentile (q in 0..100) of a list; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100.0 * len(ordered))))
    return ordered[rank - 1]


def _by_topic(tally: BatchTally, name: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for device in tally.devices.values():
        counts[device.topic] += getattr(device, name)
    return counts


class IngestStatus:
    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.started = time.time()
        self.batches = 0
        self.valid: Counter[str] = Counter()
        self.unrecognized: Counter[str] = Counter()
        self.invalid: Counter[str] = Counter()
        self.window: deque[tuple[float, int, int, Counter[int]]] = deque()

    def record(self, batch_id: int, tally: BatchTally, seconds: float) -> dict[str, Any] | None:
        """Add one batch; returns its JSON line (None for an empty batch)."""
        now = time.time()
        totals = tally.totals()
        self.batches += 1
        for name, counter in (("valid", self.valid), ("unrecognized", self.unrecognized), ("invalid", self.invalid)):
            counter.update(_by_topic(tally, name))
        self.window.append((now, totals["read"], tally.rows_written, tally.latency[END_TO_END]))
        while self.window and self.window[0][0] < now - WINDOW_S:
            self.window.popleft()
        self._write()
        if totals["read"] == 0:
            return None
        latency = _histogram(tally.latency[END_TO_END]).summary()
        return {
            "batch": batch_id,
            "records": totals["read"],
            "valid": dict(_by_topic(tally, "valid")),
            "unrecognized": dict(_by_topic(tally, "unrecognized")),
            "invalid": dict(_by_topic(tally, "invalid")),
            "seconds": round(seconds, 3),
            "latency_ms": {"p50": latency["p50"], "p99": latency["p99"], "max": latency["max"]},
        }

    def query_started(self) -> None:
        """Write the status file before any batch: it says the query runs. `make up` starts the capture devices
        then, so that they do not pile up a backlog (and the alerts it raises) while Spark starts."""
        self._write()

    def totals(self) -> dict[str, Any]:
        return {"batches": self.batches, "valid": dict(self.valid), "unrecognized": dict(self.unrecognized),
                "invalid": dict(self.invalid)}

    def snapshot(self) -> dict[str, Any]:
        span = max(min(WINDOW_S, time.time() - self.started), 1e-3)
        merged: Counter[int] = Counter()
        for *_, latencies in self.window:
            merged.update(latencies)
        latency = _histogram(merged)
        return {
            **self.totals(),
            "updated": time.time(),
            "records_per_s": round(sum(w[1] for w in self.window) / span, 1),
            "rows_per_s": round(sum(w[2] for w in self.window) / span, 1),
            "latency_ms": {"p50": latency.percentile(50), "p99": latency.percentile(99)},
        }

    def _write(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.snapshot()))
        tmp.replace(self.path)


def _histogram(counts: Counter[int]) -> LatencyHistogram:
    histogram = LatencyHistogram()
    histogram.record_counts(counts)
    return histogram


class StatsPublisher:
    """Publishes each batch's ``ingest.stats`` record (key: the job id) without waiting for the ack.

    Stats are observations, not data: a lost one costs a point on a chart, so the batch never waits
    for them; delivery failures are counted and logged by the caller through ``failures``.
    """

    def __init__(self, producer: RecordProducer, topic: str, job: str) -> None:
        self.producer = producer
        self.topic = topic
        self.job = job
        self.failures = 0
        self._last = time.time()

    def publish(self, batch_id: int, tally: BatchTally, duration_s: float, topic: str | None = None) -> bool:
        """Publish the batch's record to ``topic`` (default: the job's stats topic); whether one was sent."""
        now = time.time()
        if not tally.devices and now - self._last < IDLE_STATS_EVERY_S:
            return False
        record = stats_record(self.job, batch_id, now_time(), now - self._last, duration_s, tally)
        self._last = now
        try:
            self.producer.produce(topic or self.topic, self.job.encode(),
                                  json.dumps(record, separators=(",", ":")).encode(), self._delivered)
        except Exception as exc:  # refused at once, e.g. over the size limit (refused records naming many devices)
            self._delivered(f"{type(exc).__name__}: {exc}")
            return False
        self.producer.poll(0)
        return True

    def _delivered(self, error: str | None) -> None:
        if error is not None:
            self.failures += 1

    def close(self) -> None:
        self.producer.flush(10)

