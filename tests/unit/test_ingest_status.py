"""The ingest job's tally and the status line `make up` prints from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contracts.config import Config
from contracts.ingest_stats import BatchTally, parse_stats
from deploy.pipeline import Endpoints, Pipeline
from spark_jobs.ingest_status import IngestStatus, StatsPublisher, percentile


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 50) is None
    values = list(range(1, 101))
    assert percentile(values, 50) == 50 and percentile(values, 99) == 99 and percentile(values, 100) == 100
    assert percentile([7], 99) == 7


def _tally(vehicle: tuple[int, int, int], face: tuple[int, int, int], latencies: dict[int, int]) -> BatchTally:
    tally = BatchTally()
    for topic, (valid, unrecognized, invalid) in (("capture.vehicle", vehicle), ("capture.face", face)):
        counts = tally.device(topic, "10.1.1.1", "10.200.0.1", "330102#1#0#0")
        counts.valid, counts.unrecognized, counts.invalid = valid, unrecognized, invalid
    tally.latency["capture_to_ingest"].update(latencies)
    tally.rows_written = sum(vehicle[:2]) + sum(face[:2])
    return tally


def test_batches_add_up_and_the_status_file_follows(tmp_path: Path) -> None:
    status = IngestStatus(tmp_path / "status.json")
    line = status.record(4, _tally((90, 8, 2), (10, 0, 0), {100: 90, 300: 10}), 0.5)
    assert line is not None and line["records"] == 110
    assert 300 <= line["latency_ms"]["p99"] <= 303, "HdrHistogram keeps 2 significant digits"
    assert status.record(5, BatchTally(), 0.1) is None  # an empty batch prints nothing
    saved = json.loads((tmp_path / "status.json").read_text())
    assert saved["valid"] == {"capture.vehicle": 90, "capture.face": 10} and saved["batches"] == 2
    assert saved["unrecognized"]["capture.vehicle"] == 8 and saved["rows_per_s"] > 0

    pipeline = Pipeline(tmp_path, Endpoints("b:1", "h", 1), Config({}))
    pipeline.status_file = tmp_path / "status.json"
    text = pipeline.status_line()
    assert "rows/s written" in text and "rejected 8 unrecognized + 2 dead letters" in text
    pipeline.status_file = tmp_path / "absent.json"
    assert pipeline.status_line().startswith("ingest: starting Spark")
    assert not pipeline.ready()


def test_the_status_file_says_the_query_runs_before_its_first_batch(tmp_path: Path) -> None:
    """`make up` starts the capture devices once the job's query runs: the job writes its status file then."""
    pipeline = Pipeline(tmp_path, Endpoints("b:1", "h", 1), Config({}))
    assert not pipeline.ready()
    IngestStatus(pipeline.status_file).query_started()
    assert pipeline.ready()
    assert json.loads(pipeline.status_file.read_text())["batches"] == 0
    assert pipeline.status_line() == "ingest: the job runs; the capture devices come online"


class _Recorded:
    """A RecordProducer that keeps what it was given (the publisher's logic, without a broker)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []

    def produce(self, topic: str, key: bytes, value: bytes, on_delivery: Any) -> None:
        self.sent.append((topic, key, value))
        on_delivery(None)

    def poll(self, timeout: float = 0.0) -> None:
        pass

    def flush(self, timeout: float) -> int:
        return 0


def test_stats_record_per_batch_and_idle_ones_rarely() -> None:
    producer = _Recorded()
    publisher = StatsPublisher(producer, "ingest.stats", "job-a")  # type: ignore[arg-type]
    assert publisher.publish(1, _tally((5, 1, 1), (2, 0, 0), {120: 7}), 0.2)
    assert not publisher.publish(2, BatchTally(), 0.1), "an idle batch right after a busy one publishes nothing"
    topic, key, value = producer.sent[0]
    stats = parse_stats(value)
    assert (topic, key) == ("ingest.stats", b"job-a")
    assert (stats.read, stats.valid, stats.unrecognized, stats.invalid, stats.rows_written) == (9, 7, 1, 1, 8)
    assert stats.latency["capture_to_ingest"].percentile(99) == 120
    assert {d.topic for d in stats.devices} == {"capture.vehicle", "capture.face"}
