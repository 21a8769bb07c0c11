"""The ingest job's tally and the status line `make up` prints from it."""

from __future__ import annotations

import json
from pathlib import Path

from contracts.config import Config
from deploy.pipeline import Endpoints, Pipeline
from spark_jobs.capture_writer import summarize
from spark_jobs.ingest_status import IngestStatus, percentile


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 50) is None
    values = list(range(1, 101))
    assert percentile(values, 50) == 50 and percentile(values, 99) == 99 and percentile(values, 100) == 100
    assert percentile([7], 99) == 7


def test_batches_add_up_and_the_status_file_follows(tmp_path: Path) -> None:
    status = IngestStatus(tmp_path / "status.json")
    rows = [{"topic": "capture.vehicle", "valid": 90, "unrecognized": 8, "invalid": 2, "latencies_ms": [100] * 90},
            {"topic": "capture.face", "valid": 10, "unrecognized": 0, "invalid": 0, "latencies_ms": [300] * 10}]
    line = status.record(4, summarize(rows), 0.5)
    assert line is not None and line["records"] == 110 and line["latency_ms"]["p99"] == 300
    assert status.record(5, summarize([]), 0.1) is None  # an empty batch prints nothing
    saved = json.loads((tmp_path / "status.json").read_text())
    assert saved["valid"] == {"capture.vehicle": 90, "capture.face": 10} and saved["batches"] == 2
    assert saved["unrecognized"]["capture.vehicle"] == 8 and saved["rows_per_s"] > 0

    pipeline = Pipeline(tmp_path, Endpoints("b:1", "h", 1), Config({}))
    pipeline.status_file = tmp_path / "status.json"
    text = pipeline.status_line()
    assert "rows/s written" in text and "rejected 8 unrecognized + 2 dead letters" in text
    pipeline.status_file = tmp_path / "absent.json"
    assert pipeline.status_line().startswith("ingest: starting Spark")
