"""``GET /api/v1/overview`` through a real console, fed ``ingest.stats`` and ``alerts`` records on the bus."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
from hdrh.histogram import HdrHistogram

from contracts.ingest_stats import BatchTally, stats_record
from contracts.records import now_time
from deploy.processes.console import ConsoleProcess
from tests.web._bad_records import skipped_counts
from tests.web.test_events import produce

STATS = "ingest.stats"
ALERTS = "alerts"


def stats(job: str, batch_id: int, read: int, rows: int, latency_ms: dict[int, int],
          invalid: int = 0, unrecognized: int = 0, window_s: float = 2.0) -> dict[str, Any]:
    """A record as the ingest job publishes it (contracts.ingest_stats.stats_record), for one device."""
    tally = BatchTally(rows_written=rows)
    counts = tally.device("capture.vehicle", "10.1.1.1", "10.200.0.1", "330102#1#0#0")
    counts.valid, counts.unrecognized, counts.invalid = read - invalid - unrecognized, unrecognized, invalid
    tally.latency["capture_to_ingest"].update(latency_ms)
    return stats_record(job, batch_id, now_time(), window_s, 0.1, tally)


def overview_until(console: ConsoleProcess, done: Callable[[dict[str, Any]], bool], timeout: float = 30
                   ) -> dict[str, Any]:
    client = console.client("viewer")
    deadline = time.monotonic() + timeout
    while True:
        body = client.get("/api/v1/overview").json()
        if done(body):
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.2)


def test_overview_figures_from_stats_and_alerts(console: ConsoleProcess,
                                                make_console: Callable[..., ConsoleProcess]) -> None:
    fresh = make_console()
    before = overview_until(fresh, lambda b: b["open_alerts"] is not None and b["health"] is not None)
    # Nothing reported yet: null, never invented zeros.
    assert before["ingest"] == {"window_s": 60.0, "batches": 0, "records_per_s": None, "rows_per_s": None,
                                "latency_ms": {"p50": None, "p99": None}, "invalid": None, "unrecognized": None,
                                "last_batch_age_s": None}
    assert before["open_alerts"] == 0
    assert before["health"]["bus"]["up"] and before["health"]["hbase"]["up"]
    assert not before["health"]["object_store"]["up"] and before["health"]["object_store"]["error"]

    # job a: 600 records (580 rows) over 6 s of batches: 100/s; job b: 100 over 2 s: 50/s. Unusable records are skipped.
    wide = HdrHistogram(1, 10**12, 3)
    wide.record_value(10**11)
    foreign = wide.encode().decode()
    produce(fresh, STATS, stats("a", 1, 200, 190, {10: 100}, invalid=5))
    produce(fresh, STATS, stats("a", 2, 400, 390, {30: 300}, unrecognized=7, window_s=4.0))
    produce(fresh, STATS, b"not json at all")
    produce(fresh, STATS, {"batch_id": 3, "read": 10**9})  # no job
    produce(fresh, STATS, {**stats("c", 1, 10**9, 0, {}), "window_s": 0})  # no window
    # Figures no batch can have would fail every answer for a minute (a histogram of another range does not
    # merge; a rate over a window of 1e-300 s is infinite) or falsify it.
    produce(fresh, STATS, {**stats("d", 1, 10, 10, {}), "latency_ms": {"capture_to_ingest": {"hdr": foreign}}})
    produce(fresh, STATS, {**stats("e", 1, 10, 10, {}), "window_s": 1e-300})
    produce(fresh, STATS, {**stats("f", 1, 10**30, 10, {})})
    produce(fresh, STATS, stats("b", 9, 100, 100, {70: 100}))
    produce(fresh, ALERTS, {"status": "firing", "name": "x"}, key=b"fp-1")
    produce(fresh, ALERTS, {"status": "firing", "name": "y"}, key=b"fp-2")
    produce(fresh, ALERTS, {"status": "resolved", "name": "x"}, key=b"fp-1")
    # Not alerts: no key (whose would it be?), and no status (it closes nothing).
    produce(fresh, ALERTS, {"status": "firing", "name": "z"})
    produce(fresh, ALERTS, b"[1, 2, 3]", key=b"fp-2")
    produce(fresh, ALERTS, {"name": "y"}, key=b"fp-2")

    def complete(body: dict[str, Any]) -> bool:
        return body["ingest"]["batches"] == 3 and body["open_alerts"] == 1

    expected_ingest = {"records_per_s": 150.0, "rows_per_s": 146.667, "invalid": 5, "unrecognized": 7,
                       # every record of the window, histograms merged: 100 x 10 ms, 300 x 30 ms, 100 x 70 ms
                       "latency_ms": {"p50": 30.0, "p99": 70.0}}
    body = overview_until(fresh, complete)
    assert {k: body["ingest"][k] for k in expected_ingest} == expected_ingest
    assert 0 <= body["ingest"]["last_batch_age_s"] < 30
    assert skipped_counts(httpx.get(f"{fresh.url}/metrics").text, "overview") == {
        (STATS, "not a JSON object"): 1, (STATS, "malformed"): 1, (STATS, "histogram out of range"): 1,
        (STATS, "window out of range"): 1, (STATS, "count out of range"): 1, (ALERTS, "no key"): 1,
        (ALERTS, "not an alert"): 2}

    # A console started now re-reads the last minute of stats and all alerts: same figures at once.
    restarted = overview_until(make_console(), complete)
    assert {k: restarted["ingest"][k] for k in expected_ingest} == expected_ingest
    assert restarted["open_alerts"] == 1
