"""What the console reads from an ``ingest.stats`` record, parsed tolerantly, in one place.

The record's shape belongs to the ingest job (``contracts/ingest_stats.py`` once it lands); the
overview needs only a few fields, so this module picks them out and survives additions, missing
fields and wrong types (a record it cannot use at all is None, and the overview skips it). If the
shape changes, this is the one place to follow it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

LATENCY_STAGE = "capture_to_ingest"
"""The stage the overview shows: capture time -> row written to HBase."""


@dataclass(frozen=True)
class StageLatency:
    p50: float
    p99: float
    count: int


@dataclass(frozen=True)
class BatchFigures:
    job: str
    batch_id: int
    window_s: float
    read: int
    rows_written: int
    invalid: int
    unrecognized: int
    latency: StageLatency | None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _latency(value: Any) -> StageLatency | None:
    stages = value.get("latency_ms") if isinstance(value, dict) else None
    stage = stages.get(LATENCY_STAGE) if isinstance(stages, dict) else None
    if not isinstance(stage, dict):
        return None
    p50, p99, count = _number(stage.get("p50")), _number(stage.get("p99")), _count(stage.get("count"))
    return StageLatency(p50, p99, count) if p50 is not None and p99 is not None and count else None


def parse_batch(value: Any) -> BatchFigures | None:
    """The figures of one batch record, or None when it names no job or no positive window."""
    if not isinstance(value, dict) or not isinstance(value.get("job"), str):
        return None
    window_s = _number(value.get("window_s"))
    if not window_s:
        return None
    return BatchFigures(job=value["job"], batch_id=_count(value.get("batch_id")), window_s=window_s,
                        read=_count(value.get("read")), rows_written=_count(value.get("rows_written")),
                        invalid=_count(value.get("invalid")), unrecognized=_count(value.get("unrecognized")),
                        latency=_latency(value))
