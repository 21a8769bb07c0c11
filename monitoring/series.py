"""Per-minute and per-hour series, accumulated in memory and flushed to HBase (``monitoring_series``).

Counts (``quality``: produced, valid, unrecognized, invalid) are kept per scope (city, district,
recogniser, device); latency histograms (``latency``) per stage for the city. A bucket touched for
the first time since start-up starts from what HBase already holds for that hour (read in bulk at
the next flush), so a restarted monitor continues the day instead of overwriting it.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from contracts.ingest_stats import LatencyHistogram
from contracts.tables.monitoring import HOUR_COLUMN, LATENCY, QUALITY, minute_column, series_key

from .store import Store

Value = Counter[str] | LatencyHistogram
BucketId = tuple[str, str, int]
"""(metric, tags, hour start in epoch seconds)."""


def _empty(metric: str) -> Value:
    return LatencyHistogram() if metric == LATENCY else Counter()


def _add(into: Value, more: Value) -> None:
    if isinstance(into, LatencyHistogram):
        into.merge(more)  # type: ignore[arg-type]
    else:
        into.update(more)  # type: ignore[arg-type]


def encode(value: Value) -> bytes:
    if isinstance(value, LatencyHistogram):
        return value.encode().encode()
    return json.dumps(dict(value), separators=(",", ":"), sort_keys=True).encode()


def decode(metric: str, raw: bytes) -> Value:
    return LatencyHistogram.decode(raw.decode()) if metric == LATENCY else Counter(json.loads(raw))


@dataclass
class HourBucket:
    metric: str
    minutes: dict[int, Value] = field(default_factory=dict)
    hour: Value | None = None
    loaded: bool = False

    def add(self, minute: int, value: Value) -> None:
        _add(self.minutes.setdefault(minute, _empty(self.metric)), value)
        if self.hour is None:
            self.hour = _empty(self.metric)
        _add(self.hour, value)

    def absorb_stored(self, cells: dict[bytes, bytes]) -> None:
        """Put what HBase held underneath what was added since start-up."""
        for column, raw in cells.items():
            stored = decode(self.metric, raw)
            if column == HOUR_COLUMN:
                if self.hour is not None:
                    _add(stored, self.hour)
                self.hour = stored
            else:
                minute = int(column.split(b":", 1)[1])
                if minute in self.minutes:
                    _add(stored, self.minutes[minute])
                self.minutes[minute] = stored
        self.loaded = True

    def cells(self) -> dict[bytes, bytes]:
        out = {minute_column(m): encode(v) for m, v in self.minutes.items()}
        if self.hour is not None:
            out[HOUR_COLUMN] = encode(self.hour)
        return out


def quality_scopes(district: str, recognizer_ip: str, device_ip: str) -> tuple[str, ...]:
    return ("city", f"district={district}", f"recognizer={recognizer_ip}", f"device={device_ip}")


class Series:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.buckets: dict[BucketId, HourBucket] = {}
        self.dirty: set[BucketId] = set()
        self.newest_hour = 0

    def _add(self, metric: str, tags: str, t: float, value: Value) -> None:
        hour = int(t // 3600 * 3600)
        self.newest_hour = max(self.newest_hour, hour)
        bucket_id = (metric, tags, hour)
        bucket = self.buckets.get(bucket_id)
        if bucket is None:
            bucket = self.buckets[bucket_id] = HourBucket(metric)
        bucket.add(int(t % 3600 // 60), value)
        self.dirty.add(bucket_id)

    def add_counts(self, scopes: tuple[str, ...], t: float, counts: dict[str, int]) -> None:
        counts = {k: v for k, v in counts.items() if v}
        if counts:
            for scope in scopes:
                self._add(QUALITY, f"scope={scope}", t, Counter(counts))

    def add_latency(self, stage: str, t: float, histogram: LatencyHistogram) -> None:
        if histogram.count:
            copy = LatencyHistogram()
            copy.merge(histogram)
            self._add(LATENCY, f"stage={stage}", t, copy)

    def flush(self) -> int:
        """Write every changed bucket; returns how many rows were written."""
        if not self.dirty:
            return 0
        keys = {bucket_id: series_key(*bucket_id) for bucket_id in self.dirty}
        unloaded = [keys[b] for b in self.dirty if not self.buckets[b].loaded]
        stored = self.store.series_rows(unloaded)
        for bucket_id in self.dirty:
            bucket = self.buckets[bucket_id]
            if not bucket.loaded:
                bucket.absorb_stored(stored.get(keys[bucket_id], {}))
        self.store.put_series({keys[b]: self.buckets[b].cells() for b in self.dirty})
        written = len(self.dirty)
        self.dirty.clear()
        for bucket_id in [b for b in self.buckets if b[2] < self.newest_hour - 3600]:
            del self.buckets[bucket_id]
        return written
