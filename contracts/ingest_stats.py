"""The ``ingest.stats`` record: what one micro-batch of the capture ingest job did (docs/architecture.md).

The ingest job publishes one per non-empty micro-batch (and an empty one now and then, so "idle"
and "dead" can be told apart); the console's overview and the monitor read them. Per device and
recogniser it counts the records read, valid, unrecognised and invalid (quality monitoring compares
them with what the device says it produced), and per stage it carries the latency distribution as
an HdrHistogram (base64, mergeable: the monitor adds batches into per-minute and per-hour series
without losing percentiles):

* ``capture_to_bus``: capture time -> the record's timestamp on the bus (device and recogniser delay);
* ``bus_to_read``: bus timestamp -> the Spark task read it (queueing in the bus and trigger wait);
* ``read_to_write``: read -> its row written to HBase;
* ``capture_to_ingest``: capture time -> written (the end-to-end latency the book's figure 10-6 plots).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram

STAGES = ("capture_to_bus", "bus_to_read", "read_to_write", "capture_to_ingest")
MAX_LATENCY_MS = 7 * 24 * 3600 * 1000
"""Latencies above a week are clamped: a device clock that far off is a data-quality fault, not a latency."""
_SIGNIFICANT_DIGITS = 2  # 1 % resolution: plenty for p99 of milliseconds, and small encodings


class LatencyHistogram:
    """Milliseconds in an HdrHistogram: recorded in bulk, merged, encoded for the bus."""

    def __init__(self, histogram: HdrHistogram | None = None) -> None:
        self.histogram = histogram or HdrHistogram(1, MAX_LATENCY_MS, _SIGNIFICANT_DIGITS)

    def record_counts(self, counts: Mapping[int, int]) -> None:
        """Add ``value -> how many``: one call per distinct millisecond value, not per record."""
        for value, count in counts.items():
            self.histogram.record_value(min(max(value, 1), MAX_LATENCY_MS), count)

    def merge(self, other: LatencyHistogram) -> None:
        self.histogram.add(other.histogram)

    @property
    def count(self) -> int:
        return self.histogram.get_total_count()

    def percentile(self, q: float) -> int | None:
        return self.histogram.get_value_at_percentile(q) if self.count else None

    def summary(self) -> dict[str, int | None]:
        if not self.count:
            return {"p50": None, "p95": None, "p99": None, "max": None, "count": 0}
        return {"p50": self.percentile(50), "p95": self.percentile(95), "p99": self.percentile(99),
                "max": self.histogram.get_max_value(), "count": self.count}

    def encode(self) -> str:
        return self.histogram.encode().decode()

    @classmethod
    def decode(cls, text: str) -> LatencyHistogram:
        try:
            return cls(HdrHistogram.decode(text.encode()))
        except Exception as exc:  # hdrh raises its own, zlib and binascii errors for damaged input
            raise ValueError(f"not an encoded histogram: {exc!r}") from None


@dataclass
class DeviceCounts:
    """One device's records in a batch. ``read = valid + unrecognized + invalid``."""

    device_ip: str
    recognizer_ip: str
    checkpoint_id: str
    topic: str
    valid: int = 0
    unrecognized: int = 0
    invalid: int = 0

    @property
    def read(self) -> int:
        return self.valid + self.unrecognized + self.invalid


@dataclass
class BatchTally:
    """What tasks count and the driver merges: per-device counts and per-stage latency values.

    Tasks keep raw ``ms -> count`` counters (cheap per record); histograms are built once per batch.
    """

    devices: dict[tuple[str, str], DeviceCounts] = field(default_factory=dict)
    latency: dict[str, Counter[int]] = field(default_factory=lambda: {s: Counter() for s in STAGES})
    rows_written: int = 0

    def device(self, topic: str, device_ip: str, recognizer_ip: str, checkpoint_id: str) -> DeviceCounts:
        key = (topic, device_ip)
        counts = self.devices.get(key)
        if counts is None:
            counts = self.devices[key] = DeviceCounts(device_ip, recognizer_ip, checkpoint_id, topic)
        return counts

    def merge(self, other: BatchTally) -> None:
        for (topic, ip), theirs in other.devices.items():
            ours = self.device(topic, ip, theirs.recognizer_ip, theirs.checkpoint_id)
            ours.valid += theirs.valid
            ours.unrecognized += theirs.unrecognized
            ours.invalid += theirs.invalid
        for stage, values in other.latency.items():
            self.latency[stage].update(values)
        self.rows_written += other.rows_written

    def totals(self) -> dict[str, int]:
        devices = self.devices.values()
        return {"read": sum(d.read for d in devices), "valid": sum(d.valid for d in devices),
                "unrecognized": sum(d.unrecognized for d in devices), "invalid": sum(d.invalid for d in devices)}

    def to_json(self) -> str:
        """The task -> driver form (one string per task: the job's only action stays one small collect)."""
        return json.dumps({"devices": [asdict(d) for d in self.devices.values()],
                           "latency": {s: list(c.items()) for s, c in self.latency.items()},
                           "rows_written": self.rows_written}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> BatchTally:
        data = json.loads(text)
        tally = cls(rows_written=data["rows_written"])
        for d in data["devices"]:
            tally.devices[(d["topic"], d["device_ip"])] = DeviceCounts(**d)
        for stage, pairs in data["latency"].items():
            tally.latency[stage] = Counter(dict(pairs))
        return tally


def stats_record(job: str, batch_id: int, time: str, window_s: float, duration_s: float,
                 tally: BatchTally) -> dict[str, Any]:
    """The ``ingest.stats`` value for one batch (key: the job id)."""
    latency: dict[str, Any] = {}
    for stage in STAGES:
        histogram = LatencyHistogram()
        histogram.record_counts(tally.latency[stage])
        latency[stage] = {**histogram.summary(), "hdr": histogram.encode()}
    return {
        "job": job, "batch_id": batch_id, "time": time, "window_s": round(window_s, 3),
        "duration_s": round(duration_s, 3), **tally.totals(), "rows_written": tally.rows_written,
        "latency_ms": latency,
        "devices": [{**asdict(d), "read": d.read} for d in sorted(tally.devices.values(),
                                                                   key=lambda d: (d.topic, d.device_ip))],
    }


class StatsError(ValueError):
    """An ``ingest.stats`` value that is not one (consumers count and skip it)."""


@dataclass(frozen=True)
class IngestStats:
    """A parsed ``ingest.stats`` record, as consumers (console, monitor) see it."""

    job: str
    batch_id: int
    time: str
    window_s: float
    read: int
    valid: int
    unrecognized: int
    invalid: int
    rows_written: int
    latency: dict[str, LatencyHistogram]
    devices: tuple[DeviceCounts, ...]


def parse_stats(raw: bytes | str | Mapping[str, Any] | None) -> IngestStats:
    """A record from its bytes (or its already-decoded JSON); StatsError says what is wrong with it."""
    try:
        data = raw if isinstance(raw, Mapping) or raw is None else json.loads(raw)
        if not isinstance(data, Mapping):
            raise StatsError("not a JSON object")
        latency = {stage: LatencyHistogram.decode(value["hdr"]) for stage, value in data["latency_ms"].items()
                   if stage in STAGES and value.get("hdr")}
        devices = tuple(DeviceCounts(d["device_ip"], d["recognizer_ip"], d["checkpoint_id"], d["topic"],
                                     int(d["valid"]), int(d["unrecognized"]), int(d["invalid"]))
                        for d in data["devices"])
        return IngestStats(str(data["job"]), int(data["batch_id"]), str(data["time"]), float(data["window_s"]),
                           int(data["read"]), int(data["valid"]), int(data["unrecognized"]), int(data["invalid"]),
                           int(data["rows_written"]), latency, devices)
    except StatsError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StatsError(f"malformed ingest.stats record: {exc!r}") from None


def merge_latency(records: Iterable[IngestStats], stage: str) -> LatencyHistogram:
    """One histogram over several batches (a minute, an hour, a dashboard window)."""
    merged = LatencyHistogram()
    for record in records:
        if stage in record.latency:
            merged.merge(record.latency[stage])
    return merged
