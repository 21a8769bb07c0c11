"""The overview's state: folds of the hub's ``ingest.stats`` and ``alerts`` records, and cached health.

Everything ``GET /api/v1/overview`` returns is computed from memory (p99 <= 50 ms means no backend
round trip per request):

* rates: per job, the records read (rows written) over the last ``window_s`` seconds of batches divided
  by the time those batches covered (their ``window_s``), summed over jobs; rejected counts are the
  window's ``invalid`` and ``unrecognized``. Batches are placed in time by their bus timestamp (the
  hub re-reads the last window at start, so a restarted console shows figures at once);
* latency: capture -> HBase p50 and p99 of every record written in the window, from the batches'
  HdrHistograms merged (exact to 1 %, whatever the number of jobs and batches);
* open alerts: the ``alerts`` topic folded by key (the fingerprint) to its latest ``status``;
* health: :meth:`Backends.health` every ``health_interval_s`` in the background.

A record that is not a usable batch or alert is set aside, counted and logged (``web.metrics.skipped``)
before it reaches the folds, so the answer can always be computed: a count or a window no batch can
have, or a latency histogram that does not merge into ours, would otherwise fail every request for a
whole window; an alert without a key or a status would close or open one that is not there.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import threading
import time
from typing import Any

from starlette.concurrency import run_in_threadpool

from contracts.alerts import FIRING, RESOLVED
from contracts.ingest_stats import IngestStats, LatencyHistogram, StatsError, merge_latency, parse_stats
from contracts.topics import Topics
from web.backends import Backends
from web.events import EventHub, HistorySpec
from web.metrics import skipped
from web.models.health import BackendHealth, Health
from web.models.overview import IngestFigures, LatencyFigures, OverviewOut

LATENCY_STAGE = "capture_to_ingest"
"""The stage the overview shows: capture time -> row written to HBase."""
READER = "overview"
"""This reader's label in ``console_bus_records_skipped_total``."""
MAX_COUNT = 2**63 - 1
"""No batch reads or writes more records than a Kafka offset can count."""
MIN_WINDOW_S = 0.001
"""``ingest.stats`` rounds a batch's window to milliseconds: 0 (nothing to rate) or at least this."""


def unusable(batch: IngestStats) -> str | None:
    """Why the overview cannot fold ``batch`` (None when it can): the rates it is summed into must stay
    finite, and its histograms must merge into the overview's (same range)."""
    counts = (batch.read, batch.valid, batch.unrecognized, batch.invalid, batch.rows_written)
    if not all(0 <= count <= MAX_COUNT for count in counts):
        return "count out of range"
    if batch.window_s != 0 and not MIN_WINDOW_S <= batch.window_s < math.inf:
        return "window out of range"
    try:
        for histogram in batch.latency.values():
            LatencyHistogram().merge(histogram)
    except Exception:  # hdrh refuses a histogram of another range with its own errors
        return "histogram out of range"
    return None


class Overview:
    def __init__(self, topics: Topics, hub: EventHub, window_s: float = 60.0, health_interval_s: float = 5.0) -> None:
        self.topics = topics
        self.hub = hub
        self.window_s = window_s
        self.health_interval_s = health_interval_s
        self._batches: collections.deque[tuple[int, IngestStats]] = collections.deque()
        self._alerts: dict[bytes, bool] = {}
        self._health: Health | None = None
        self._health_at = 0.0
        self._lock = threading.Lock()
        self._task: asyncio.Task[None] | None = None
        hub.history[topics.alerts] = HistorySpec()
        hub.history[topics.ingest_stats] = HistorySpec(since_s=window_s)
        hub.add_listener(self.observe)

    # -- folds (called in the hub's consumer thread) ----------------------------------------------
    def observe(self, topic: str, key: bytes | None, value: Any, timestamp_ms: int) -> None:
        if topic == self.topics.ingest_stats:
            if not isinstance(value, dict):  # the hub found no JSON object: nothing for parse_stats to read again
                skipped(READER, topic, "not a JSON object")
                return
            try:
                batch = parse_stats(value)
            except StatsError as exc:
                skipped(READER, topic, "malformed", exc)
                return
            problem = unusable(batch)
            if problem is not None:
                skipped(READER, topic, problem, f"job {batch.job!r} batch {batch.batch_id}")
                return
            if batch.window_s > 0:
                with self._lock:
                    self._batches.append((timestamp_ms, batch))
                    self._prune(time.time() * 1000)
        elif topic == self.topics.alerts:
            status = value.get("status") if isinstance(value, dict) else None
            if key is None:
                skipped(READER, topic, "no key", "an alert is keyed by its fingerprint")
            elif value is not None and status not in (FIRING, RESOLVED):
                skipped(READER, topic, "not an alert", f"status {str(status)[:40]!r}")
            else:
                with self._lock:
                    if status == FIRING:
                        self._alerts[key] = True
                    else:  # resolved, or a tombstone
                        self._alerts.pop(key, None)

    def _prune(self, now_ms: float) -> None:
        oldest = now_ms - self.window_s * 1000
        while self._batches and self._batches[0][0] < oldest:
            self._batches.popleft()

    # -- health -----------------------------------------------------------------------------------
    def set_health(self, errors: dict[str, str | None]) -> None:
        health = Health(**{name: BackendHealth(up=error is None, error=error) for name, error in errors.items()})
        with self._lock:
            self._health, self._health_at = health, time.monotonic()

    async def _refresh_health(self, backends: Backends) -> None:
        while True:
            self.set_health(await run_in_threadpool(backends.health))
            await asyncio.sleep(self.health_interval_s)

    def start(self, backends: Backends) -> None:
        self._task = asyncio.get_running_loop().create_task(self._refresh_health(backends))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    # -- the answer -------------------------------------------------------------------------------
    def snapshot(self) -> OverviewOut:
        now_ms = time.time() * 1000
        with self._lock:
            self._prune(now_ms)
            batches = list(self._batches)
            alerts = sum(self._alerts.values())
            health, health_at = self._health, self._health_at
        return OverviewOut(ingest=self._ingest(batches, now_ms), health=health,
                           health_age_s=round(time.monotonic() - health_at, 3) if health else None,
                           open_alerts=alerts if self.hub.history_loaded(self.topics.alerts) else None)

    def _ingest(self, batches: list[tuple[int, IngestStats]], now_ms: float) -> IngestFigures:
        if not batches:
            return IngestFigures(window_s=self.window_s, batches=0, records_per_s=None, rows_per_s=None,
                                 latency_ms=LatencyFigures(p50=None, p99=None), invalid=None, unrecognized=None,
                                 last_batch_age_s=None)
        jobs: dict[str, list[IngestStats]] = collections.defaultdict(list)
        for _ts, batch in batches:
            jobs[batch.job].append(batch)
        records = sum(sum(b.read for b in job) / sum(b.window_s for b in job) for job in jobs.values())
        rows = sum(sum(b.rows_written for b in job) / sum(b.window_s for b in job) for job in jobs.values())
        merged = merge_latency((b for _ts, b in batches), LATENCY_STAGE)
        latency = LatencyFigures(p50=merged.percentile(50), p99=merged.percentile(99))
        return IngestFigures(window_s=self.window_s, batches=len(batches), records_per_s=round(records, 3),
                             rows_per_s=round(rows, 3), latency_ms=latency,
                             invalid=sum(b.invalid for _ts, b in batches),
                             unrecognized=sum(b.unrecognized for _ts, b in batches),
                             last_batch_age_s=round(max(0.0, now_ms - batches[-1][0]) / 1000, 3))
